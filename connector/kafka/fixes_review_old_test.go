package kafka

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestRev5OldCheckpointKnownWithoutSplitIsRecovered: a checkpoint written
// by Weir before 98f9aad, whose discover marked every listed partition
// known (its own or not). Subtask "other" found partition 3 before its
// owner did; the checkpoint lists 3 as known while no subtask has its
// split. Restored, partition 3 is read: a restore knows the partitions
// with a split, not the checkpoint's known list (an outside review).
func TestRev5OldCheckpointKnownWithoutSplitIsRecovered(t *testing.T) {
	brokers := broker(t, "lines") // 3 partitions
	mk := func(interval time.Duration) func() weir.SourceReader[string] {
		return linesSource(t, brokers, interval)
	}
	run := &operatortest.Run{}
	defer run.Close()
	w := &operatortest.MemWriter{}
	const p = 2
	ownerSub := owner("lines", 3, p)
	otherSub := 1 - ownerSub
	first := mk(time.Hour)
	readers := make([]weir.SourceReader[string], p)
	for sub := range p {
		readers[sub] = first()
		if err := readers[sub].Open(run.Context("kafka", sub, p, nil)); err != nil {
			t.Fatal(err)
		}
	}
	cl, _ := kgo.NewClient(kgo.SeedBrokers(brokers...))
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreatePartitions(context.Background(), 1, "lines"); err != nil {
		t.Fatal(err)
	}
	// What the old discover did in the other subtask: mark every listed
	// partition known, take only its own.
	other := readers[otherSub].(*reader[string])
	for seen := false; !seen; {
		parts, err := other.partitions(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		seen = slices.Contains(parts, tp{"lines", 3})
	}
	other.known[tp{"lines", 3}] = true
	got := checkpointRestoreRead3(t, brokers, readers, mk(time.Millisecond), run, w)
	if len(got) != 10 {
		t.Fatalf("restoring a checkpoint of Weir before the fix (partition 3 known, no split): read %d of partition 3's 10 records: still lost", len(got))
	}
}

// TestRev5BoundedEndBelowLogStartEnds: a bounded split whose End (20) is
// below the log's new start (25) is done after the restore: the job ends,
// reading nothing of 20..24.
func TestRev5BoundedEndBelowLogStartEnds(t *testing.T) {
	brokers := broker(t, "lines")
	produce(t, brokers, "lines", "", values("a", 60)...) // 20 per partition
	newReader, err := Source(SourceConfig[string]{Brokers: brokers, Topics: []string{"lines"}, Decode: StringValue, Bounded: true, BatchSize: 5})
	if err != nil {
		t.Fatal(err)
	}
	run := &operatortest.Run{}
	defer run.Close()
	w := &operatortest.MemWriter{}
	r := newReader()
	if err := r.Open(run.Context("kafka", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	var got collected
	if _, err := r.Read(&got); err != nil {
		t.Fatal(err)
	}
	hs := snapshot(t, r, 1, w)
	r.Close()
	produce(t, brokers, "lines", "", values("b", 30)...)
	cl, _ := kgo.NewClient(kgo.SeedBrokers(brokers...))
	defer cl.Close()
	var del kadm.Offsets
	for p := range int32(3) {
		del.Add(kadm.Offset{Topic: "lines", Partition: p, At: 25})
	}
	if resp, err := kadm.NewClient(cl).DeleteRecords(context.Background(), del); err != nil || resp.Error() != nil {
		t.Fatal(err, resp.Error())
	}
	r = newReader()
	if err := r.Open(run.Context("kafka", 0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read})); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got = nil
	deadline := time.Now().Add(2 * time.Second)
	for {
		res, err := r.Read(&got)
		if err != nil {
			t.Fatal(err)
		}
		if res.Exhausted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bounded source with every End below the log start not exhausted after 2s (read %d)", len(got))
		}
		time.Sleep(time.Until(res.IdleUntil))
	}
	if len(got) != 0 {
		t.Fatalf("read %d records past the bounded end: %q", len(got), got)
	}
}
