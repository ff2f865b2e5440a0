package transport

import (
	"context"
	"fmt"
	"testing"
	"time"

)

// An elastic emitter forces every event it has no credit for
// (runtime.Emitter.send → Output.ForcePush) and only checks for room
// between input events: one input event that yields many batches (a
// flatMap, a window fired by one watermark, a drain) forces them all on one
// channel. The receiver counts forced events against maxOvertaking and
// fails the connection past it: the job restarts and does it again.
func TestReview2ForcedBurstKillsTheConnection(t *testing.T) {
	a, b := pair(t)
	out, err := a.Output(1, strings_)
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{}, 1)
	in, err := b.Input(1, strings_, 1, ready)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := out.Push(ctx, batchOf("first")); err != nil { // takes the only credit
		t.Fatal(err)
	}
	const burst = maxOvertaking + 10
	for i := range burst {
		if err := out.ForcePush(batchOf(fmt.Sprint(i))); err != nil {
			t.Fatalf("ForcePush %d: %v", i, err)
		}
	}
	// The receiving task is busy (it is what back-pressures): it pops
	// nothing while the burst arrives.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		in.mu.Lock()
		n := in.q.Len()
		in.mu.Unlock()
		if n == burst+1 {
			return
		}
		select {
		case <-b.Done():
			t.Fatalf("the receiver failed the connection with %d of %d events queued: %v", n, burst+1, b.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatal("the burst never arrived")
}
