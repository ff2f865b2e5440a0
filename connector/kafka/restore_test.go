package kafka

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// commitAt writes vs, snapshots checkpoint id and completes it, returning
// the checkpoint's handles.
func commitAt(t *testing.T, s weir.SinkWriter[string], id checkpoint.ID, w *operatortest.MemWriter, vs ...string) []checkpoint.Handle {
	t.Helper()
	for _, v := range vs {
		if err := s.Write(v); err != nil {
			t.Fatal(err)
		}
	}
	hs := snapshot(t, s, id, w)
	if err := s.NotifyComplete(id); err != nil {
		t.Fatalf("checkpoint %d: %v", id, err)
	}
	return hs
}

// restoreSink opens subtask sub of p of the sink of sinkFor from checkpoint
// id's handles, returning Open's error.
func restoreSink(run *operatortest.Run, brokers []string, sub, p int, id checkpoint.ID, hs []checkpoint.Handle, w *operatortest.MemWriter, timeout time.Duration) (weir.SinkWriter[string], error) {
	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: encode, TransactionalIDs: 3, TransactionTimeout: timeout})
	if err != nil {
		return nil, err
	}
	s := newSink()
	if err := s.Open(run.Context("out", sub, p, &operator.Restore{Checkpoint: id, Handles: hs, Read: w.Read})); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// wantCommitted waits until topic out holds exactly want read_committed
// (each once), and checks that no transaction holds readers back.
func wantCommitted(t *testing.T, brokers []string, when string, want []string) {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	got := consumeWhen(t, brokers, "out", func(got []string) bool { return slices.Equal(got, want) })
	if !slices.Equal(got, want) {
		t.Fatalf("%s: read_committed %d records %v, want the %d %v once each", when, len(got), got, len(want), want)
	}
	if stalled(t, brokers, "out") {
		t.Fatalf("%s: a transaction holds read_committed consumers back", when)
	}
}

// TestSinkRestoresASavepointAgain (issue 19, defect 9): a savepoint is
// restored after a failover has initialised its transaction's id again
// (a newer epoch), and a second time after the first restore's run reused
// that id. Each restore's commit of the recorded transaction is refused
// for its old epoch; the record the savepoint marked is visible
// read_committed, so the transaction was committed earlier and the restore
// goes on: every record once, nothing lost, nothing stalled.
func TestSinkRestoresASavepointAgain(t *testing.T) {
	brokers := broker(t, "out")
	w := &operatortest.MemWriter{}

	run := &operatortest.Run{}
	s := sinkFor(t, run, brokers, 0, 1, nil)
	savepoint := commitAt(t, s, 1, w, values("a", 5)...)
	latest := commitAt(t, s, 2, w, values("b", 5)...) // the savepoint's id is free again
	s.Close()
	run.Close()
	wantCommitted(t, brokers, "after checkpoint 2", slices.Concat(values("a", 5), values("b", 5)))

	// A failover restores checkpoint 2, which initialises every id it does
	// not record: the savepoint's among them.
	run = &operatortest.Run{}
	s, err := restoreSink(run, brokers, 0, 1, 2, latest, w, 0)
	if err != nil {
		t.Fatalf("failover to checkpoint 2: %v", err)
	}
	commitAt(t, s, 3, w, values("c", 5)...)
	s.Close()
	run.Close()
	want := slices.Concat(values("a", 5), values("b", 5), values("c", 5))
	wantCommitted(t, brokers, "after checkpoint 3", want)

	for i, more := range []string{"d", "e"} {
		run = &operatortest.Run{}
		s, err := restoreSink(run, brokers, 0, 1, 1, savepoint, w, 0)
		if err != nil {
			run.Close()
			t.Fatalf("restore %d of the savepoint: %v", i+1, err)
		}
		wantCommitted(t, brokers, fmt.Sprintf("after restore %d of the savepoint", i+1), want)
		// The run writes on, through every id of its pool: its first
		// completed checkpoint frees the savepoint's id, and two
		// transactions at once need it.
		for k := range 4 {
			id := checkpoint.ID(4 + 4*i + k)
			v := fmt.Sprintf("%s%d", more, k)
			if k == 1 {
				s.Write(v)
				snapshot(t, s, id, w) // completes with the next
			} else {
				commitAt(t, s, id, w, v)
			}
			want = append(want, v)
		}
		if unmade := s.(*writer[string]).unmade; len(unmade) > 0 {
			t.Fatalf("the run after restore %d never used %v: the test does not test a reused id", i+1, unmade)
		}
		s.Close()
		run.Close()
		wantCommitted(t, brokers, fmt.Sprintf("after the run of restore %d", i+1), want)
	}
}

