package transport

import (
	"testing"

	"github.com/weirstream/weir/internal/runtime"
)

// windowOf counts the events out can send before it runs out of credits,
// taking them all at the receiver afterwards, and waits until the
// credits their taking grants have arrived.
func windowOf(t *testing.T, out *Output, in *Input, ready <-chan struct{}, credits *fence) int {
	t.Helper()
	n := 0
	for {
		ok, err := out.TryPush(runtime.Event{Kind: runtime.KindIdle})
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		n++
	}
	for range n {
		pop(t, in, ready)
	}
	credits.wait(t)
	return n
}

// Buffer debloating shrinks a network channel's window by withholding the
// credits of events taken, and grows it again by granting them at once;
// the window never exceeds the capacity the channel was opened with, nor
// falls below one event.
func TestInputSetCapacityResizesTheWindow(t *testing.T) {
	const capacity = 8
	a, b := pair(t)
	out, in, ready := openChannel(t, a, b, capacity)
	credits := newFence(t, b, a, 2)
	credits.wait(t) // the opening grant arrived
	if got := windowOf(t, out, in, ready, credits); got != capacity {
		t.Fatalf("window at open: %d events, want %d", got, capacity)
	}
	for _, c := range []struct{ set, want int }{
		{3, 3},               // shrink
		{3, 3},               // unchanged
		{1, 1},               // shrink further
		{6, 6},               // grow: withheld credits granted
		{0, 1},               // below 1: 1
		{100, capacity},      // beyond the opened capacity: it
		{capacity, capacity}, // back to full
	} {
		in.SetCapacity(c.set)
		credits.wait(t) // a grow's credits arrived
		// The first window after a shrink still spends credits granted
		// before it; the one after it is the new size.
		windowOf(t, out, in, ready, credits)
		if got := windowOf(t, out, in, ready, credits); got != c.want {
			t.Fatalf("SetCapacity(%d): window of %d events, want %d", c.set, got, c.want)
		}
	}
}
