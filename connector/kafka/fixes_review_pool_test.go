package kafka

import (
	"fmt"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// toleratingSink opens subtask 0 of 1 of a sink with a pool of ids
// transactional ids (0: the default) in a job that tolerates tolerable
// checkpoint failures, restoring r unless nil.
func toleratingSink(t *testing.T, run *operatortest.Run, brokers []string, ids, tolerable int, r *operator.Restore) weir.SinkWriter[string] {
	t.Helper()
	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: encode, TransactionalIDs: ids})
	if err != nil {
		t.Fatal(err)
	}
	ctx := run.Context("out", 0, 1, r)
	ctx.CommitWait = operator.CommitWait{Interval: 100 * time.Millisecond, Timeout: time.Second, TolerableFailures: tolerable}
	s := newSink()
	if err := s.Open(ctx); err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

// TestRev4PoolOfPoolNeededSurvivesSteadyState: a committed transaction
// stays "cooling" (a restore of its checkpoint may commit it again) until
// the next checkpoint completes, so in steady state a subtask holds one
// cooling, one pre-committed and one open transaction. The first rule of
// session 33 (tolerable failures + 2) left a pool of 2 accepted that ran
// out with no checkpoint failed (an outside review); the pool poolNeeded
// gives for no tolerated failure survives records between every snapshot
// and its completion, and a smaller one set by hand is warned of.
func TestRev4PoolOfPoolNeededSurvivesSteadyState(t *testing.T) {
	run := &operatortest.Run{}
	defer run.Close()
	s := toleratingSink(t, run, broker(t, "out"), poolNeeded(0), 0, nil)
	defer s.Close()
	w := &operatortest.MemWriter{}
	for id := checkpoint.ID(1); id <= 5; id++ {
		// records keep coming between a checkpoint's snapshot and its completion
		if err := s.Write(fmt.Sprintf("r%d", id)); err != nil {
			t.Fatalf("write before checkpoint %d, no checkpoint failed, pool of %d: %v", id, poolNeeded(0), err)
		}
		snapshot(t, s, id, w)
		if err := s.Write(fmt.Sprintf("r%d-after", id)); err != nil {
			t.Fatalf("write after checkpoint %d's snapshot, no checkpoint failed, pool of %d: %v", id, poolNeeded(0), err)
		}
		if err := s.NotifyComplete(id); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRev4DefaultPoolLastsWithinTheTolerance: 10 tolerable failures, the
// default pool. One checkpoint completes, the next 10 fail (tolerated), the
// 11th after them succeeds. The default pool was 8, and the 9th failure
// failed the job for good (permanent, no restart), although a restart
// frees every id (an outside review, session 33); records written between
// the 11th's snapshot and its completion need a 13th id, which the first
// fix's pool (10+2) lacked.
func TestRev4DefaultPoolLastsWithinTheTolerance(t *testing.T) {
	run := &operatortest.Run{}
	defer run.Close()
	s := toleratingSink(t, run, broker(t, "out"), 0, 10, nil)
	defer s.Close()
	w := &operatortest.MemWriter{}
	write := func(v string) {
		t.Helper()
		if err := s.Write(v); err != nil {
			t.Fatalf("write %s (10 tolerable failures, at most 10 in a row failed, default pool): permanent=%v: %v", v, operator.IsPermanent(err), err)
		}
	}
	write("r1")
	snapshot(t, s, 1, w)
	if err := s.NotifyComplete(1); err != nil {
		t.Fatal(err)
	}
	for id := checkpoint.ID(2); id <= 11; id++ { // 10 failures, tolerated
		write(fmt.Sprintf("r%d", id))
		snapshot(t, s, id, w)
	}
	write("r12")
	snapshot(t, s, 12, w) // this one succeeds...
	write("r12-after")    // ...and records keep coming before it completes
	if err := s.NotifyComplete(12); err != nil {
		t.Fatal(err)
	}
}

// TestRev4RestoreAfterToleratedFailuresKeepsIDs: 10 tolerable failures,
// the default pool. Checkpoint 1 completes, 2-11 fail (tolerated),
// checkpoint 12 completes: it records the 11 transactions pre-committed
// since 1. The job then crashes and restores checkpoint 12: those 11 ids
// are reserved until a checkpoint of the new run completes. With the first
// fix's pool (12) the first record after checkpoint 13's snapshot found
// none, the job failed over and restored checkpoint 12 again, and again;
// poolNeeded counts the reserved ids.
func TestRev4RestoreAfterToleratedFailuresKeepsIDs(t *testing.T) {
	brokers := broker(t, "out")
	run := &operatortest.Run{}
	defer run.Close()
	s := toleratingSink(t, run, brokers, 0, 10, nil)
	w := &operatortest.MemWriter{}
	write := func(s interface{ Write(string) error }, v string) {
		t.Helper()
		if err := s.Write(v); err != nil {
			t.Fatalf("write %s (10 tolerable failures, default pool): permanent=%v: %v", v, operator.IsPermanent(err), err)
		}
	}
	write(s, "r1")
	snapshot(t, s, 1, w)
	if err := s.NotifyComplete(1); err != nil {
		t.Fatal(err)
	}
	for id := checkpoint.ID(2); id <= 11; id++ { // 10 failures, tolerated
		write(s, fmt.Sprintf("r%d", id))
		snapshot(t, s, id, w)
	}
	write(s, "r12")
	hs := snapshot(t, s, 12, w)
	if err := s.NotifyComplete(12); err != nil {
		t.Fatal(err)
	}
	s.Close() // the job crashes
	s = toleratingSink(t, run, brokers, 0, 10, &operator.Restore{Checkpoint: 12, Handles: hs, Read: w.Read})
	defer s.Close()
	write(s, "a")
	snapshot(t, s, 13, w)
	write(s, "b") // before checkpoint 13 completes
}
