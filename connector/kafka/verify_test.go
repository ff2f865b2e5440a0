package kafka

import (
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// keyed encodes a value with its first letter for key.
func keyed(s string) *kgo.Record { return &kgo.Record{Key: []byte(s[:1]), Value: []byte(s)} }

// TestCommittedReadsWhatACheckpointRecorded: the sink's output read back at
// a checkpoint is what it committed up to it, the transaction it recorded
// still open (a restore commits it), and what other producers committed
// among those records (which verify reports unexpected); not what it wrote
// after the checkpoint, committed or not, nor another producer's aborted
// records. After a restore, what the dead run wrote after the checkpoint
// (aborted by the restore) stays out.
func TestCommittedReadsWhatACheckpointRecorded(t *testing.T) {
	brokers := onePartition(t)
	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: keyed, TransactionalIDs: 3})
	if err != nil {
		t.Fatal(err)
	}
	w := &operatortest.MemWriter{}
	run := &operatortest.Run{}
	s := newSink()
	if err := s.Open(run.Context("out", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	s.Write("a1")
	s.Write("a2")
	hs1 := snapshot(t, s, 1, w)
	if err := s.NotifyComplete(1); err != nil {
		t.Fatal(err)
	}
	produce(t, brokers, "out", "", "x")                // not transactional
	produce(t, brokers, "out", "other", "y")           // committed
	produce(t, brokers, "out", "other-aborted", "zzz") // aborted
	// A commit's markers reach the partition after it returns: a
	// transaction without one yet is open, and another producer's open
	// transaction is not counted.
	if got := consumeWhen(t, brokers, "out", func(got []string) bool { return slices.Contains(got, "y") }); !slices.Contains(got, "y") {
		t.Fatalf("another producer's committed record y never became visible read_committed: %q", got)
	}
	s.Write("c1")
	hs2 := snapshot(t, s, 2, w) // completes; the sink dies before it commits
	s.Write("d1")
	snapshot(t, s, 3, w) // flushed, never completes
	s.Close()
	run.Close()

	rec := func(key, value string) string {
		if key == "" {
			return `out null "` + value + `"`
		}
		return `out "` + key + `" "` + value + `"`
	}
	run = &operatortest.Run{}
	defer run.Close()
	// What others committed after checkpoint 1 counts; what the job wrote
	// after it does not.
	if got, want := readBackAs(t, run, "out", newSink, 1, hs1, w), []string{rec("a", "a1"), rec("a", "a2"), rec("", "x"), rec("", "y")}; !slices.Equal(got, want) {
		t.Fatalf("at checkpoint 1: %q, want %q", got, want)
	}
	want := []string{rec("a", "a1"), rec("a", "a2"), rec("c", "c1"), rec("", "x"), rec("", "y")}
	slices.Sort(want)
	if got := readBackAs(t, run, "out", newSink, 2, hs2, w); !slices.Equal(got, want) {
		t.Fatalf("at checkpoint 2, its transaction open: %q, want %q", got, want)
	}

	r := newSink()
	if err := r.Open(run.Context("out", 0, 1, &operator.Restore{Checkpoint: 2, Handles: hs2, Read: w.Read})); err != nil {
		t.Fatal(err)
	}
	r.Write("e1")
	hs4 := snapshot(t, r, 4, w)
	if err := r.NotifyComplete(4); err != nil {
		t.Fatal(err)
	}
	r.Close()
	want = append(want, rec("e", "e1"))
	slices.Sort(want)
	if got := readBackAs(t, run, "out", newSink, 4, hs4, w); !slices.Equal(got, want) {
		t.Fatalf("at checkpoint 4, after a restore of 2: %q, want %q", got, want)
	}
	if k := r.(weir.KeyedRecords).RecordKey([]byte(rec("e", "e1"))); k != `out "e"` {
		t.Fatalf("key %q", k)
	}
}

// TestCommittedLeavesOutWhatAnIDWroteAfterTheCheckpoint: a subtask begins
// the transaction after checkpoint 3 under a reused id while another
// subtask still writes its records of checkpoint 3, so the record after the
// checkpoint lies among those before it; read back at checkpoint 3, it is
// left out by its producer id's span.
func TestCommittedLeavesOutWhatAnIDWroteAfterTheCheckpoint(t *testing.T) {
	brokers := onePartition(t)
	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: keyed, TransactionalIDs: 2})
	if err != nil {
		t.Fatal(err)
	}
	w := &operatortest.MemWriter{}
	run := &operatortest.Run{}
	defer run.Close()
	var s [2]weir.SinkWriter[string]
	for i := range s {
		s[i] = newSink()
		if err := s[i].Open(run.Context("out", i, 2, nil)); err != nil {
			t.Fatal(err)
		}
		defer s[i].Close()
	}
	complete := func(id checkpoint.ID) []checkpoint.Handle {
		var hs []checkpoint.Handle
		for _, x := range s {
			hs = append(hs, snapshot(t, x, id, w)...)
		}
		for _, x := range s {
			if err := x.NotifyComplete(id); err != nil {
				t.Fatal(err)
			}
		}
		return hs
	}
	s[0].Write("a1")
	complete(1)
	complete(2) // s[0]'s id of a1 is free again, and taken before one never used
	s[1].Write("b1")
	hs := snapshot(t, s[0], 3, w)
	s[0].Write("g1")        // after checkpoint 3, under the id of a1
	snapshot(t, s[0], 4, w) // flushed, never completes
	s[1].Write("b2")
	hs = append(hs, snapshot(t, s[1], 3, w)...)
	want := []string{`out "a" "a1"`, `out "b" "b1"`, `out "b" "b2"`}
	if got := readBackAs(t, run, "out", newSink, 3, hs, w); !slices.Equal(got, want) {
		t.Fatalf("at checkpoint 3: %q, want %q", got, want)
	}
}

