package runtime

import (
	"context"
	"fmt"
	"sync"

	"github.com/weirstream/weir/checkpoint"
)

// Kind is the kind of an event on a channel.
type Kind uint8

const (
	// KindBatch carries a batch of records ([]T).
	KindBatch Kind = iota + 1
	// KindBarrier carries checkpoint barrier ID.
	KindBarrier
	// KindCancel carries a cancel marker for ID: the upstream declined it.
	KindCancel
	// KindEndOfData: the upstream subtask has emitted its last record.
	// Barriers still follow, up to the job's final checkpoint.
	KindEndOfData
	// KindWatermark carries watermark Time: the upstream subtask emits no
	// record with an event time at or below it any more. It also ends the
	// channel's idleness.
	KindWatermark
	// KindIdle: the upstream subtask is idle (all its input splits are);
	// its watermark must not hold back the minimum until it emits one.
	KindIdle
)

// Event is what travels in a channel. A batch is immutable once pushed, and
// the receiver holds it only while it handles it: the channel may then give
// its slices back to the sender for a later batch (Recycler, Spares).
type Event struct {
	Kind  Kind
	Batch any
	// Times holds the event times of a batch's records (milliseconds since
	// the Unix epoch), in order; nil when the stream has none.
	Times []int64
	// Groups holds the key groups of a batch's records on a hash edge, as
	// the sender computed them to route the records, so the receiver need
	// not hash the keys again; nil when not carried.
	Groups []uint16
	ID     checkpoint.ID
	// Time is a watermark's value, or when a barrier's checkpoint was
	// triggered (Unix nanoseconds; 0: not said), from which the
	// aligned-checkpoint timeout counts.
	Time int64
	// Aligned: a barrier's checkpoint aligns in every mode (a savepoint,
	// or the job's final checkpoint).
	Aligned bool
	// Completed, of a barrier: a checkpoint whose completion was announced
	// to every task before the barrier's checkpoint was triggered (0:
	// none); a task is told of it before it handles the barrier.
	Completed checkpoint.ID
	// Priority: the event was queued with Overtake (Queue), ahead of
	// others or beyond the channel's capacity.
	Priority bool
	// Overtaken is the number of batches queued behind a barrier that it
	// overtook: they precede it in the stream, so the receiver persists
	// them as channel state of its checkpoint.
	Overtaken int
}

func (e Event) String() string {
	switch e.Kind {
	case KindBatch:
		return "batch"
	case KindBarrier:
		return fmt.Sprintf("barrier %d", e.ID)
	case KindCancel:
		return fmt.Sprintf("cancel %d", e.ID)
	case KindEndOfData:
		return "end-of-data"
	case KindWatermark:
		return fmt.Sprintf("watermark %d", e.Time)
	case KindIdle:
		return "idle"
	}
	return "?"
}

// OutputChannel is the sending side of a channel; one upstream subtask owns
// it. A network channel implements it too.
type OutputChannel interface {
	// Push appends e, waiting while the channel is full (back-pressure),
	// until ctx ends.
	Push(ctx context.Context, e Event) error
	// TryPush appends e if the channel has room for it now, without
	// waiting; false: it did not (and e is not sent).
	TryPush(e Event) (bool, error)
	// Overtake sends barrier b of an unaligned checkpoint without waiting
	// for room: at the receiver it goes ahead of the events queued (as
	// Queue.Overtake), followed by tail, the sender's batch not pushed yet
	// (if tail is one).
	Overtake(b, tail Event) error
	// ForcePush appends e without waiting for room: it takes none, and the
	// receiver queues it beyond the channel's capacity (Queue.PushPriority).
	// A sender that forces an event waits for room (Room) before it takes
	// more input, so that what it forces stays bounded.
	ForcePush(e Event) error
	// Room is signalled when the channel may have room again; HasRoom says
	// whether it has.
	Room() <-chan struct{}
	HasRoom() bool
}

// ByteCounter is implemented by channels that cross to another process:
// Bytes is what the channel's end has sent or received so far, in the
// frames that carried its events (headers included). Safe to call at
// any time. Channels within a process pass batches by reference and have
// no bytes to count.
type ByteCounter interface {
	Bytes() int64
}

