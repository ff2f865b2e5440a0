package kafka

import (
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestSourceRewindsToWhatACheckpointRead: an unbounded source that started
// at the end of its topic reads some records of each kind (plain,
// transactional, aborted: never seen) and snapshots; readers rewound to the
// snapshot, at another parallelism, read exactly the records read before
// it — none from before the start, none after the snapshot.
func TestSourceRewindsToWhatACheckpointRead(t *testing.T) {
	brokers := broker(t, "lines")
	produce(t, brokers, "lines", "", values("before", 30)...)
	newReader, err := Source(SourceConfig[string]{Brokers: brokers, Topics: []string{"lines"}, Start: Latest, Decode: StringValue, BatchSize: 7})
	if err != nil {
		t.Fatal(err)
	}
	run := &operatortest.Run{}
	defer run.Close()
	w := &operatortest.MemWriter{}
	var readers []weir.SourceReader[string]
	var before collected
	var handles []checkpoint.Handle
	for sub := range 2 {
		r := newReader()
		if err := r.Open(run.Context("kafka", sub, 2, nil)); err != nil {
			t.Fatal(err)
		}
		readers = append(readers, r)
	}
	produce(t, brokers, "lines", "", values("plain", 60)...)
	produce(t, brokers, "lines", "producer", values("txn", 60)...)
	produce(t, brokers, "lines", "producer-aborted", values("aborted", 30)...)
	for _, r := range readers {
		// Some of each subtask's partitions' 80 records, not all.
		for n := len(before); len(before) < n+30; {
			if _, err := r.Read(&before); err != nil {
				t.Fatal(err)
			}
		}
		async, err := r.Snapshot(1)
		if err != nil {
			t.Fatal(err)
		}
		hs, err := async(w)
		if err != nil {
			t.Fatal(err)
		}
		handles = append(handles, hs...)
		r.Close()
	}
	produce(t, brokers, "lines", "", values("after", 10)...)
	var again collected
	for sub := range 3 {
		r := newReader()
		ctx := run.Context("kafka", sub, 3, &operator.Restore{Checkpoint: 1, Handles: handles, Read: w.Read})
		ctx.Rewind = true
		if err := r.Open(ctx); err != nil {
			t.Fatal(err)
		}
		drain(t, r, &again)
		r.Close()
	}
	slices.Sort(before)
	slices.Sort(again)
	if !slices.Equal(again, before) {
		t.Fatalf("rewound: read %d records, want the %d read before the snapshot", len(again), len(before))
	}
	for _, v := range again {
		if strings.HasPrefix(v, "before") || strings.HasPrefix(v, "after") || strings.HasPrefix(v, "aborted") {
			t.Fatalf("rewound: read %q", v)
		}
	}
}
