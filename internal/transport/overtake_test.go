package transport

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/runtime"
)

// batchOf is a batch of records, each with an event time.
func batchOf(recs ...string) runtime.Event {
	times := make([]int64, len(recs))
	for i := range times {
		times[i] = int64(100 + i)
	}
	return runtime.Event{Kind: runtime.KindBatch, Batch: recs, Times: times}
}

// waitQueued waits until in holds n events, taking none.
func waitQueued(t *testing.T, in *Input, ready <-chan struct{}, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		in.mu.Lock()
		got := in.q.Len()
		in.mu.Unlock()
		if got == n {
			return
		}
		select {
		case <-ready:
		case <-deadline:
			t.Fatalf("%d events queued after 10s, want %d", got, n)
		}
	}
}

// fence is a channel from one connection to the other that orders a test
// after the frames the first one wrote.
type fence struct {
	out   *Output
	in    *Input
	ready chan struct{}
}

func newFence(t *testing.T, from, to *Conn, ch uint64) *fence {
	t.Helper()
	f := &fence{ready: make(chan struct{}, 1)}
	var err error
	if f.in, err = to.Input(ch, strings_, 1, f.ready); err != nil {
		t.Fatal(err)
	}
	if f.out, err = from.Output(ch, strings_); err != nil {
		t.Fatal(err)
	}
	return f
}

// wait returns once the receiving connection has dispatched every frame
// (credits included) the sending one wrote or had to write before the
// call. It takes two round trips: the writer puts the credits it has to
// grant after the events it sends in the same write, so the first event's
// arrival does not prove they arrived; the second is sent only once the
// first was taken, in a later write.
func (f *fence) wait(t *testing.T) {
	t.Helper()
	for range 2 {
		if err := f.out.Push(t.Context(), runtime.Event{Kind: runtime.KindIdle}); err != nil {
			t.Fatal(err)
		}
		pop(t, f.in, f.ready)
	}
}

// A receiver that holds a full window and takes nothing still gets an
// overtaking barrier, ahead of the batches it holds; they are its channel
// state, then delivered in order, the tail last; the barrier and its tail
// take no credit and grant none back.
func TestOvertakingBarrierPassesAFullWindow(t *testing.T) {
	const capacity = 4
	a, b := pair(t)
	out, in, ready := openChannel(t, a, b, capacity)
	credits := newFence(t, b, a, 2) // b grants, a takes
	idle := runtime.Event{Kind: runtime.KindIdle}

	var sent []runtime.Event
	for i := range capacity {
		e := batchOf(fmt.Sprintf("r%d.0", i), fmt.Sprintf("r%d.1", i))
		if err := out.Push(t.Context(), e); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, e)
	}
	if ok, err := out.TryPush(idle); ok || err != nil {
		t.Fatalf("TryPush beyond the window = %v, %v: want false, nil", ok, err)
	}
	tail := batchOf("tail.0", "tail.1", "tail.2")
	if err := out.Overtake(runtime.Event{Kind: runtime.KindBarrier, ID: 7}, tail); err != nil {
		t.Fatal(err)
	}
	if spare, ok := out.Spare(); !ok || &spare.Batch.([]string)[0] != &tail.Batch.([]string)[0] {
		t.Errorf("Spare after Overtake = %v, %v: want the tail", spare.Batch, ok)
	}
	tail.Priority = true // as it comes out of the receiver's queue
	sent = append(sent, tail)

	waitQueued(t, in, ready, capacity+2)
	e, _ := in.TryPop()
	if e.Kind != runtime.KindBarrier || e.ID != 7 || !e.Priority || e.Aligned || e.Overtaken != capacity+1 {
		t.Fatalf("first event taken: %+v, want overtaking barrier 7 that overtook %d batches", e, capacity+1)
	}
	state := in.Overtaken(e.Overtaken, nil)
	if len(state) != len(sent) {
		t.Fatalf("Overtaken(%d) gave %d batches", e.Overtaken, len(state))
	}
	for i := range sent {
		if !sameEvent(state[i], sent[i]) {
			t.Fatalf("overtaken batch %d: %+v, want %+v", i, state[i], sent[i])
		}
	}
	for i, want := range sent {
		if got := pop(t, in, ready); !sameEvent(got, want) {
			t.Fatalf("batch %d taken: %+v, want %+v", i, got, want)
		}
	}
	if e, ok := in.TryPop(); ok {
		t.Fatalf("the channel holds %v beyond what was sent", e)
	}

	// The four batches granted four credits back, the barrier and the
	// tail none: exactly a window more crosses.
	credits.wait(t)
	for i := range capacity {
		if ok, err := out.TryPush(idle); !ok || err != nil {
			t.Fatalf("TryPush %d of the next window = %v, %v", i, ok, err)
		}
	}
	if ok, err := out.TryPush(idle); ok || err != nil {
		t.Fatalf("TryPush beyond the next window = %v, %v: want false, nil", ok, err)
	}
	pop(t, in, ready)
	credits.wait(t)
	if ok, err := out.TryPush(idle); !ok || err != nil {
		t.Fatalf("TryPush after a pop = %v, %v: want true, nil", ok, err)
	}
	if ok, err := out.TryPush(idle); ok || err != nil {
		t.Fatalf("second TryPush after one pop = %v, %v: want false, nil", ok, err)
	}
}