// Flusher is implemented by output channels that may hold what was pushed
// a while, waiting for more to send it with (a connection's writer, which
// corks): Flush sends what they hold now. A task flushes its outputs'
// channels before it waits (for input, room or a notice).
type Flusher interface {
	Flush()
}

// Resizable is implemented by input channels whose capacity their task
// adapts to its throughput (buffer debloating, Debloater).
type Resizable interface {
	// SetCapacity makes the channel hold at most n ordinary events, n
	// between 1 and the capacity it was made with; a smaller n takes
	// effect as the task takes what the channel holds beyond it.
	SetCapacity(n int)
}

// InputChannel is the receiving side; one downstream task owns it.
type InputChannel interface {
	// TryPop takes the oldest event, if any, without waiting.
	TryPop() (Event, bool)
	// Overtaken appends to dst the first k queued batches (those the
	// barrier just taken overtook, Event.Overtaken); they stay queued.
	Overtaken(k int, dst []Event) []Event
	// Promote lets the queued barriers triggered at deadline or earlier
	// overtake the batches ahead of them (Queue.Promote).
	Promote(deadline int64)
	// TryPopControl takes the oldest event if it is a barrier or a cancel
	// marker (Queue.PopControl): a task whose outputs have no room takes
	// nothing else.
	TryPopControl() (Event, bool)
}

// LocalChannel is a bounded FIFO between two tasks of one process.
type LocalChannel struct {
	mu    sync.Mutex
	q     Queue
	space chan struct{} // signalled when an event is taken
	ready chan<- struct{}
	// spares holds handled batches for the sender to fill again: records
	// in batches then cost the garbage collector nothing.
	spares BatchPool
}

// NewLocalChannel returns a channel holding at most capacity events (each a
// batch or a control event) that signals ready whenever it receives one.
func NewLocalChannel(capacity int, ready chan<- struct{}) *LocalChannel {
	// Batches in use are at most those the channel holds, the one being
	// handled and the one being filled (and one an overtaking barrier
	// pushed beyond capacity): so many spares are never dropped.
	return &LocalChannel{q: NewQueue(capacity), space: make(chan struct{}, 1), ready: ready,
		spares: NewBatchPool(capacity + 3)}
}

// Recycler is implemented by input channels whose handled batches go back
// to their sender.
type Recycler interface {
	// Recycle takes a batch the receiver has handled and no longer holds.
	Recycle(e Event)
}

// Spares is implemented by output channels that hand back handled batches.
type Spares interface {
	// Spare returns a handled batch, if there is one; the sender empties
	// its slices and fills them again.
	Spare() (Event, bool)
}

func (c *LocalChannel) Recycle(e Event)      { c.spares.Put(e) }
func (c *LocalChannel) Spare() (Event, bool) { return c.spares.Take() }

// BatchPool holds handled batches for their sender to fill again, at most
// as many as it was made for (more are dropped). A receiver puts, a
// sender takes, each on its own goroutine.
type BatchPool struct {
	mu   sync.Mutex
	free []Event
}

// NewBatchPool returns a pool of at most n batches.
func NewBatchPool(n int) BatchPool { return BatchPool{free: make([]Event, 0, n)} }

// Put keeps a batch its receiver no longer holds, if there is room.
func (p *BatchPool) Put(e Event) {
	p.mu.Lock()
	if len(p.free) < cap(p.free) {
		p.free = append(p.free, e)
	}
	p.mu.Unlock()
}

// Take returns a batch to fill again, if there is one.
func (p *BatchPool) Take() (Event, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.free)
	if n == 0 {
		return Event{}, false
	}
	e := p.free[n-1]
	p.free[n-1] = Event{}
	p.free = p.free[:n-1]
	return e, true
}

