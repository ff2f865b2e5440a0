package barrier

import (
	"fmt"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// Review of 8246a71: a barrier that arrives while a newer checkpoint is in
// alignment (a savepoint or final checkpoint in Unaligned mode, any
// checkpoint in ExactlyOnce mode) is dropped by the "obsolete" branch of
// onBarrier without remembering that its channel delivered it, and the
// checkpoint is not marked over. When the newer alignment then ends (the
// coordinator's abort, a cancel marker), the next barrier of the old id on
// another channel starts it from scratch: an unaligned snapshot that
// persists channels which already delivered (or passed) its barrier. The
// records persisted are after the cut, and the persistence can never
// complete: those channels will never deliver that barrier again.

func persistsDelivered(acts []Action, id checkpoint.ID, delivered ...int) []string {
	var bad []string
	for _, x := range acts {
		if p, ok := x.(PersistInput); ok && p.ID == id {
			for _, c := range delivered {
				if p.Channel == c {
					bad = append(bad, fmt.Sprint(p))
				}
			}
		}
	}
	return bad
}

// Unaligned, channels 0..2. Savepoint 2 aligns; channel 1 delivers
// barrier 1 (dropped as obsolete: channel 0 passed 1); the coordinator
// aborts savepoint 2; channel 2 delivers barrier 1.
func TestReviewUnalignedBarrierDroppedUnderSavepointIsPersistedAfterAbort(t *testing.T) {
	a := New(Unaligned, 3)
	t.Logf("aligned-barrier 0 2 -> %v", a.OnAlignedBarrier(0, 2))
	t.Logf("barrier 1 1 -> %v", a.OnBarrier(1, 1))
	t.Logf("abort 2 -> %v", a.Abort(2))
	acts := a.OnBarrier(2, 1)
	t.Logf("barrier 2 1 -> %v persisting=%v", acts, a.Persisting())
	// Channel 1 delivered barrier 1, channel 0 passed it (it delivered 2):
	// neither may be persisted as input state of 1.
	if bad := persistsDelivered(acts, 1, 0, 1); len(bad) > 0 {
		t.Errorf("persists channels that already delivered or passed barrier 1: %v", bad)
	}
	// Checkpoint 1 can never complete here: it must not be left persisting.
	for _, id := range a.Persisting() {
		if id == 1 {
			t.Errorf("checkpoint 1 persists channel state, but channels 0 and 1 will never deliver its barrier: stuck until a newer barrier or an abort")
		}
	}
}

// The same with a cancel marker instead of the abort.
func TestReviewUnalignedBarrierDroppedUnderSavepointIsPersistedAfterCancel(t *testing.T) {
	a := New(Unaligned, 3)
	a.OnAlignedBarrier(0, 2)
	a.OnBarrier(1, 1)
	t.Logf("cancel 1 2 -> %v", a.OnCancel(1, 2))
	acts := a.OnBarrier(2, 1)
	t.Logf("barrier 2 1 -> %v", acts)
	if bad := persistsDelivered(acts, 1, 0, 1); len(bad) > 0 {
		t.Errorf("persists channels that already delivered or passed barrier 1: %v", bad)
	}
	for _, x := range acts {
		if s, ok := x.(Snapshot); ok && s.ID == 1 {
			t.Errorf("snapshot 1 after channel 1 was read past its barrier 1 (%v)", acts)
		}
	}
}

// ExactlyOnce with an aligned timeout: the same drop, then checkpoint 1
// blocks channel 2 for a checkpoint that cannot complete, and the timeout
// switches it to unaligned, persisting channel 1 past its barrier.
func TestReviewTimeoutSwitchPersistsChannelPastItsBarrier(t *testing.T) {
	a := New(ExactlyOnce, 3, AlignedTimeout(10*time.Millisecond))
	t0 := time.Unix(0, 0)
	a.Tick(t0)
	a.OnBarrier(0, 2)
	a.OnBarrier(1, 1) // dropped: 1 < 2 in alignment
	a.OnCancel(1, 2)
	t.Logf("barrier 2 1 -> %v", a.OnBarrier(2, 1))
	acts := a.Tick(t0.Add(20 * time.Millisecond))
	t.Logf("tick 20ms -> %v", acts)
	if bad := persistsDelivered(acts, 1, 0, 1); len(bad) > 0 {
		t.Errorf("the switch persists channels that already delivered or passed barrier 1: %v", bad)
	}
}

// Pre-existing in ExactlyOnce without a timeout (the same branch before
// 8246a71): checkpoint 1 blocks channel 2 although channels 0 and 1 are
// past barrier 1; only a newer barrier on 0 or 1 or the coordinator's
// timeout releases it.
func TestReviewExactlyOnceBlocksForCheckpointThatCannotComplete(t *testing.T) {
	a := New(ExactlyOnce, 3)
	a.OnBarrier(0, 2)
	a.OnBarrier(1, 1)
	a.OnCancel(1, 2)
	acts := a.OnBarrier(2, 1)
	t.Logf("barrier 2 1 -> %v", acts)
	if a.Blocked(2) {
		t.Errorf("channel 2 blocked for checkpoint 1, which channels 0 and 1 have passed")
	}
}
