package runtime

import (
	"context"
	"errors"
	"testing"
)

// An elastic emitter forces an event it has no room for, and the task
// checks for room only between input events: one input event that yields
// many batches (a flatMap, a window fired by one watermark, a drain) used
// to force them all on one channel, without bound (over the network, past
// the receiver's bound, a protocol violation that failed the job, again
// after each restart). It forces at most MaxForced, then waits for room:
// here its context is cancelled, so the wait ends at once with the cause.
func TestReview2ForcedBurstIsBounded(t *testing.T) {
	ch := NewLocalChannel(1, make(chan struct{}, 1))
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("stopped while waiting for room")
	cancel(stop)
	e := NewEmitter[int](ctx, []OutputChannel{ch}, nil, 1, nil)
	e.Elastic = true
	for i := range 1 + MaxForced { // one fits, MaxForced are forced
		e.Collect(i)
		if err := e.Err(); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	if e.Congested() == nil {
		t.Fatal("not congested with a full channel and forced events")
	}
	e.Collect(1 + MaxForced)
	if err := e.Err(); !errors.Is(err, stop) {
		t.Fatalf("event %d: %v, want it to wait for room", 1+MaxForced, err)
	}
	if n := ch.q.Len(); n != 1+MaxForced {
		t.Fatalf("%d events queued, want %d", n, 1+MaxForced)
	}
}