func (c *LocalChannel) Push(ctx context.Context, e Event) error {
	for {
		if ok, _ := c.TryPush(e); ok {
			return nil
		}
		select {
		case <-c.space:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

func (c *LocalChannel) TryPush(e Event) (bool, error) {
	c.mu.Lock()
	if c.q.Full() {
		c.mu.Unlock()
		return false, nil
	}
	c.q.Push(e)
	c.mu.Unlock()
	signal(c.ready)
	return true, nil
}

func (c *LocalChannel) Overtake(b, tail Event) error {
	c.mu.Lock()
	c.q.Overtake(b, tail)
	c.mu.Unlock()
	signal(c.ready)
	return nil
}

func (c *LocalChannel) ForcePush(e Event) error {
	c.mu.Lock()
	c.q.PushPriority(e)
	c.mu.Unlock()
	signal(c.ready)
	return nil
}

// SetCapacity implements Resizable.
func (c *LocalChannel) SetCapacity(n int) {
	c.mu.Lock()
	c.q.SetCapacity(n)
	room := !c.q.Full()
	c.mu.Unlock()
	if room {
		signal(c.space)
	}
}

func (c *LocalChannel) Room() <-chan struct{} { return c.space }

func (c *LocalChannel) HasRoom() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.q.Full()
}

func (c *LocalChannel) TryPop() (Event, bool) { return c.pop((*Queue).Pop) }

func (c *LocalChannel) TryPopControl() (Event, bool) { return c.pop((*Queue).PopControl) }

func (c *LocalChannel) pop(take func(*Queue) (Event, bool)) (Event, bool) {
	c.mu.Lock()
	e, ok := take(&c.q)
	c.mu.Unlock()
	if ok {
		signal(c.space)
	}
	return e, ok
}

// Promote lets barriers triggered at deadline or earlier overtake
// (Queue.Promote).
func (c *LocalChannel) Promote(deadline int64) {
	c.mu.Lock()
	c.q.Promote(deadline)
	c.mu.Unlock()
}

func (c *LocalChannel) Overtaken(k int, dst []Event) []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.q.Batches(k, dst)
}

func signal(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Gate is a task's input gate: its input channels, read round-robin, any of
// which may be blocked by barrier alignment.
type Gate struct {
	chans []InputChannel
	ready chan struct{}
	next  int
}

// NewGate returns a gate; every channel it reads must signal Ready() when
// it receives an event.
func NewGate() *Gate { return &Gate{ready: make(chan struct{}, 1)} }

// Ready is signalled when a channel of the gate receives an event.
func (g *Gate) Ready() chan struct{} { return g.ready }

// Add appends a channel; its index is its position.
func (g *Gate) Add(c InputChannel) int {
	g.chans = append(g.chans, c)
	return len(g.chans) - 1
}

// Len is the number of channels.
func (g *Gate) Len() int { return len(g.chans) }

// Recycle hands a batch channel i delivered back to its sender, if the
// channel reuses batches.
func (g *Gate) Recycle(i int, e Event) {
	if r, ok := g.chans[i].(Recycler); ok {
		r.Recycle(e)
	}
}

// SetCapacity sets the capacity of every channel that can adapt it
// (Resizable) to n events.
func (g *Gate) SetCapacity(n int) {
	for _, c := range g.chans {
		if r, ok := c.(Resizable); ok {
			r.SetCapacity(n)
		}
	}
}

// Overtaken appends to dst the first k batches queued on channel i: those
// the barrier just taken from it overtook.
func (g *Gate) Overtaken(i, k int, dst []Event) []Event { return g.chans[i].Overtaken(k, dst) }

// Promote lets the barriers triggered at deadline (Unix nanoseconds) or
// earlier overtake the batches ahead of them, on every channel that can
// (Queue.Promote).
func (g *Gate) Promote(deadline int64) {
	for _, c := range g.chans {
		c.Promote(deadline)
	}
}

// PollControl takes a barrier or cancel marker at the head of a channel that
// is not blocked, if there is one.
func (g *Gate) PollControl(blocked func(int) bool) (int, Event, bool) {
	for i, c := range g.chans {
		if blocked(i) {
			continue
		}
		if e, ok := c.TryPopControl(); ok {
			return i, e, true
		}
	}
	return 0, Event{}, false
}

// Poll takes the next event from a channel that is not blocked, if any.
func (g *Gate) Poll(blocked func(int) bool) (int, Event, bool) {
	n := len(g.chans)
	for k := range n {
		i := (g.next + k) % n
		if blocked(i) {
			continue
		}
		if e, ok := g.chans[i].TryPop(); ok {
			g.next = (i + 1) % n
			return i, e, true
		}
	}
	return 0, Event{}, false
}
