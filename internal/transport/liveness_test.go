package transport

import (
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/runtime"
)

// cutPair is two connections through a relay that drops every byte both
// ways once cut, as a network partition does: no reset, no FIN.
func cutPair(t *testing.T) (a, b net.Conn, cut *atomic.Bool) {
	t.Helper()
	a, ra := tcpPair(t)
	rb, b := tcpPair(t)
	cut = &atomic.Bool{}
	var wg sync.WaitGroup
	relay := func(from, to net.Conn) {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := from.Read(buf)
			if n > 0 && !cut.Load() {
				to.Write(buf[:n])
			}
			if err != nil {
				if !cut.Load() { // a cut carries no FIN either
					to.Close()
				}
				return
			}
		}
	}
	wg.Add(2)
	go relay(ra, rb)
	go relay(rb, ra)
	t.Cleanup(func() {
		ra.Close()
		rb.Close()
		wg.Wait()
	})
	return a, b, cut
}

// TestCutConnectionFailsWithinTheIdleTimeout: a data path cut while both
// ends stay up (a partition between two workers that both still reach the
// coordinator) fails the connection on both sides within the idle timeout,
// as ErrPeerSilent: before, it waited for TCP (checkpoints stopped for
// 107 s on a 60 s cut). Before the cut, a quiet connection lives on
// through its keep-alives, and events flow.
func TestCutConnectionFailsWithinTheIdleTimeout(t *testing.T) {
	const idle = 400 * time.Millisecond
	a, b, cut := cutPair(t)
	ca, cb := New(a, idle), New(b, idle)
	defer ca.Close()
	defer cb.Close()
	out, err := ca.Output(1, strings_)
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{}, 1)
	in, err := cb.Input(1, strings_, 4, ready)
	if err != nil {
		t.Fatal(err)
	}
	// Quiet for five idle timeouts: the keep-alives hold it up.
	select {
	case <-ca.Done():
		t.Fatalf("a quiet connection failed: %v", ca.Err())
	case <-cb.Done():
		t.Fatalf("a quiet connection failed: %v", cb.Err())
	case <-time.After(5 * idle): // NB: waits out a span in which nothing may happen
	}
	if err := out.Push(t.Context(), runtime.Event{Kind: runtime.KindWatermark, Time: 7}); err != nil {
		t.Fatal(err)
	}
	if e := pop(t, in, ready); e.Time != 7 {
		t.Fatalf("got %+v", e)
	}

	cut.Store(true)
	start := time.Now()
	for _, c := range []*Conn{ca, cb} {
		select {
		case <-c.Done():
		case <-time.After(20 * idle):
			t.Fatalf("the cut connection still works after %v", 20*idle)
		}
		if err := c.Err(); !errors.Is(err, ErrPeerSilent) {
			t.Fatalf("error %v, want ErrPeerSilent", err)
		}
	}
	t.Logf("both ends failed %v after the cut (idle timeout %v): %v", time.Since(start).Round(time.Millisecond), idle, ca.Err())
}

// TestCutHalfWayThroughAFrameIsASilentPeer: a network cut while a frame
// crosses stops the frame and the keep-alives behind it. The connection
// fails within the idle timeout as ErrPeerSilent; it waited for the frame
// timeout (30 s) and failed as ErrFrameStalled, which the coordinator does
// not take for a cut data path: it placed the two workers together again,
// and the job gave up (TestDataPathPartitionNetns, in CI).
func TestCutHalfWayThroughAFrameIsASilentPeer(t *testing.T) {
	hello, err := finish(appendHello(nil))
	if err != nil {
		t.Fatal(err)
	}
	a, b := tcpPair(t)
	defer b.Close()
	if _, err := b.Write(append(slices.Clone(hello), 0, 0, 1, 0, typeEvent, 1, 2)); err != nil {
		t.Fatal(err)
	}
	const idle = 200 * time.Millisecond
	c := newConn(a, time.Minute, idle)
	defer c.Close()
	select {
	case <-c.Done():
	case <-time.After(50 * idle):
		t.Fatalf("the connection still waits after %v", 50*idle)
	}
	if err := c.Err(); !errors.Is(err, ErrPeerSilent) {
		t.Fatalf("error %v, want ErrPeerSilent", err)
	}
}
