package kafka

import (
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// onePartition starts a kfake cluster whose topic out has one partition, so
// that the order of the records in it is the order they were flushed in.
func onePartition(t *testing.T) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "out"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// readBackAs is what sink uid's Committed reads back at checkpoint id, sorted.
func readBackAs(t *testing.T, run *operatortest.Run, uid string, newSink func() weir.SinkWriter[string], id checkpoint.ID, hs []checkpoint.Handle, w *operatortest.MemWriter) []string {
	t.Helper()
	var got []string
	err := newSink().(weir.VerifiedSink[string]).Committed(run.Context(uid, 0, 1, &operator.Restore{Checkpoint: id, Handles: hs, Read: w.Read}), func(rec []byte) {
		got = append(got, string(rec))
	})
	if err != nil {
		t.Fatalf("checkpoint %d: %v", id, err)
	}
	slices.Sort(got)
	return got
}

// TestReviewCommittedHidesWhatAnAbandonedCheckpointCommitted: checkpoint 1
// (a savepoint, or a retained checkpoint) is restored after checkpoint 2
// committed b1. The restored run writes b1 again, under the id (so the
// producer id) that wrote the first b1, and checkpoint 3 commits it. The
// topic now holds b1 twice, read_committed: the duplicate a restore of an
// older checkpoint makes, which verify exists to report (a record of a
// producer id that is not the sink's, in the same place, would be read and
// reported unexpected). But the first b1 lies before its producer id's span
// in checkpoint 3 (the span restarts from the restored checkpoint's, which
// does not know the id), so Committed skips it as "an earlier run's": verify
// reports a match over output that holds a duplicate.
func TestReviewCommittedHidesWhatAnAbandonedCheckpointCommitted(t *testing.T) {
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
	hs1 := commitAt(t, s, 1, w, "a1")
	commitAt(t, s, 2, w, "b1")
	firstID, firstPID := s.(*writer[string]).cooling[0].ID, s.(*writer[string]).cooling[0].PID // the transaction of the first b1
	s.Close()
	run.Close()

	run = &operatortest.Run{}
	defer run.Close()
	r := newSink()
	if err := r.Open(run.Context("out", 0, 1, &operator.Restore{Checkpoint: 1, Handles: hs1, Read: w.Read})); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Write("b1"); err != nil {
		t.Fatal(err)
	}
	hs3 := snapshot(t, r, 3, w)
	again := r.(*writer[string]).pending[0]
	if again.ID != firstID || again.PID != firstPID {
		t.Fatalf("the second b1 went under %s (producer %d), the first under %s (producer %d): the test does not test a reused producer id", again.ID, again.PID, firstID, firstPID)
	}
	if err := r.NotifyComplete(3); err != nil {
		t.Fatal(err)
	}
	if got := consumeWhen(t, brokers, "out", func(got []string) bool { return len(got) == 3 }); !slices.Equal(got, []string{"a1", "b1", "b1"}) {
		t.Fatalf("read_committed: %q, want a1 and b1 twice", got)
	}
	want := []string{`out "a" "a1"`, `out "b" "b1"`, `out "b" "b1"`}
	if got := readBackAs(t, run, "out", newSink, 3, hs3, w); !slices.Equal(got, want) {
		t.Fatalf("read back at checkpoint 3: %q; the topic holds %q read_committed: a committed duplicate is hidden, so verify reports a match", got, want)
	}
}

// TestReviewSpansOfALaterCheckpointLeakIntoAnEarlierOne: with
// MaxConcurrent > 1 the asynchronous parts of checkpoints 1 and 2 run on
// the task's pool at once, in either order. Every asynchronous part writes
// all the subtask's spans (w.spans, shared), so when 2's runs first, 1's
// state records the span of checkpoint 2's transaction. Checkpoint 1
// completes, 2 never does (the job dies): b1 is in a transaction no
// checkpoint records, which a restore of 1 aborts. Read back at 1, b1 is
// within its producer id's span and has no marker yet, so it counts as a
// recorded open transaction: verify reports b1, never committed, as
// committed output (unexpected).
func TestReviewSpansOfALaterCheckpointLeakIntoAnEarlierOne(t *testing.T) {
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
	if err := s.Write("a1"); err != nil {
		t.Fatal(err)
	}
	async1, err := s.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write("b1"); err != nil {
		t.Fatal(err)
	}
	async2, err := s.Snapshot(2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := async2(w); err != nil { // checkpoint 2's asynchronous part ends first
		t.Fatal(err)
	}
	hs1, err := async1(w)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.NotifyComplete(1); err != nil {
		t.Fatal(err)
	}
	s.Close() // the job dies; checkpoint 2 never completes
	want := []string{`out "a" "a1"`}
	if got := readBackAs(t, run, "out", newSink, 1, hs1, w); !slices.Equal(got, want) {
		t.Fatalf("read back at checkpoint 1: %q, want %q: checkpoint 1 records the span of checkpoint 2's transaction, which a restore of 1 aborts", got, want)
	}
}

// TestReviewCommittedCountsANewIDsLaterCommitAsUnexpected: verify of a
// running job (the README: "records of transactions after the checkpoint
// fall outside the spans"). Subtask 0 begins the transaction after
// checkpoint 2 under an id of its pool it never used before, so its
// producer id is in no span of checkpoint 2; subtask 1's records of
// checkpoint 2 come after it in the partition. Checkpoint 3 completes and
// commits g1 while verify reads checkpoint 2. A reused id's g1 is left out
// (TestCommittedLeavesOutWhatAnIDWroteAfterTheCheckpoint); a new id's g1 is
// read as another producer's committed record: verify reports the job's own
// output after the checkpoint as unexpected (a false mismatch), not even as
// a refusal.
func TestReviewCommittedCountsANewIDsLaterCommitAsUnexpected(t *testing.T) {
	brokers := onePartition(t)
	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: keyed, TransactionalIDs: 3})
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
	notify := func(id checkpoint.ID) {
		for _, x := range s {
			if err := x.NotifyComplete(id); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s[0].Write("a1"); err != nil {
		t.Fatal(err)
	}
	snapshot(t, s[0], 1, w)
	snapshot(t, s[1], 1, w)
	notify(1)
	if err := s[1].Write("b1"); err != nil {
		t.Fatal(err)
	}
	hs := snapshot(t, s[0], 2, w)
	if err := s[0].Write("g1"); err != nil { // after checkpoint 2
		t.Fatal(err)
	}
	used := s[0].(*writer[string]).cooling[0].ID
	if id := s[0].(*writer[string]).open.ID; id == used {
		t.Fatalf("g1 went under %s, the id a1 used: the test does not test a new id", id)
	}
	snapshot(t, s[0], 3, w) // flushes g1
	if err := s[1].Write("b2"); err != nil {
		t.Fatal(err)
	}
	hs = append(hs, snapshot(t, s[1], 2, w)...)
	notify(2)
	snapshot(t, s[1], 3, w)
	notify(3) // the running job commits g1
	want := []string{`out "a" "a1"`, `out "b" "b1"`, `out "b" "b2"`}
	if got := readBackAs(t, run, "out", newSink, 2, hs, w); !slices.Equal(got, want) {
		t.Fatalf("read back at checkpoint 2: %q, want %q: the job's record after the checkpoint is read as another producer's", got, want)
	}
}

// TestReviewTwoSinksOfAJobIntoOneTopic: two sinks of one job write the same
// topic (two branches of the job, each its own sink UID, so their own
// transactional ids). Each sink's read-back counts the other's committed
// records among its own as another producer's: verify reports the job's
// correct output as unexpected records (a false mismatch) in sink left.
// Expected: each sink reads its own output, or verify refuses two sinks
// writing one topic; not a mismatch.
func TestReviewTwoSinksOfAJobIntoOneTopic(t *testing.T) {
	brokers := onePartition(t)
	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: keyed, TransactionalIDs: 3})
	if err != nil {
		t.Fatal(err)
	}
	w := &operatortest.MemWriter{}
	run := &operatortest.Run{}
	defer run.Close()
	left, right := newSink(), newSink()
	if err := left.Open(run.Context("left", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	defer left.Close()
	if err := right.Open(run.Context("right", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	defer right.Close()
	commitAt(t, left, 1, w, "a1")
	commitAt(t, right, 1, w, "b1")
	hs := commitAt(t, left, 2, w, "a2")
	commitAt(t, right, 2, w, "b2")
	// Fixed by refusing: the ownership records say that both sinks write
	// the topic.
	err = newSink().(weir.VerifiedSink[string]).Committed(run.Context("left", 0, 1, &operator.Restore{Checkpoint: 2, Handles: hs, Read: w.Read}), func([]byte) {})
	if err == nil || !strings.Contains(err.Error(), "sinks left and right of job test write into the same topic") {
		t.Fatalf("sink left read back at checkpoint 2: %v, want a refusal naming both sinks", err)
	}
}