// An overtaking barrier stays behind the barriers, cancel markers and end
// of data the receiver holds (runtime.Queue.Overtake), and passes the
// batches, watermarks and idleness after them.
func TestOvertakingBarrierStaysBehindControlEvents(t *testing.T) {
	x1, x2 := batchOf("x1"), batchOf("x2", "x2'")
	tail := batchOf("t")
	pri := func(e runtime.Event, overtaken int) runtime.Event {
		e.Priority, e.Overtaken = true, overtaken
		return e
	}
	barrier := func(id int) runtime.Event {
		return runtime.Event{Kind: runtime.KindBarrier, ID: checkpoint.ID(id)}
	}
	cancel := runtime.Event{Kind: runtime.KindCancel, ID: 1}
	eod := runtime.Event{Kind: runtime.KindEndOfData}
	wm := runtime.Event{Kind: runtime.KindWatermark, Time: 5}
	idle := runtime.Event{Kind: runtime.KindIdle}
	// A step is pushed, or overtakes when it is a priority barrier (its
	// tail: the step after it, when that is a priority batch).
	cases := []struct {
		name        string
		steps, want []runtime.Event
	}{
		{"behind a barrier",
			[]runtime.Event{x1, barrier(1), x2, pri(barrier(2), 0)},
			[]runtime.Event{x1, barrier(1), pri(barrier(2), 1), x2}},
		{"behind a cancel marker",
			[]runtime.Event{x1, cancel, x2, pri(barrier(2), 0)},
			[]runtime.Event{x1, cancel, pri(barrier(2), 1), x2}},
		{"ahead of end of data",
			[]runtime.Event{x1, eod, pri(barrier(2), 0)},
			[]runtime.Event{pri(barrier(2), 1), x1, eod}},
		{"behind an overtaking barrier",
			[]runtime.Event{x1, pri(barrier(1), 0), x2, pri(barrier(2), 0)},
			[]runtime.Event{pri(barrier(1), 1), pri(barrier(2), 2), x1, x2}},
		{"ahead of watermarks and idleness",
			[]runtime.Event{x1, wm, idle, x2, pri(barrier(3), 0), pri(tail, 0)},
			[]runtime.Event{pri(barrier(3), 3), x1, wm, idle, x2, pri(tail, 0)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t)
			ready := make(chan struct{}, 1)
			in, err := b.Input(1, strings_, 4, ready)
			if err != nil {
				t.Fatal(err)
			}
			out, err := a.Output(1, strings_)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < len(tc.steps); i++ {
				e := tc.steps[i]
				if !e.Priority {
					if err := out.Push(t.Context(), e); err != nil {
						t.Fatal(err)
					}
					continue
				}
				var tail runtime.Event
				if i+1 < len(tc.steps) && tc.steps[i+1].Priority && tc.steps[i+1].Kind == runtime.KindBatch {
					tail = tc.steps[i+1]
					i++
				}
				e.Priority = false // Overtake sets it
				if err := out.Overtake(e, tail); err != nil {
					t.Fatal(err)
				}
			}
			waitQueued(t, in, ready, len(tc.want))
			for i, want := range tc.want {
				got := pop(t, in, ready)
				if !sameEvent(got, want) || got.Overtaken != want.Overtaken {
					t.Fatalf("event %d: %+v, want %+v", i, got, want)
				}
			}
		})
	}
}