// TestSinkRestoreReportsATransactionTheBrokerAborted (issue 19, defect 9):
// the job is down longer than the transaction timeout, so the broker aborts
// the transaction checkpoint 1 pre-committed (and bumps its epoch). The
// restore's commit is refused as for a transaction committed earlier, but
// its record is not visible read_committed: the restore fails for good,
// saying the records are lost.
func TestSinkRestoreReportsATransactionTheBrokerAborted(t *testing.T) {
	brokers := broker(t, "out")
	w := &operatortest.MemWriter{}
	run := &operatortest.Run{}
	defer run.Close()
	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: encode, TransactionalIDs: 3, TransactionTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s := newSink()
	if err := s.Open(run.Context("out", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	for _, v := range values("a", 5) {
		s.Write(v)
	}
	hs := snapshot(t, s, 1, w) // completes, but the process dies before it commits
	s.Close()
	deadline := time.Now().Add(30 * time.Second)
	for stalled(t, brokers, "out") {
		if time.Now().After(deadline) {
			t.Fatal("the broker did not abort the transaction at its timeout")
		}
		time.Sleep(50 * time.Millisecond) // polling for the broker's abort
	}
	r, err := restoreSink(run, brokers, 0, 1, 1, hs, w, time.Second)
	if err == nil {
		r.Close()
		t.Fatal("the restore went on, though the broker aborted the transaction checkpoint 1 recorded")
	}
	if !operator.IsPermanent(err) || !strings.Contains(err.Error(), "its records are lost") || !strings.Contains(err.Error(), "not visible read_committed") {
		t.Fatalf("restore: %v, want a permanent error saying the records are lost", err)
	}
	if got := consume(t, brokers, "out", true); len(got) != 0 {
		t.Fatalf("read_committed: %v", got)
	}
}

// TestSinkAbortsWhatAFailedRescaleLeftOpen (issue 19, defect 10): a run
// restored at parallelism 2 writes through subtask 1 and dies before its
// checkpoint completes; the same checkpoint (taken at parallelism 1) is
// restored at parallelism 1 again. Subtask 1's ids are beyond what the
// checkpoint records, but the broker lists its transaction open, and the
// restore aborts it: read_committed consumers do not stall.
func TestSinkAbortsWhatAFailedRescaleLeftOpen(t *testing.T) {
	brokers := broker(t, "out")
	w := &operatortest.MemWriter{}
	hs := failRescale(t, brokers, w)

	run := &operatortest.Run{}
	defer run.Close()
	r, err := restoreSink(run, brokers, 0, 1, 1, hs, w, 0)
	if err != nil {
		t.Fatalf("restore at parallelism 1: %v", err)
	}
	defer r.Close()
	wantCommitted(t, brokers, "after the restore at parallelism 1", []string{"a"})
}

// failRescale completes checkpoint 1 at parallelism 1, restores it at
// parallelism 2, and lets subtask 1 write and flush a transaction whose
// checkpoint never completes, as a run that died would: the broker holds
// it open. It returns checkpoint 1's handles.
func failRescale(t *testing.T, brokers []string, w *operatortest.MemWriter) []checkpoint.Handle {
	t.Helper()
	run := &operatortest.Run{}
	s := sinkFor(t, run, brokers, 0, 1, nil)
	hs := commitAt(t, s, 1, w, "a")
	s.Close()
	run.Close()

	run = &operatortest.Run{}
	var rescaled []weir.SinkWriter[string]
	for sub := range 2 {
		r, err := restoreSink(run, brokers, sub, 2, 1, hs, w, 0)
		if err != nil {
			t.Fatalf("restore at parallelism 2, subtask %d: %v", sub, err)
		}
		rescaled = append(rescaled, r)
	}
	rescaled[1].Write("lost")
	snapshot(t, rescaled[1], 2, w) // flushed; checkpoint 2 never completes
	for _, r := range rescaled {
		r.Close()
	}
	run.Close()
	if !stalled(t, brokers, "out") {
		t.Fatal("no transaction left open by the failed rescale: the test does not test the abort")
	}
	return hs
}

// TestSinkChecksTheTimeoutFromTheTransactionsOpening (issue 19, defect 16):
// a transaction opens with the first record after a snapshot, up to one
// checkpoint interval plus one checkpoint timeout before the next snapshot
// pre-commits it, and then waits for its commit: the timeout must cover
// both. 15 minutes covers the wait after the pre-commit (10m6s), not the
// whole (20m7s); the refusal says which checkpoint timeout would fit.
func TestSinkChecksTheTimeoutFromTheTransactionsOpening(t *testing.T) {
	brokers := broker(t, "out")
	run := &operatortest.Run{}
	defer run.Close()
	minute := operator.CommitWait{Interval: time.Second, Timeout: time.Minute, RestartDelay: 5 * time.Second}
	for _, c := range []struct {
		timeout time.Duration
		wait    operator.CommitWait
		want    string // "": accepted
	}{
		{15 * time.Minute, operator.CommitWait{Interval: time.Second, Timeout: 10 * time.Minute, RestartDelay: 5 * time.Second},
			"transaction timeout 15m0s is not above the longest a pre-committed transaction may wait for its commit, (checkpoint interval 1s + checkpoint timeout 10m0s) × (tolerable checkpoint failures 0 + 1) + the restart strategy's longest delay 5s = 10m6s, plus the time its transaction may be open before the pre-commit, checkpoint interval 1s + checkpoint timeout 10m0s = 10m1s: 20m7s in all"},
		{15 * time.Minute, operator.CommitWait{Interval: time.Second, Timeout: 10 * time.Minute, RestartDelay: 5 * time.Second}, "a checkpoint timeout below 7m26s"},
		{15 * time.Minute, operator.CommitWait{Interval: time.Second, Timeout: 7*time.Minute + 26*time.Second, RestartDelay: 5 * time.Second}, ""},
		{3 * time.Minute, minute, ""},
		{2*time.Minute + 7*time.Second, minute, "2m7s in all"},
		// A min pause lengthens every cycle (found by an outside review).
		{15 * time.Minute, operator.CommitWait{Interval: time.Second, MinPause: 20 * time.Minute, Timeout: time.Minute, RestartDelay: 5 * time.Second},
			"checkpoint interval 1s + checkpoint min pause 20m0s + checkpoint timeout 1m0s = 21m1s: 42m7s in all"},
	} {
		newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: encode, TransactionTimeout: c.timeout})
		if err != nil {
			t.Fatal(err)
		}
		ctx := run.Context("out", 0, 1, nil)
		ctx.CommitWait = c.wait
		s := newSink()
		err = s.Open(ctx)
		s.Close()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("timeout %v, %v: %v", c.timeout, c.wait, err)
		case c.want != "" && (!operator.IsPermanent(err) || !strings.Contains(fmt.Sprint(err), c.want)):
			t.Errorf("timeout %v, %v: %v, want %q", c.timeout, c.wait, err, c.want)
		}
	}
}
