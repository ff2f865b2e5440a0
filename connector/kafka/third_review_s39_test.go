package kafka

// Defects a third outside review of session 39's changes found: a restore
// took over a prefix another job used at that moment, whatever it restored.

import (
	"strings"
	"testing"

	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestAResumeWithoutSinkStateLeavesAnotherJobsPrefix: job a
// (prefix "shared") pre-commits checkpoint 1. Job b resumes its own
// checkpoint 7, in which this sink has no state (a sink added to the job,
// or one whose UID changed; Weir gives it Resumed and no Restore), and is
// given prefix "shared" by mistake. Nothing b restores names "shared", so
// the prefix is not its lineage's: b must be refused, as a fresh start
// is. It starts, records the prefix as its own and aborts a's
// pre-committed transaction: a's completed checkpoint's records are lost.
func TestAResumeWithoutSinkStateLeavesAnotherJobsPrefix(t *testing.T) {
	brokers := broker(t, "out", "out2")
	w := &operatortest.MemWriter{}
	a, _ := precommitted(t, brokers, sinkOf{job: "a", topic: "out", prefix: "shared"}, w)

	runB := &operatortest.Run{}
	defer runB.Close()
	b, errB := openPrefixed(t, runB, brokers, sinkOf{job: "b", topic: "out2", prefix: "shared", resumed: 7})
	if b != nil {
		defer b.Close()
	}
	errA := a.NotifyComplete(1)
	if errB == nil || errA != nil {
		t.Fatalf("job b resuming checkpoint 7 with no state for its sink, given job a's prefix: b's start: %v; then a's commit of checkpoint 1: %v; want b refused (a's prefix record names job a) and a's checkpoint committed", errB, errA)
	}
}

// TestARestoreUnderAnotherPrefixLeavesAnotherJobsPrefix: job b
// wrote under its own prefix "bown" and completed checkpoint 1. It is
// restarted from that checkpoint with its prefix changed to "shared", job
// a's, which is running with checkpoint 1 pre-committed. b's checkpoint
// names transactions under "bown" only: "shared" is not its lineage's, and
// b must be refused. It takes the prefix over and aborts a's transaction.
func TestARestoreUnderAnotherPrefixLeavesAnotherJobsPrefix(t *testing.T) {
	brokers := broker(t, "out", "out2")
	wb := &operatortest.MemWriter{}
	runB1 := &operatortest.Run{}
	b1, err := openPrefixed(t, runB1, brokers, sinkOf{job: "b", topic: "out2", prefix: "bown"})
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
	a, _ := precommitted(t, brokers, sinkOf{job: "a", topic: "out", prefix: "shared"}, wa)

	runB2 := &operatortest.Run{}
	defer runB2.Close()
	b2, errB := openPrefixed(t, runB2, brokers, sinkOf{job: "b", topic: "out2", prefix: "shared", restore: &operator.Restore{Checkpoint: 1, Handles: hsB, Read: wb.Read}, resumed: 1})
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