// Event.Aligned and a barrier's trigger time (Time) cross on barriers sent
// with a credit and on overtaking ones.
func TestAlignedCrosses(t *testing.T) {
	a, b := pair(t)
	ready := make(chan struct{}, 1)
	in, err := b.Input(1, strings_, 4, ready)
	if err != nil {
		t.Fatal(err)
	}
	out, err := a.Output(1, strings_)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []runtime.Event{
		{Kind: runtime.KindBarrier, ID: 1, Aligned: true, Time: 1_700_000_000_000_000_000},
		{Kind: runtime.KindBarrier, ID: 2},
	} {
		if err := out.Push(t.Context(), e); err != nil {
			t.Fatal(err)
		}
	}
	if err := out.Overtake(runtime.Event{Kind: runtime.KindBarrier, ID: 3, Aligned: true}, runtime.Event{}); err != nil {
		t.Fatal(err)
	}
	if err := out.Overtake(runtime.Event{Kind: runtime.KindBarrier, ID: 4, Time: 42}, runtime.Event{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []runtime.Event{
		{Kind: runtime.KindBarrier, ID: 1, Aligned: true, Time: 1_700_000_000_000_000_000},
		{Kind: runtime.KindBarrier, ID: 2},
		{Kind: runtime.KindBarrier, ID: 3, Aligned: true, Priority: true},
		{Kind: runtime.KindBarrier, ID: 4, Priority: true, Time: 42},
	} {
		if got := pop(t, in, ready); !sameEvent(got, want) {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	}
}

// Overtake on a failed connection returns its error, as TryPush does.
func TestOvertakeEndsWithTheConnection(t *testing.T) {
	a, b := pair(t)
	out, err := a.Output(1, strings_)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	<-a.Done()
	err = out.Overtake(runtime.Event{Kind: runtime.KindBarrier, ID: 1}, batchOf("t"))
	if err == nil || err != a.Err() {
		t.Fatalf("Overtake on a lost connection: %v, want the connection's error %v", err, a.Err())
	}
	if _, ok := out.Spare(); ok {
		t.Error("a tail not sent was handed back as sent")
	}
}

// Overtaking barriers take no credit, so the receiver bounds how many it
// holds: a peer that floods them fails the connection.
func TestOvertakingFloodFailsTheConnection(t *testing.T) {
	mine, theirs := tcpPair(t)
	defer theirs.Close()
	c := New(mine, time.Minute)
	defer c.Close()
	ready := make(chan struct{}, 1)
	in, err := c.Input(5, strings_, 1, ready)
	if err != nil {
		t.Fatal(err)
	}
	hello, _ := finish(appendHello(nil))
	stream := hello
	for id := range maxOvertaking + 1 {
		stream = append(stream, raw(typeEvent, 5, byte(runtime.KindBarrier), byte(id%100+1), 0, 0, flagPriority)...)
	}
	go func() {
		theirs.Write(stream)
		// What c writes (its hello, its credit) is left unread: it fits
		// the socket buffers.
	}()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the connection survived a flood of overtaking barriers")
	}
	if err := c.Err(); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("more than %d overtaking barriers", maxOvertaking)) {
		t.Fatalf("error %v, want one about overtaking barriers", err)
	}
	in.mu.Lock()
	n := in.q.Len()
	in.mu.Unlock()
	if n != maxOvertaking {
		t.Errorf("the receiver held %d overtaking barriers, want %d", n, maxOvertaking)
	}
}

// A sender may force events and overtake with a barrier before the
// receiver has opened the channel (a peer deploying its tasks later): the
// frames wait for the channel's first credits, then arrive in order. They
// used to cross at once and fail the connection ("an event on channel 1,
// which was granted no credit"), seen on a cluster restarting with a 1 ms
// aligned-checkpoint timeout.
func TestCreditlessFramesWaitForTheChannelToOpen(t *testing.T) {
	a, b := pair(t)
	out, err := a.Output(1, strings_)
	if err != nil {
		t.Fatal(err)
	}
	forced := batchOf("f.0", "f.1")
	if err := out.ForcePush(forced); err != nil {
		t.Fatal(err)
	}
	tail := batchOf("tail.0")
	if err := out.Overtake(runtime.Event{Kind: runtime.KindBarrier, ID: 3}, tail); err != nil {
		t.Fatal(err)
	}
	// Frames sent before the channel opens on another channel of the
	// connection: once they arrived, the early ones would have too.
	credits := newFence(t, a, b, 2)
	credits.wait(t)
	select {
	case <-b.Done():
		t.Fatalf("the receiver failed the connection: %v", b.Err())
	default:
	}
	ready := make(chan struct{}, 1)
	in, err := b.Input(1, strings_, 4, ready)
	if err != nil {
		t.Fatal(err)
	}
	waitQueued(t, in, ready, 3)
	first := pop(t, in, ready)
	if first.Kind != runtime.KindBarrier || first.ID != 3 || first.Overtaken != 2 {
		t.Fatalf("first event: %+v, want barrier 3 having overtaken the forced batch and its tail", first)
	}
	forced.Priority, tail.Priority = true, true
	for i, want := range []runtime.Event{forced, tail} {
		if got := pop(t, in, ready); !sameEvent(got, want) {
			t.Fatalf("event %d: %+v, want %+v", i, got, want)
		}
	}
}
