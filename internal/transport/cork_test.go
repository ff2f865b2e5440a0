package transport

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/runtime"
)

// writes counts the writes to a connection; first is closed by the first.
type writes struct {
	net.Conn
	mu    sync.Mutex
	n     int
	first chan struct{}
}

func (w *writes) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.n++
	if w.n == 1 {
		close(w.first)
	}
	w.mu.Unlock()
	return w.Conn.Write(p)
}

func (w *writes) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// corkedPair is pair with the sender's writes counted and its corking
// delay set to hold (the receiver's too).
func corkedPair(t *testing.T, hold time.Duration) (*Conn, *Conn, *writes) {
	t.Helper()
	a, b := tcpPair(t)
	w := &writes{Conn: a, first: make(chan struct{})}
	ca, cb := newConn(w, FrameTimeout, time.Hour), newConn(b, FrameTimeout, time.Hour)
	for _, c := range []*Conn{ca, cb} {
		c.mu.Lock()
		c.holdFor = hold
		c.mu.Unlock()
	}
	t.Cleanup(func() { ca.Close(); cb.Close() })
	return ca, cb, w
}

// openChannel opens channel 1 from a to b, of capacity events: its ends,
// and what the receiving end signals when ready.
func openChannel(t *testing.T, a, b *Conn, capacity int) (*Output, *Input, chan struct{}) {
	t.Helper()
	ready := make(chan struct{}, 1)
	in, err := b.Input(1, strings_, capacity, ready)
	if err != nil {
		t.Fatal(err)
	}
	out, err := a.Output(1, strings_)
	if err != nil {
		t.Fatal(err)
	}
	return out, in, ready
}

// channel opens channel 1 from a to b, and waits for its first credits.
func channel(t *testing.T, a, b *Conn, capacity int) (*Output, *Input, chan struct{}) {
	t.Helper()
	out, in, ready := openChannel(t, a, b, capacity)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for !out.HasRoom() {
		select {
		case <-out.Room():
		case <-ctx.Done():
			t.Fatal("no credits within 10s")
		}
	}
	return out, in, ready
}

func batch(vs ...string) runtime.Event { return runtime.Event{Kind: runtime.KindBatch, Batch: vs} }

// Batches a task sends one after another go in one write when it flushes
// (as it does going idle), not a write each.
func TestBatchesWaitForOneAnotherUntilFlushed(t *testing.T) {
	a, b, w := corkedPair(t, time.Hour)
	out, in, ready := channel(t, a, b, 8)
	<-w.first // the greeting
	before := w.count()
	for i := range 5 {
		if ok, err := out.TryPush(batch(string(rune('a' + i)))); !ok || err != nil {
			t.Fatalf("push %d: %v, %v", i, ok, err)
		}
	}
	a.mu.Lock()
	queued, held := len(a.queue), a.held
	a.mu.Unlock()
	if queued != 5 || !held {
		t.Fatalf("after five small batches: %d frames queued, held %v; want 5, held", queued, held)
	}
	out.Flush()
	for i := range 5 {
		if got := pop(t, in, ready).Batch.([]string); got[0] != string(rune('a'+i)) {
			t.Fatalf("batch %d: %q", i, got)
		}
	}
	if n := w.count() - before; n != 1 {
		t.Fatalf("five batches took %d writes, want 1", n)
	}
}

// A batch nothing flushes goes within the corking delay, and a barrier at
// once, ahead of nothing it should follow.
func TestHeldBatchGoesWithinTheDelay(t *testing.T) {
	a, b, _ := corkedPair(t, corkDelay)
	out, in, ready := channel(t, a, b, 8)
	if ok, err := out.TryPush(batch("x")); !ok || err != nil {
		t.Fatalf("push: %v, %v", ok, err)
	}
	if got := pop(t, in, ready).Batch.([]string); got[0] != "x" {
		t.Fatalf("got %q", got)
	}

	a.mu.Lock()
	a.holdFor = time.Hour
	a.mu.Unlock()
	if ok, err := out.TryPush(batch("y")); !ok || err != nil {
		t.Fatalf("push: %v, %v", ok, err)
	}
	if ok, err := out.TryPush(runtime.Event{Kind: runtime.KindBarrier, ID: 4}); !ok || err != nil {
		t.Fatalf("push: %v, %v", ok, err)
	}
	if got := pop(t, in, ready); got.Kind != runtime.KindBatch || got.Batch.([]string)[0] != "y" {
		t.Fatalf("got %+v, want the batch y", got)
	}
	if got := pop(t, in, ready); got.Kind != runtime.KindBarrier || got.ID != 4 {
		t.Fatalf("got %+v, want barrier 4", got)
	}
}

