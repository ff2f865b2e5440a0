package transport

// An outside review wrote these tests against 7992e50; each failed there.

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/runtime"
)

// slowPair is two connections through a relay that carries a to b at
// about chunk bytes every gap (b to a at full speed): a slow link whose
// bytes never stop flowing for more than gap.
func slowPair(t *testing.T, chunk int, gap time.Duration) (a, b net.Conn) {
	t.Helper()
	a, ra := tcpPair(t)
	rb, b := tcpPair(t)
	var wg sync.WaitGroup
	relay := func(from, to net.Conn, slow bool) {
		defer wg.Done()
		buf := make([]byte, chunk)
		for {
			n, err := from.Read(buf)
			if n > 0 {
				to.Write(buf[:n])
				if slow {
					time.Sleep(gap) // the link's pace
				}
			}
			if err != nil {
				to.Close()
				return
			}
		}
	}
	wg.Add(2)
	go relay(ra, rb, true)
	go relay(rb, ra, false)
	t.Cleanup(func() {
		ra.Close()
		rb.Close()
		wg.Wait()
	})
	return a, b
}

// TestLargeFrameOnASlowLinkIsNotSilence: a 2 MiB batch (frames may be
// 16 MiB) crosses a link at about 1.6 MB/s, so it takes some 1.3 s, with
// bytes arriving every 10 ms. The idle timeout is 500 ms (the cluster
// passes its heartbeat timeout, 5 s by default, against 16 MiB frames:
// 3.4 MB/s needed). The peer is never silent, and the write always
// drains, yet the connection fails: the receiver now allows the rest of a
// frame min(FrameTimeout, idle timeout) instead of FrameTimeout (30 s),
// and the sender's write deadline bounds the whole write, not a write
// that makes no progress.
func TestLargeFrameOnASlowLinkIsNotSilence(t *testing.T) {
	const idle = 500 * time.Millisecond
	a, b := slowPair(t, 16<<10, 10*time.Millisecond)
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
	batch := make([]string, 2048)
	for i := range batch {
		batch[i] = strings.Repeat("x", 1<<10)
	}
	start := time.Now()
	if err := out.Push(t.Context(), runtime.Event{Kind: runtime.KindBatch, Batch: batch}); err != nil {
		t.Fatal(err)
	}
	done := make(chan runtime.Event, 1)
	go func() {
		for {
			if e, ok := in.TryPop(); ok {
				done <- e
				return
			}
			select {
			case <-ready:
			case <-cb.Done():
				return
			case <-time.After(10 * time.Second):
				return
			}
		}
	}()
	select {
	case e := <-done:
		if got := len(e.Batch.([]string)); got != len(batch) {
			t.Fatalf("got %d records", got)
		}
		t.Logf("2 MiB crossed in %v", time.Since(start).Round(time.Millisecond))
	case <-cb.Done():
		t.Fatalf("the receiver failed %v into a frame that was arriving all along: %v (sender: %v)", time.Since(start).Round(time.Millisecond), cb.Err(), ca.Err())
	case <-ca.Done():
		t.Fatalf("the sender failed %v into a write that was draining all along: %v", time.Since(start).Round(time.Millisecond), ca.Err())
	case <-time.After(15 * time.Second):
		t.Fatal("nothing after 15 s")
	}
}

// TestManyFramesOnASlowLinkAreNotSilence: eight channels each push four
// 256 KiB batches (within their credits) over the same slow link (about
// 1.6 MB/s, bytes every 10 ms); each frame crosses in some 160 ms, well
// within the 500 ms idle timeout, so the receiver is content. The writer
// coalesces what piled up into one write of 8 MiB and gives all of it one
// deadline of the idle timeout: it fails with ErrPeerSilent, "it took
// nothing this side wrote", while the peer took bytes every 10 ms.
func TestManyFramesOnASlowLinkAreNotSilence(t *testing.T) {
	const idle = 500 * time.Millisecond
	const channels, pushes = 8, 4
	a, b := slowPair(t, 16<<10, 10*time.Millisecond)
	ca, cb := New(a, idle), New(b, idle)
	defer ca.Close()
	defer cb.Close()
	batch := make([]string, 256)
	for i := range batch {
		batch[i] = strings.Repeat("x", 1<<10)
	}
	ready := make(chan struct{}, 1)
	var ins []*Input
	for ch := uint64(1); ch <= channels; ch++ {
		in, err := cb.Input(ch, strings_, pushes, ready)
		if err != nil {
			t.Fatal(err)
		}
		ins = append(ins, in)
	}
	start := time.Now()
	for ch := uint64(1); ch <= channels; ch++ {
		out, err := ca.Output(ch, strings_)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for range pushes {
				if out.Push(t.Context(), runtime.Event{Kind: runtime.KindBatch, Batch: batch}) != nil {
					return
				}
			}
		}()
	}
	got := 0
	deadline := time.After(20 * time.Second)
	for got < channels*pushes {
		for _, in := range ins {
			if _, ok := in.TryPop(); ok {
				got++
			}
		}
		select {
		case <-ready:
		case <-time.After(20 * time.Millisecond): // polls the inputs
		case <-ca.Done():
			t.Fatalf("the sender failed %v in, %d of %d batches through, though the link never stopped: %v",
				time.Since(start).Round(time.Millisecond), got, channels*pushes, ca.Err())
		case <-cb.Done():
			t.Fatalf("the receiver failed %v in, %d of %d batches through: %v", time.Since(start).Round(time.Millisecond), got, channels*pushes, cb.Err())
		case <-deadline:
			t.Fatalf("%d of %d batches after 20 s", got, channels*pushes)
		}
	}
	t.Logf("8 MiB crossed in %v", time.Since(start).Round(time.Millisecond))
}

// TestPeerThatTakesUpItsSideLateIsGreeted: in a cluster, the worker whose
// name sorts first dials and starts its Conn at once, while its peer
// starts its own only when its wiring reaches that edge; links allows that
// up to handshakeTimeout (10 s) for the peer to show up. The dialler's
// reader now waits for the greeting min(FrameTimeout, idle timeout) (the
// 5 s heartbeat timeout) instead of FrameTimeout (30 s): a peer that takes
// up its side 1.5 idle timeouts later (here 600 ms for 400 ms) finds the
// connection failed, as ErrFrameStalled, and the attempt fails over a
// connection that was fine (the cluster then also cuts the pair).
func TestPeerThatTakesUpItsSideLateIsGreeted(t *testing.T) {
	const idle = 400 * time.Millisecond
	a, b := tcpPair(t)
	ca := New(a, idle)
	defer ca.Close()
	select {
	case <-ca.Done():
		t.Fatalf("the dialler's connection failed before its peer took up its side (1.5 idle timeouts later, within the handshake's time): %v", ca.Err())
	case <-time.After(3 * idle / 2): // the peer's wiring reaches this edge late
	}
	cb := New(b, idle)
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
	if err := out.Push(t.Context(), runtime.Event{Kind: runtime.KindWatermark, Time: 7}); err != nil {
		t.Fatalf("push: %v (conn: %v)", err, ca.Err())
	}
	if e := pop(t, in, ready); e.Time != 7 {
		t.Fatalf("got %+v", e)
	}
}