// TestSpansOfConcurrentCheckpoints: the asynchronous parts of two
// checkpoints in flight run at once, in either order; checkpoint 1's state
// must not record where checkpoint 2's transaction wrote, or reading back at
// checkpoint 1 would count it once committed.
func TestSpansOfConcurrentCheckpoints(t *testing.T) {
	brokers := onePartition(t)
	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: keyed, TransactionalIDs: 3})
	if err != nil {
		t.Fatal(err)
	}
	w := &operatortest.MemWriter{}
	run := &operatortest.Run{}
	defer run.Close()
	s := newSink()
	if err := s.Open(run.Context("out", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Write("a1")
	async1, err := s.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	s.Write("b1")
	snapshot(t, s, 2, w) // its asynchronous part first
	hs1, err := async1(w)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []checkpoint.ID{1, 2} {
		if err := s.NotifyComplete(id); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := readBackAs(t, run, "out", newSink, 1, hs1, w), []string{`out "a" "a1"`}; !slices.Equal(got, want) {
		t.Fatalf("at checkpoint 1: %q, want %q", got, want)
	}
}

// TestCommittedCountsWhatARestoredOlderCheckpointLeft: checkpoint 1 records
// no output; checkpoint 2 commits b1; a run restores checkpoint 1 and
// commits b1 again at checkpoint 3. The topic holds b1 twice, read back so
// (verify reports the duplicate), though checkpoint 1's lineage wrote
// nothing before it (found by the second review: read only where spans
// were, b1 was read once, and verify matched).
func TestCommittedCountsWhatARestoredOlderCheckpointLeft(t *testing.T) {
	brokers := onePartition(t)
	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: keyed, TransactionalIDs: 3})
	if err != nil {
		t.Fatal(err)
	}
	w := &operatortest.MemWriter{}
	run := &operatortest.Run{}
	defer run.Close()
	s := newSink()
	if err := s.Open(run.Context("out", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	hs1 := snapshot(t, s, 1, w)
	if err := s.NotifyComplete(1); err != nil {
		t.Fatal(err)
	}
	s.Write("b1")
	snapshot(t, s, 2, w)
	if err := s.NotifyComplete(2); err != nil {
		t.Fatal(err)
	}
	s.Close()
	r := newSink()
	if err := r.Open(run.Context("out", 0, 1, &operator.Restore{Checkpoint: 1, Handles: hs1, Read: w.Read})); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.Write("b1")
	hs3 := snapshot(t, r, 3, w)
	if err := r.NotifyComplete(3); err != nil {
		t.Fatal(err)
	}
	if got := consumeWhen(t, brokers, "out", func(got []string) bool { return len(got) == 2 }); !slices.Equal(got, []string{"b1", "b1"}) { // the first commit's marker
		t.Fatalf("read_committed: %q, want the two b1", got)
	}
	if got, want := readBackAs(t, run, "out", newSink, 3, hs3, w), []string{`out "b" "b1"`, `out "b" "b1"`}; !slices.Equal(got, want) {
		t.Fatalf("at checkpoint 3: %q, want %q", got, want)
	}
}

// TestCommittedRefusesALineageOfAnotherDelivery: a run that resumed a
// checkpoint of the sink at least once (no state of it) cannot say where
// the output before it is: read back, its checkpoints are refused, not
// reported short.
func TestCommittedRefusesALineageOfAnotherDelivery(t *testing.T) {
	brokers := onePartition(t)
	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: keyed, TransactionalIDs: 3})
	if err != nil {
		t.Fatal(err)
	}
	w := &operatortest.MemWriter{}
	run := &operatortest.Run{}
	defer run.Close()
	ctx := run.Context("out", 0, 1, nil)
	ctx.Resumed = 1 // a checkpoint without the sink's state
	s := newSink()
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Write("a1")
	hs := snapshot(t, s, 2, w)
	err = newSink().(weir.VerifiedSink[string]).Committed(run.Context("out", 0, 1, &operator.Restore{Checkpoint: 2, Handles: hs, Read: w.Read}), func([]byte) {})
	if err == nil || !strings.Contains(err.Error(), "does not record where all its output is") {
		t.Fatalf("read back: %v, want a refusal", err)
	}
}
