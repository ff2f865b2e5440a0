package transport

import (
	"strings"
	"testing"

	"github.com/weirstream/weir/internal/runtime"
)

// TestOvertakeCarriesTheLargestEventBatch: a batch that crosses as an
// event must also cross as the tail of an overtaking barrier, whose frame
// adds the barrier's fields to the batch's. Found by an outside review
// (session 34): an event frame could fill maxEventFrameBytes, and an unaligned
// checkpoint whose barrier took such a batch along failed the job with
// "make batches smaller".
func TestOvertakeCarriesTheLargestEventBatch(t *testing.T) {
	// The largest one-record batch that crosses as an event.
	event := func(n int) []byte { return appendEvent(nil, typeEvent, 1, batch(strings.Repeat("x", n)), strings_) }
	n := maxEventFrameBytes - 16
	for len(event(n+1))-4 <= maxEventFrameBytes {
		n++
	}
	a, b := pair(t)
	out, in, ready := channel(t, a, b, 1)
	tail := batch(strings.Repeat("x", n))
	if err := out.Push(t.Context(), tail); err != nil {
		t.Fatalf("the batch as an event: %v", err)
	}
	if e := pop(t, in, ready); e.Kind != runtime.KindBatch || len(e.Batch.([]string)[0]) != n {
		t.Fatalf("got %v, want the batch", e.Kind)
	}
	// The barrier's fields at their largest.
	barrier := runtime.Event{Kind: runtime.KindBarrier, ID: 1<<63 - 1, Time: -1 << 63, Completed: 1<<63 - 1}
	if err := out.Overtake(barrier, tail); err != nil {
		t.Fatalf("the batch as an overtaking barrier's tail: %v", err)
	}
	if e := pop(t, in, ready); e.Kind != runtime.KindBarrier {
		t.Fatalf("first event %v, want the barrier", e.Kind)
	}
	if e := pop(t, in, ready); e.Kind != runtime.KindBatch || len(e.Batch.([]string)[0]) != n {
		t.Fatalf("second event %v, want the tail", e.Kind)
	}
	// One byte more does not cross as an event, and says why.
	if err := out.Push(t.Context(), batch(strings.Repeat("x", n+1))); err == nil || !strings.Contains(err.Error(), "make batches smaller") {
		t.Fatalf("a batch one byte larger: %v, want the frame limit", err)
	}
}
