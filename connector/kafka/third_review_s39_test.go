package kafka

// Defects a third outside review of session 39's changes found: a restore
// took over a prefix another job used at that moment, whatever it restored.

import (
	"strings"
	"testing"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// openResuming opens subtask 0 of 1 of job's sink "out" into topic under
// prefix, restoring r, with Resumed set to resumed.
func openResuming(t *testing.T, run *operatortest.Run, brokers []string, job, topic, prefix string, r *operator.Restore, resumed checkpoint.ID) (weir.SinkWriter[string], error) {
	t.Helper()
	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: topic, Encode: encode, TransactionalIDPrefix: prefix, TransactionalIDs: 3})
	if err != nil {
		t.Fatal(err)
	}
	s := newSink()
	ctx := run.Context("out", 0, 1, r)
	ctx.Job, ctx.Resumed = job, resumed
	if err := s.Open(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// TestResumedJobWithoutSinkStateTakesAnotherJobsPrefix: job a
// (prefix "shared") pre-commits checkpoint 1. Job b resumes its own
// checkpoint 7, in which this sink has no state (a sink added to the job,
// or one whose UID changed; Weir gives it Resumed and no Restore), and is
// given prefix "shared" by mistake. Nothing b restores names "shared", so
// the prefix is not its lineage's: b must be refused, as a fresh start
// is. It starts, records the prefix as its own and aborts a's
// pre-committed transaction: a's completed checkpoint's records are lost.
func TestResumedJobWithoutSinkStateTakesAnotherJobsPrefix(t *testing.T) {
	brokers := broker(t, "out", "out2")
	w := &operatortest.MemWriter{}
	runA := &operatortest.Run{}
	defer runA.Close()
	a, err := openResuming(t, runA, brokers, "a", "out", "shared", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, v := range values("a", 5) {
		if err := a.Write(v); err != nil {
			t.Fatal(err)
		}
	}
	snapshot(t, a, 1, w)

	runB := &operatortest.Run{}
	defer runB.Close()
	b, errB := openResuming(t, runB, brokers, "b", "out2", "shared", nil, 7)
	if b != nil {
		defer b.Close()
	}
	errA := a.NotifyComplete(1)
	if errB == nil || errA != nil {
		t.Fatalf("job b resuming checkpoint 7 with no state for its sink, given job a's prefix: b's start: %v; then a's commit of checkpoint 1: %v; want b refused (a's prefix record names job a) and a's checkpoint committed", errB, errA)
	}
}

// TestRestoreUnderAnotherPrefixTakesAnotherJobsPrefix: job b
// wrote under its own prefix "bown" and completed checkpoint 1. It is
// restarted from that checkpoint with its prefix changed to "shared", job
// a's, which is running with checkpoint 1 pre-committed. b's checkpoint
// names transactions under "bown" only: "shared" is not its lineage's, and
// b must be refused. It takes the prefix over and aborts a's transaction.
func TestRestoreUnderAnotherPrefixTakesAnotherJobsPrefix(t *testing.T) {
	brokers := broker(t, "out", "out2")
	wb := &operatortest.MemWriter{}
	runB1 := &operatortest.Run{}
	b1, err := openResuming(t, runB1, brokers, "b", "out2", "bown", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range values("b", 3) {
		if err := b1.Write(v); err != nil {
			t.Fatal(err)
		}
	}
	hsB := snapshot(t, b1, 1, wb)
	if err := b1.NotifyComplete(1); err != nil {
		t.Fatal(err)
	}
	b1.Close()
	runB1.Close()

	wa := &operatortest.MemWriter{}
	runA := &operatortest.Run{}
	defer runA.Close()
	a, err := openResuming(t, runA, brokers, "a", "out", "shared", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, v := range values("a", 5) {
		if err := a.Write(v); err != nil {
			t.Fatal(err)
		}
	}
	snapshot(t, a, 1, wa)

	runB2 := &operatortest.Run{}
	defer runB2.Close()
	b2, errB := openResuming(t, runB2, brokers, "b", "out2", "shared", &operator.Restore{Checkpoint: 1, Handles: hsB, Read: wb.Read}, 1)
	if b2 != nil {
		defer b2.Close()
	}
	errA := a.NotifyComplete(1)
	if errB == nil || errA != nil {
		msg := ""
		if errA != nil && strings.Contains(errA.Error(), "another writer") {
			msg = " (a's checkpoint 1 records lost)"
		}
		t.Fatalf("job b restoring its checkpoint (transactions under \"bown\") with prefix \"shared\", job a's: b's start: %v; a's commit: %v%s; want b refused and a's checkpoint committed", errB, errA, msg)
	}
}
