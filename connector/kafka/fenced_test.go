package kafka

import (
	"strings"
	"testing"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestASecondRunThatFencesTheFirstIsNamed: the same job started twice
// (another host, other checkpoint storage). Run 1 pre-committed checkpoint
// 1; run 2 starts from nothing, and its start aborts run 1's transaction,
// whose records are lost. Run 1's commit fails for good, saying that
// another writer under its prefix fenced it: it blamed the transaction
// timeout (15 minutes, of which none had passed). Found by an outside
// review, session 39.
func TestASecondRunThatFencesTheFirstIsNamed(t *testing.T) {
	brokers := broker(t, "out")
	w := &operatortest.MemWriter{}
	a, _ := precommitted(t, brokers, sinkOf{job: "test"}, w)
	run2 := &operatortest.Run{}
	defer run2.Close()
	b := sinkFor(t, run2, brokers, 0, 1, nil)
	defer b.Close()
	err := a.NotifyComplete(1)
	if !operator.IsPermanent(err) || !strings.Contains(err.Error(), "another writer with transactional id prefix") || strings.Contains(err.Error(), "most likely at its timeout") {
		t.Fatalf("run 1's commit after run 2 started: %v; want a permanent error naming another writer under the prefix, not the timeout", err)
	}
}

// TestTwoJobsSharingAPrefix: two jobs set one transactional id
// prefix (the config says they must not, but nothing stops them). Job a
// pre-commits checkpoint 1; job b starts, writing another topic. Either b
// is refused at start, or a's checkpoint 1 commits: a completed
// checkpoint's records must not be silently lost. Job b's start aborted
// job a's transaction (found by an outside review, session 39); now the
// prefix is recorded as job a's sink's, and job b is refused.
func TestTwoJobsSharingAPrefix(t *testing.T) {
	brokers := broker(t, "out", "out2")
	w := &operatortest.MemWriter{}
	a, _ := precommitted(t, brokers, sinkOf{job: "a", prefix: "shared"}, w) // checkpoint 1 of job a completes now; its notification follows

	runB := &operatortest.Run{}
	defer runB.Close()
	b, err := openPrefixed(t, runB, brokers, sinkOf{job: "b", topic: "out2", prefix: "shared"})
	if b != nil {
		defer b.Close()
	}
	if err != nil {
		if !operator.IsPermanent(err) || !strings.Contains(err.Error(), `transactional id prefix "shared" belongs to sink "out" of job "a"`) {
			t.Fatalf("job b refused with %v, want a permanent refusal naming job a's sink", err)
		}
		if err := a.NotifyComplete(1); err != nil {
			t.Fatalf("job a's commit after job b was refused: %v", err)
		}
		if got := consume(t, brokers, "out", true); len(got) != 5 {
			t.Fatalf("job a's checkpoint 1: read_committed %d of 5 records", len(got))
		}
		return
	}
	err = a.NotifyComplete(1)
	got := consume(t, brokers, "out", true)
	if err != nil || len(got) != 5 {
		t.Fatalf("job b started beside job a under one prefix; job a's completed checkpoint 1: commit error %v; read_committed %d of 5 records: lost", err, len(got))
	}
}

// precommitted opens the sink o says (its run and itself closed at the
// test's end), writes five records, and takes checkpoint 1 into w: they
// are pre-committed, and commit at its NotifyComplete. It returns the
// sink and the checkpoint's handles.
func precommitted(t *testing.T, brokers []string, o sinkOf, w *operatortest.MemWriter) (weir.SinkWriter[string], []checkpoint.Handle) {
	t.Helper()
	run := &operatortest.Run{}
	t.Cleanup(run.Close)
	s, err := openPrefixed(t, run, brokers, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, v := range values("a", 5) {
		if err := s.Write(v); err != nil {
			t.Fatal(err)
		}
	}
	return s, snapshot(t, s, 1, w)
}
