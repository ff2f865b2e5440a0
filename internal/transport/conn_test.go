package transport

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/runtime"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var strings_ = runtime.Batches(codec.For[string]())

// pair returns the two ends of a loopback TCP connection, multiplexed.
func pair(t testing.TB) (*Conn, *Conn) {
	t.Helper()
	a, b := tcpPair(t)
	ca, cb := New(a, time.Minute), New(b, time.Minute)
	t.Cleanup(func() { ca.Close(); cb.Close() })
	return ca, cb
}

func tcpPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-accepted
	if b == nil {
		t.Fatal("accept failed")
	}
	return a, b
}

// pop waits for the next event of in, failing the test after a deadline.
func pop(t *testing.T, in *Input, ready <-chan struct{}) runtime.Event {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if e, ok := in.TryPop(); ok {
			return e
		}
		select {
		case <-ready:
		case <-deadline:
			t.Fatal("no event within 10s")
		}
	}
}

func TestEveryEventKindCrosses(t *testing.T) {
	a, b := pair(t)
	ready := make(chan struct{}, 1)
	in, err := b.Input(7, strings_, 4, ready)
	if err != nil {
		t.Fatal(err)
	}
	out, err := a.Output(7, strings_)
	if err != nil {
		t.Fatal(err)
	}
	sent := []runtime.Event{
		{Kind: runtime.KindBatch, Batch: []string{"a", "", "ünïcode"}},
		{Kind: runtime.KindBatch, Batch: []string{"x", "y"}, Times: []int64{-5, 1 << 40}},
		{Kind: runtime.KindBatch, Batch: []string{"k", "l", "m"}, Groups: []uint16{0, 127, 32767}},
		{Kind: runtime.KindWatermark, Time: -3},
		{Kind: runtime.KindBarrier, ID: 9},
		{Kind: runtime.KindBarrier, ID: 11, Completed: 10, Time: 7},
		{Kind: runtime.KindCancel, ID: 10},
		{Kind: runtime.KindIdle},
		{Kind: runtime.KindWatermark, Time: 1 << 50},
		{Kind: runtime.KindEndOfData},
	}
	ctx := context.Background()
	go func() {
		for _, e := range sent {
			if err := out.Push(ctx, e); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i, want := range sent {
		got := pop(t, in, ready)
		if got.Kind != want.Kind || got.ID != want.ID || got.Time != want.Time || !slices.Equal(got.Times, want.Times) || !slices.Equal(got.Groups, want.Groups) {
			t.Fatalf("event %d: got %+v, want %+v", i, got, want)
		}
		if want.Kind == runtime.KindBatch && !slices.Equal(got.Batch.([]string), want.Batch.([]string)) {
			t.Fatalf("event %d: batch %q, want %q", i, got.Batch, want.Batch)
		}
	}
}

// A channel whose receiver does not read (as during barrier alignment)
// holds back its own sender only: the other channel on the same
// connection keeps flowing, and the blocked one resumes once read.
func TestBlockedChannelDoesNotStallOthers(t *testing.T) {
	a, b := pair(t)
	const capacity = 4
	readyA, readyB := make(chan struct{}, 1), make(chan struct{}, 1)
	inA, _ := b.Input(1, strings_, capacity, readyA)
	inB, _ := b.Input(2, strings_, capacity, readyB)
	outA, _ := a.Output(1, strings_)
	outB, _ := a.Output(2, strings_)
	ctx := context.Background()
	batch := runtime.Event{Kind: runtime.KindBatch, Batch: []string{strings.Repeat("x", 1000)}}

	for range capacity {
		if err := outA.Push(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	blocked := make(chan error, 1)
	go func() { blocked <- outA.Push(ctx, batch) }()

	// Far more than the capacity and the socket buffers crosses on B.
	const n = 2000
	go func() {
		for range n {
			if err := outB.Push(ctx, batch); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for range n {
		pop(t, inB, readyB)
	}
	select {
	case err := <-blocked:
		t.Fatalf("a push beyond the receiver's credits returned (%v) while nothing was read", err)
	default:
	}
	pop(t, inA, readyA)
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	for range capacity {
		pop(t, inA, readyA)
	}
	if e, ok := inA.TryPop(); ok {
		t.Fatalf("channel A holds %v beyond what was sent", e)
	}
}

func TestPushEndsWithContextAndConnection(t *testing.T) {
	a, b := pair(t)
	out, _ := a.Output(3, strings_)
	ctx, cancel := context.WithCancelCause(context.Background())
	why := errors.New("cancelled by the test")
	cancel(why)
	// No credit was granted: the push waits, and ends with its context.
	if err := out.Push(ctx, runtime.Event{Kind: runtime.KindIdle}); !errors.Is(err, why) {
		t.Fatalf("push: %v, want %v", err, why)
	}
	errc := make(chan error, 1)
	go func() { errc <- out.Push(context.Background(), runtime.Event{Kind: runtime.KindIdle}) }()
	b.Close()
	<-a.Done()
	if err := <-errc; err == nil || a.Err() == nil {
		t.Fatalf("push on a lost connection: %v (connection: %v)", err, a.Err())
	}
}

func TestChannelsOpenOnce(t *testing.T) {
	a, _ := pair(t)
	if _, err := a.Output(1, strings_); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Output(1, strings_); err == nil {
		t.Fatal("channel 1 opened twice for sending")
	}
	ready := make(chan struct{}, 1)
	if _, err := a.Input(1, strings_, 1, ready); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Input(1, strings_, 1, ready); err == nil {
		t.Fatal("channel 1 opened twice for receiving")
	}
	if _, err := a.Input(2, strings_, 0, ready); err == nil {
		t.Fatal("capacity 0 accepted")
	}
}

func raw(typ byte, ch uint64, payload ...byte) []byte {
	f := appendHeader(nil, typ, ch)
	f, _ = finish(append(f, payload...))
	return f
}

// A peer that breaks the protocol fails the connection with an error that
// says what it did; nothing panics.
func TestMalformedFramesFailTheConnection(t *testing.T) {
	hello := appendHello(nil)
	finish(hello)
	event := func(ch uint64, kind runtime.Kind, p ...byte) []byte {
		return raw(typeEvent, ch, append([]byte{byte(kind)}, p...)...)
	}
	tooLong := binary.BigEndian.AppendUint32(nil, MaxFrameBytes+1)
	cases := []struct {
		name, want string
		stream     [][]byte
	}{
		{"not weir", "did not greet", [][]byte{[]byte("GET / HTTP/1.1\r\n\r\n")}},
		{"other version", "version 9", [][]byte{raw(typeHello, 0, 'w', 'e', 'i', 'r', 9)}},
		{"huge frame", "frame length", [][]byte{hello, tooLong}},
		{"ungranted channel", "granted no credit", [][]byte{hello, event(99, runtime.KindIdle)}},
		{"beyond credit", "beyond the 1 granted", [][]byte{hello, event(5, runtime.KindIdle), event(5, runtime.KindIdle)}},
		{"unknown type", "unknown frame type", [][]byte{hello, raw(42, 5)}},
		{"unknown kind", "unknown event kind", [][]byte{hello, event(5, 77)}},
		{"barrier without a trigger time", "barrier 3 without its trigger time", [][]byte{hello, event(5, runtime.KindBarrier, 3)}},
		{"barrier without its completed checkpoint", "barrier 3 without its completed checkpoint", [][]byte{hello, event(5, runtime.KindBarrier, 3, 0)}},
		{"barrier without flags", "barrier 3 without its flags", [][]byte{hello, event(5, runtime.KindBarrier, 3, 0, 2)}},
		{"unknown barrier flag", "barrier 3 with unknown flags 0x8", [][]byte{hello, event(5, runtime.KindBarrier, 3, 0, 0, 0x8|flagAligned)}},
		{"high barrier flag", "barrier 3 with unknown flags 0x80", [][]byte{hello, event(5, runtime.KindBarrier, 3, 0, 0, 0x80|flagPriority)}},
		{"tail with credit", "barrier 3 sent with a credit carries a tail batch", [][]byte{hello, event(5, runtime.KindBarrier, 3, 0, 0, flagTail, 0, 0, 1, 1, 'a')}},
		{"bytes after a barrier", "bytes after barrier 3", [][]byte{hello, event(5, runtime.KindBarrier, 3, 0, 0, flagPriority, 0)}},
		{"bad tail", "barrier 3: tail: batch: record 0", [][]byte{hello, event(5, runtime.KindBarrier, 3, 0, 0, flagPriority|flagTail, 0, 0, 1, 200)}},
		{"flags on a cancel", "bad checkpoint id", [][]byte{hello, event(5, runtime.KindCancel, 3, 0)}},
		{"credited barrier beyond credit", "beyond the 1 granted", [][]byte{hello, event(5, runtime.KindBarrier, 3, 0, 0, 0), event(5, runtime.KindBarrier, 4, 0, 0, 0)}},
		{"zero credit", "bad credit", [][]byte{hello, raw(typeCredit, 5, 0)}},
		{"bad batch", "record 0", [][]byte{hello, event(5, runtime.KindBatch, 0, 0, 1, 200)}},
		{"times without records", "event times for", [][]byte{hello, event(5, runtime.KindBatch, 2, 2, 2, 0, 1, 0)}},
		{"groups without records", "key groups for", [][]byte{hello, event(5, runtime.KindBatch, 0, 2, 1, 1, 1, 0)}},
		{"group out of range", "bad key group", [][]byte{hello, event(5, runtime.KindBatch, 0, 1, 0xff, 0xff, 0x7f, 1, 0)}},
		{"second hello", "second hello", [][]byte{hello, hello}},
		{"keep-alive with a payload", "a keep-alive on channel 0 with 1 bytes", [][]byte{hello, raw(typeKeepAlive, 0), raw(typeKeepAlive, 0, 7)}},
		{"keep-alive on a channel", "a keep-alive on channel 3", [][]byte{hello, raw(typeKeepAlive, 3)}},
		{"cut short", "unexpected EOF", [][]byte{hello, raw(typeCredit, 5, 1)[:5]}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mine, theirs := tcpPair(t)
			defer theirs.Close()
			c := New(mine, time.Minute)
			defer c.Close()
			ready := make(chan struct{}, 1)
			if _, err := c.Input(5, strings_, 1, ready); err != nil {
				t.Fatal(err)
			}
			go func() {
				for _, f := range tc.stream {
					theirs.Write(f)
				}
				if tc.name == "cut short" {
					theirs.(*net.TCPConn).CloseWrite()
				}
			}()
			select {
			case <-c.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the connection survived a malformed stream")
			}
			if err := c.Err(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func FuzzDecodeEvent(f *testing.F) {
	for _, e := range []runtime.Event{
		{Kind: runtime.KindBatch, Batch: []string{"a", "bc"}, Times: []int64{1, 2}, Groups: []uint16{3, 4}},
		{Kind: runtime.KindBarrier, ID: 3},
		{Kind: runtime.KindBarrier, ID: 4, Aligned: true},
		{Kind: runtime.KindCancel, ID: 5},
		{Kind: runtime.KindWatermark, Time: -1},
		{Kind: runtime.KindEndOfData},
	} {
		fr := appendEvent(nil, typeEvent, 1, e, strings_)
		f.Add(fr[6:]) // the payload: past length, type and a one-byte channel
	}
	b := runtime.Event{Kind: runtime.KindBarrier, ID: 6}
	f.Add(appendOvertake(nil, 1, b, runtime.Event{}, strings_)[6:])
	f.Add(appendOvertake(nil, 1, b, runtime.Event{Kind: runtime.KindBatch, Batch: []string{"t"}, Times: []int64{7}}, strings_)[6:])
	f.Fuzz(func(t *testing.T, p []byte) {
		e, tail, err := decodeEvent(p, strings_, runtime.Event{})
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v is not an ErrProtocol", err)
			}
			return
		}
		// What decodes re-encodes to the same bytes, but for varints that
		// had several encodings.
		var again []byte
		if e.Priority {
			again = appendOvertake(nil, 1, e, tail, strings_)[6:]
		} else {
			again = appendEvent(nil, typeEvent, 1, e, strings_)[6:]
		}
		e2, tail2, err := decodeEvent(again, strings_, runtime.Event{})
		if err != nil || !sameEvent(e2, e) || !sameEvent(tail2, tail) {
			t.Fatalf("%+v (tail %+v) re-encoded decodes as %+v (tail %+v), %v", e, tail, e2, tail2, err)
		}
	})
}

// sameEvent reports whether a and b carry the same event (Overtaken, which
// the receiver's queue sets, aside).
func sameEvent(a, b runtime.Event) bool {
	if a.Kind != b.Kind || a.ID != b.ID || a.Time != b.Time || a.Aligned != b.Aligned || a.Priority != b.Priority ||
		!slices.Equal(a.Times, b.Times) || !slices.Equal(a.Groups, b.Groups) {
		return false
	}
	ra, _ := a.Batch.([]string)
	rb, _ := b.Batch.([]string)
	return slices.Equal(ra, rb)
}

// FuzzConn feeds a connection an arbitrary stream from its peer, after a
// valid hello: it must fail or deliver events, never panic or hang.
func FuzzConn(f *testing.F) {
	f.Add(raw(typeEvent, 5, byte(runtime.KindBarrier), 1, 0, 0, 0))
	f.Add(append(raw(typeEvent, 5, byte(runtime.KindIdle)), raw(typeEvent, 5, byte(runtime.KindBarrier), 2, 0, 1, flagPriority|flagTail, 0, 0, 1, 1, 'b')...))
	f.Add(append(raw(typeCredit, 5, 3), raw(typeEvent, 5, byte(runtime.KindBatch), 0, 0, 1, 1, 'a')...))
	f.Add([]byte{0, 0, 0, 1})
	f.Add(append(raw(typeKeepAlive, 0), raw(typeKeepAlive, 3, 1)...))
	f.Fuzz(func(t *testing.T, stream []byte) {
		mine, theirs := net.Pipe()
		c := New(mine, time.Minute)
		ready := make(chan struct{}, 1)
		in, err := c.Input(5, strings_, 2, ready)
		if err != nil {
			t.Fatal(err)
		}
		drained := make(chan struct{})
		go func() { // what c writes: its hello and credits
			defer close(drained)
			buf := make([]byte, 512)
			for {
				if _, err := theirs.Read(buf); err != nil {
					return
				}
			}
		}()
		hello, _ := finish(appendHello(nil))
		go func() {
			theirs.Write(hello)
			theirs.Write(stream)
			theirs.Close() // the end of the stream
		}()
		for {
			if _, ok := in.TryPop(); ok {
				continue
			}
			select {
			case <-ready:
				continue
			case <-c.Done():
			}
			break
		}
		if c.Err() == nil {
			t.Fatal("done without an error")
		}
		c.Close()
		<-drained
	})
}

// TestBatchesComeBackOverTheNetwork: the sending task fills the batch it
// just sent again (it is encoded), and the receiving side decodes into the
// batches its task has handled: a long stream needs no more batches than
// can be in flight, and every record arrives once, in order.
func TestBatchesComeBackOverTheNetwork(t *testing.T) {
	const capacity, size, n = 4, 16, 20_000
	a, b := pair(t)
	ready := make(chan struct{}, 1)
	in, err := b.Input(3, strings_, capacity, ready)
	if err != nil {
		t.Fatal(err)
	}
	out, err := a.Output(3, strings_)
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan error, 1)
	go func() {
		e := runtime.NewEmitter[string](context.Background(), []runtime.OutputChannel{out}, nil, size, nil)
		for v := range n {
			e.Collect(strconv.Itoa(v))
		}
		sent <- e.Flush()
	}()
	arrays := map[*string]bool{}
	for next := 0; next < n; {
		ev := pop(t, in, ready)
		batch := ev.Batch.([]string)
		arrays[&batch[:1][0]] = true
		for _, v := range batch {
			if v != strconv.Itoa(next) {
				t.Fatalf("got record %s, want %d", v, next)
			}
			next++
		}
		in.Recycle(ev)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if len(arrays) > capacity+2 {
		t.Errorf("the receiver decoded %d records into %d batches of %d: want at most %d", n, len(arrays), size, capacity+2)
	}

	// The sender's side: a batch is the next one to fill once sent.
	batch := []string{"x"}
	if err := out.Push(context.Background(), runtime.Event{Kind: runtime.KindBatch, Batch: batch}); err != nil {
		t.Fatal(err)
	}
	if spare, ok := out.Spare(); !ok || &spare.Batch.([]string)[0] != &batch[0] {
		t.Errorf("Spare after a send = %v, %v: want the batch sent", spare.Batch, ok)
	}
	if _, ok := out.Spare(); ok {
		t.Error("a sent batch was handed out twice")
	}
}

// A peer that stops half-way through a frame, or never greets, fails the
// connection within the frame timeout instead of stalling its channels
// (a planted connection holding a partial frame stalled an attempt).
func TestStalledFrameFailsTheConnection(t *testing.T) {
	hello, err := finish(appendHello(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		send []byte
	}{
		{"no greeting", nil},
		{"half a greeting", hello[:3]},
		{"half a frame header", append(slices.Clone(hello), 0, 0)},
		{"half a frame", append(slices.Clone(hello), 0, 0, 1, 0, typeEvent, 1, 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tcpPair(t)
			defer b.Close()
			if _, err := b.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			c := newConn(a, 200*time.Millisecond, time.Minute)
			defer c.Close()
			select {
			case <-c.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the connection still waits after 10s")
			}
			if err := c.Err(); !errors.Is(err, ErrFrameStalled) {
				t.Fatalf("error %v, want ErrFrameStalled", err)
			}
		})
	}
}
