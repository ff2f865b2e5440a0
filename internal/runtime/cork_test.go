package runtime

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/operator"
)

// corkingChannel is a local channel that, like a network Output, may hold
// what was pushed until flushed (Flusher): it counts its flushes.
type corkingChannel struct {
	*LocalChannel
	flushes atomic.Int32
}

func (c *corkingChannel) Flush() { c.flushes.Add(1) }

// waitingChannel is a local channel that says when its sender starts to
// wait for room: in Push, or by asking for Room.
type waitingChannel struct {
	*LocalChannel
	once    sync.Once
	waiting chan struct{}
}

func (c *waitingChannel) Push(ctx context.Context, e Event) error {
	c.once.Do(func() { close(c.waiting) })
	return c.LocalChannel.Push(ctx, e)
}

func (c *waitingChannel) Room() <-chan struct{} {
	c.once.Do(func() { close(c.waiting) })
	return c.LocalChannel.Room()
}

// full returns a waiting channel of capacity 1 that holds an event.
func full() *waitingChannel {
	c := &waitingChannel{LocalChannel: NewLocalChannel(1, make(chan struct{}, 1)), waiting: make(chan struct{})}
	if ok, _ := c.TryPush(Event{Kind: KindBatch, Batch: []int{-1}}); !ok {
		panic("a new channel has no room")
	}
	return c
}

// flushedWithin reports whether c is flushed within d: it polls, as a
// flush signals nothing a test could wait on.
func flushedWithin(c *corkingChannel, d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if c.flushes.Load() > 0 {
			return true
		}
	}
	return false
}

// An emitter's Flush (a task's, going idle) flushes the channels that hold
// what was pushed (Flusher): a connection's writer would otherwise wait
// for more.
func TestEmitterFlushesItsChannels(t *testing.T) {
	out := &corkingChannel{LocalChannel: NewLocalChannel(4, make(chan struct{}, 1))}
	e := NewEmitter[int](t.Context(), []OutputChannel{out}, nil, 8, nil)
	e.Collect(1)
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	if ev, ok := out.TryPop(); !ok || len(ev.Batch.([]int)) != 1 || out.flushes.Load() != 1 {
		t.Fatalf("after a flush: %v, %v popped, the channel flushed %d times; want the batch, once", ev.Batch, ok, out.flushes.Load())
	}
}

// byValue routes record v to channel v.
func byValue(v int) int { return v }

// An emitter that waits for room on one channel (Push, back-pressure)
// first flushes its other channels: Output.Push flushes its own
// connection only, and what the others held would wait for the corking
// timer (found by an outside review).
func TestEmitterFlushesBeforeWaitingForRoom(t *testing.T) {
	blocked, other := full(), &corkingChannel{LocalChannel: NewLocalChannel(4, make(chan struct{}, 1))}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	e := NewEmitter[int](ctx, []OutputChannel{blocked, other}, byValue, 1, nil)
	e.Collect(1) // a batch of one on the other channel: pushed, held
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Collect(0) // waits for room on the blocked channel
	}()
	<-blocked.waiting
	flushed := other.flushes.Load() > 0 // it flushes before it waits
	cancel()
	<-done
	if !flushed {
		t.Fatal("the emitter waits for room on channel 0, and never flushed channel 1, where it pushed a batch: it waits for the corking timer")
	}
}

// pollSource emits, at its first poll, a batch to channel 1 and one to
// channel 0, which is full (an elastic emitter forces it); then nothing.
type pollSource struct {
	e     *Emitter[int]
	polls int
}

func (s *pollSource) Poll() (operator.PollResult, error) {
	if s.polls++; s.polls == 1 {
		s.e.Collect(1)
		s.e.Collect(0)
	}
	return operator.PollResult{}, nil
}

// A task whose elastic outputs are congested flushes its channels before
// it waits for room (runSource, and runInputs likewise): the batches it
// pushed on its other channels would wait for the corking timer (found by
// an outside review).
func TestCongestedTaskFlushesBeforeWaiting(t *testing.T) {
	blocked, other := full(), &corkingChannel{LocalChannel: NewLocalChannel(4, make(chan struct{}, 1))}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	e := NewEmitter[int](ctx, []OutputChannel{blocked, other}, byValue, 1, nil)
	e.Elastic = true
	src := &pollSource{e: e}
	tk := &task{source: src, outputs: []Output{e}, now: time.Now}
	done := make(chan error, 1)
	go func() { done <- tk.runSource(ctx) }()
	<-blocked.waiting // Congested asked for its Room: the task waits
	flushed := flushedWithin(other, 10*time.Second)
	cancel()
	<-done
	if !flushed {
		t.Fatalf("the congested task waits for room, and never flushed channel 1, where it pushed a batch (%d polls): it waits for the corking timer", src.polls)
	}
}

// A task that takes a barrier carrying a completion it was not told of yet
// flushes its channels before it waits for the notice (awaitCompleted),
// which comes by another path and may take a while: what it pushed
// before the barrier would wait for the corking timer (found by an
// outside review).
func TestTaskFlushesBeforeAwaitingCompletion(t *testing.T) {
	out := &corkingChannel{LocalChannel: NewLocalChannel(4, make(chan struct{}, 1))}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	e := NewEmitter[int](ctx, []OutputChannel{out}, nil, 1, nil)
	tk := &task{outputs: []Output{e}, gate: NewGate(), mailbox: make(chan Control), now: time.Now}
	e.Collect(1) // a batch of one, pushed while handling the input: held
	done := make(chan error, 1)
	go func() { done <- tk.handle(ctx, 0, Event{Kind: KindBarrier, ID: 2, Completed: 1}) }()
	flushed := flushedWithin(out, 10*time.Second)
	cancel()
	<-done
	if !flushed {
		t.Fatal("the task waits for checkpoint 1's completion notice, and never flushed the channel where it pushed a batch: it waits for the corking timer")
	}
}