// Batches beyond corkBytes go without a flush.
func TestFullCorkGoesAtOnce(t *testing.T) {
	a, b, _ := corkedPair(t, time.Hour)
	out, in, ready := channel(t, a, b, 8)
	big := string(make([]byte, corkBytes/2))
	for range 2 {
		if ok, err := out.TryPush(batch(big)); !ok || err != nil {
			t.Fatalf("push: %v, %v", ok, err)
		}
	}
	for range 2 {
		if got := pop(t, in, ready).Batch.([]string); len(got[0]) != len(big) {
			t.Fatalf("got a record of %d bytes", len(got[0]))
		}
	}
}

// Credits wait until a quarter of the window is due; a sender that runs
// out of them flushes what it holds, so that the receiver can free room.
func TestCreditsGoByTheQuarterWindow(t *testing.T) {
	a, b, _ := corkedPair(t, time.Hour)
	const capacity = 8
	out, in, ready := channel(t, a, b, capacity)
	pushed := make(chan error, 1)
	go func() {
		for i := range capacity + 1 { // the last waits for a credit
			if err := out.Push(t.Context(), batch(string(rune('a'+i)))); err != nil {
				pushed <- err
				return
			}
		}
		out.Flush() // as its task, going idle
		pushed <- nil
	}()
	pop(t, in, ready)
	b.mu.Lock()
	due, held := b.grant[1], b.held
	b.mu.Unlock()
	if due != 1 || !held {
		t.Fatalf("after one of %d taken: %d credits due, held %v; want 1, held", capacity, due, held)
	}
	pop(t, in, ready) // a quarter: the credits go
	if err := <-pushed; err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= capacity; i++ {
		if got := pop(t, in, ready).Batch.([]string); got[0] != string(rune('a'+i)) {
			t.Fatalf("batch %d: %q", i, got)
		}
	}
}

// What must go now (a barrier, a flush) goes though something queued
// after it, before the writer ran, may wait: a credit held does not hold
// back the barrier queued before it.
func TestHoldAfterReleaseHoldsNothingBack(t *testing.T) {
	a, b, _ := corkedPair(t, time.Hour)
	_, in, ready := channel(t, a, b, 8)
	f, err := finish(appendEvent(nil, typeEvent, 1, runtime.Event{Kind: runtime.KindBarrier, ID: 3}, strings_))
	if err != nil {
		t.Fatal(err)
	}
	a.mu.Lock() // the writer cannot run in between
	if !a.enqueue(f, false) {
		t.Fatal("a barrier's frame held")
	}
	a.hold(0) // a credit granted to a's peer
	a.mu.Unlock()
	signal(a.wake)
	if got := pop(t, in, ready); got.Kind != runtime.KindBarrier || got.ID != 3 {
		t.Fatalf("got %+v, want barrier 3", got)
	}
}

// Buffer debloating shrinks a window while a credit is held: the task
// then takes the events queued and withholds their credits, so no grant
// would release the held one but the corking timer, and the sender of a
// window of 1 would wait for it with the receiver idle. Shrinking sends
// the credits held (found by an outside review).
func TestShrunkWindowSendsHeldCredits(t *testing.T) {
	a, b, _ := corkedPair(t, time.Hour)
	const capacity = 8 // a quarter: 2
	out, in, ready := channel(t, a, b, capacity)
	for i := range capacity {
		if ok, err := out.TryPush(batch(string(rune('a' + i)))); !ok || err != nil {
			t.Fatalf("push %d: %v, %v", i, ok, err)
		}
	}
	out.Flush()
	pop(t, in, ready) // its credit is held: 1 of 2 due
	in.SetCapacity(1) // the debloater shrinks the window to 1
	for range capacity - 1 {
		pop(t, in, ready) // withheld
	}
	// The receiver's queue is empty and its task idle; its window is 1,
	// and the one credit the sender may have is held on b.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := out.Push(ctx, batch("z")); err != nil {
		t.Fatalf("a window of 1, its receiver idle and empty: the sender got no credit within 10s (%v)", err)
	}
	out.Flush() // as its task, going idle
	if got := pop(t, in, ready).Batch.([]string); got[0] != "z" {
		t.Fatalf("got %q", got)
	}
}
