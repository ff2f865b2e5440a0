package barrier

import (
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// Review of 8246a71: "must align" is decided per call (OnAlignedBarrier or
// OnBarrier), not per checkpoint. If the driver feeds one copy of barrier
// n as aligned and another as not (the runtime will read the flag from each
// barrier; the simulation reads one map, so it never mixes), the aligner
// keeps both an alignment and an unaligned persistence of n.

// Unaligned: the first copy of 1 aligns (channel 0 blocked), the second
// snapshots unaligned, persists channel 0 past its barrier, and channel 0
// stays blocked by an alignment nobody will finish.
func TestReviewMixedFlagSameCheckpointAlignedThenUnaligned(t *testing.T) {
	a := New(Unaligned, 2)
	t.Logf("aligned-barrier 0 1 -> %v", a.OnAlignedBarrier(0, 1))
	acts := a.OnBarrier(1, 1)
	t.Logf("barrier 1 1 -> %v aligning=%v persisting=%v blocked0=%v", acts, a.Aligning(), a.Persisting(), a.Blocked(0))
	if bad := persistsDelivered(acts, 1, 0); len(bad) > 0 {
		t.Errorf("persists channel 0, which delivered barrier 1: %v", bad)
	}
	if a.Blocked(0) {
		t.Errorf("channel 0 still blocked after checkpoint 1 was snapshotted")
	}
	if len(a.Aligning()) != 0 {
		t.Errorf("checkpoint 1 both snapshotted and still aligning: %v", a.Aligning())
	}
}

// ExactlyOnce with a timeout: the first copy of savepoint 1 came without
// the flag, so the savepoint is switched to unaligned.
func TestReviewMixedFlagSavepointSwitchedByTimeout(t *testing.T) {
	a := New(ExactlyOnce, 2, AlignedTimeout(10*time.Millisecond))
	t0 := time.Unix(0, 0)
	a.Tick(t0)
	a.OnBarrier(0, 1)
	a.Tick(t0.Add(time.Millisecond))
	a.OnAlignedBarrier(0, 1) // a duplicate, flagged (no effect)
	acts := a.Tick(t0.Add(20 * time.Millisecond))
	t.Logf("tick -> %v", acts)
	_ = acts
	// Flagged on the second channel too: still switched.
	b := New(ExactlyOnce, 3, AlignedTimeout(10*time.Millisecond))
	b.Tick(t0)
	b.OnBarrier(0, 1)
	b.OnAlignedBarrier(1, 1)
	acts = b.Tick(t0.Add(20 * time.Millisecond))
	for _, x := range acts {
		if s, ok := x.(Snapshot); ok && s.Unaligned {
			t.Errorf("checkpoint 1, fed with OnAlignedBarrier on channel 1, switched to unaligned: %v", acts)
		}
	}
}

// What held: the contract on consistent use.

// A timeout never switches after the snapshot, nor a savepoint, nor before
// the alignment has lasted longer than the timeout measured from the
// last Tick before its first barrier.
func TestReviewTimeoutHeld(t *testing.T) {
	t0 := time.Unix(0, 0)
	a := New(ExactlyOnce, 2, AlignedTimeout(10*time.Millisecond))
	a.Tick(t0)
	a.OnBarrier(0, 1)
	a.OnBarrier(1, 1) // snapshot 1 aligned
	if acts := a.Tick(t0.Add(time.Hour)); len(acts) != 0 {
		t.Fatalf("tick after the snapshot: %v", acts)
	}
	a.OnAlignedBarrier(0, 2)
	if acts := a.Tick(t0.Add(2 * time.Hour)); len(acts) != 0 {
		t.Fatalf("savepoint switched: %v", acts)
	}
	a.OnAlignedBarrier(1, 2)
	// Boundary: exactly the timeout does not switch, 1ns more does.
	now := t0.Add(3 * time.Hour)
	a.Tick(now)
	a.OnBarrier(1, 3)
	if acts := a.Tick(now.Add(10 * time.Millisecond)); len(acts) != 0 {
		t.Fatalf("switched at exactly the timeout: %v", acts)
	}
	acts := a.Tick(now.Add(10*time.Millisecond + 1))
	want := []string{"snapshot 3 unaligned", "forward 3 overtaking", "persist-input 0 of 3", "unblock-all"}
	if got := strs(acts); !equal(got, want) {
		t.Fatalf("switch: %v, want %v", got, want)
	}
	// The late barrier completes the channel state, once.
	if got := strs(a.OnBarrier(0, 3)); !equal(got, []string{"end-persist 0 of 3", "channel-state-complete 3"}) {
		t.Fatalf("late barrier: %v", got)
	}
	if got := a.OnBarrier(0, 3); len(got) != 0 {
		t.Fatalf("duplicate late barrier: %v", got)
	}
}

// Persistence and the "over" set are bounded at 64, and a newer barrier
// on a channel that has not delivered an older persisting one declines it.
func TestReviewBoundsHeld(t *testing.T) {
	a := New(Unaligned, 2)
	for id := checkpoint.ID(1); id <= 200; id++ {
		a.OnBarrier(0, id) // channel 1 never delivers: every one persists
		if n := len(a.Persisting()); n > maxTracked {
			t.Fatalf("%d checkpoints persisting", n)
		}
	}
	if p := a.Persisting(); len(p) != maxTracked || p[0] != 137 {
		t.Fatalf("persisting %v", p)
	}
	got := strs(a.OnBarrier(1, 200))
	if len(got) != 3*63+2 { // end-persist, decline, forward-cancel for 137..199; end-persist and complete for 200
		t.Fatalf("channel 1 passing 137..199: %d actions %v", len(got), got)
	}
	if len(a.Persisting()) != 0 {
		t.Fatalf("persisting %v", a.Persisting())
	}
	for id := checkpoint.ID(1000); id < 1200; id++ {
		a.Abort(id)
	}
	if len(a.over) > maxTracked {
		t.Fatalf("%d ids remembered as over", len(a.over))
	}
}

func strs(acts []Action) []string {
	var s []string
	for _, x := range acts {
		s = append(s, x.(interface{ String() string }).String())
	}
	return s
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
