package runtime

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/weirstream/weir/internal/cacheline"
)

// Output is one outgoing edge of a task, as the task loop sees it.
type Output interface {
	// Flush pushes every buffered batch, then FlushChannels.
	Flush() error
	// FlushChannels sends what the channels hold of what was pushed
	// (Flusher), without pushing the buffered batches: before the task
	// waits.
	FlushChannels()
	// Broadcast flushes, then pushes a control event on every channel.
	Broadcast(e Event) error
	// Overtake sends barrier b of an unaligned checkpoint on every
	// channel, ahead of what is queued there, with the records not pushed
	// yet behind it (OutputChannel.Overtake): it never waits for room.
	Overtake(b Event) error
	// Congested returns, when an elastic output forced events beyond a
	// channel's room that it still lacks, what signals room there; else
	// nil.
	Congested() <-chan struct{}
	// Err is the first failure to push.
	Err() error
}

// Route picks the channel a record goes to; Broadcast sends it to all.
type Route[T any] func(T) int

// KeyRoute picks the channel of a record on a hash edge, and says its key
// group.
type KeyRoute[T any] func(T) (channel int, group uint16)

// BroadcastRoute marks an edge whose records go to every channel.
const BroadcastRoute = -1

// Emitter batches the records of one edge per channel and pushes a batch
// when it is full, when the task idles, or before a control event. It is
// owned by the task goroutine.
type Emitter[T any] struct {
	ctx   context.Context
	outs  []OutputChannel
	bufs  [][]T
	route Route[T]
	// keyRoute, if set, routes instead of route, and the batches carry
	// their records' key groups in groups.
	keyRoute KeyRoute[T]
	groups   [][]uint16
	size     int
	err      error
	// now, when the stream has event time, points at the event time of the
	// record being emitted; times holds each batch's.
	now   *int64
	times [][]int64
	// Records counts records emitted (for metrics; read by the owner).
	Records int64
	// Stats, if set, counts the records pushed and the time spent waiting
	// for room downstream.
	Stats *TaskStats
	// Elastic: a push never waits for room; it forces the event
	// (OutputChannel.ForcePush), and the task waits for room before it
	// takes more input (Congested), taking barriers meanwhile. Unaligned
	// checkpoints need it: a task blocked in a push takes no barrier.
	Elastic bool
	// forced counts the events forced on each channel since it last had
	// room (MaxForced).
	forced []int
}

// MaxForced bounds the events an elastic emitter forces on a channel
// without finding room in between; past it, it waits for room, as a plain
// emitter does: one input batch that fans out to many (a window firing
// over many keys) stays bounded in memory.
const MaxForced = 16

// NewEmitter builds an emitter over outs. route nil sends every record to
// outs[0]; a route returning BroadcastRoute sends it to all. now, if not
// nil, points at the event time of the record being collected: batches
// then carry event times.
func NewEmitter[T any](ctx context.Context, outs []OutputChannel, route Route[T], batchSize int, now *int64) *Emitter[T] {
	// An emitter and the slices it appends to for every record get cache
	// lines of their own: a vertex's subtasks build theirs one after
	// another (package cacheline).
	e := cacheline.New(Emitter[T]{ctx: ctx, outs: outs, bufs: cacheline.Slice[[]T](len(outs)), route: route, size: batchSize, now: now})
	for i := range e.bufs {
		e.bufs[i] = make([]T, 0, batchSize)
	}
	if now != nil {
		e.times = cacheline.Slice[[]int64](len(outs))
		for i := range e.times {
			e.times[i] = make([]int64, 0, batchSize)
		}
	}
	return e
}

// CarryKeyGroups makes the emitter route by r and carry each record's key
// group in its batch.
func (e *Emitter[T]) CarryKeyGroups(r KeyRoute[T]) {
	e.keyRoute = r
	e.groups = cacheline.Slice[[]uint16](len(e.outs))
	for i := range e.groups {
		e.groups[i] = make([]uint16, 0, e.size)
	}
}

// Collect adds v to its channel's batch. A failed push is remembered and
// returned by the next Flush or Err.
func (e *Emitter[T]) Collect(v T) {
	e.Records++
	if e.keyRoute != nil {
		i, g := e.keyRoute(v)
		e.groups[i] = append(e.groups[i], g)
		e.add(i, v)
		return
	}
	i := 0
	if e.route != nil {
		i = e.route(v)
	}
	if i == BroadcastRoute {
		for j := range e.bufs {
			e.add(j, v)
		}
		return
	}
	e.add(i, v)
}

func (e *Emitter[T]) add(i int, v T) {
	e.bufs[i] = append(e.bufs[i], v)
	if e.now != nil {
		e.times[i] = append(e.times[i], *e.now)
	}
	if len(e.bufs[i]) >= e.size {
		e.push(i)
	}
}

func (e *Emitter[T]) push(i int) {
	if len(e.bufs[i]) == 0 || e.err != nil {
		return
	}
	e.Stats.addOut(len(e.bufs[i]))
	if err := e.send(e.outs[i], e.batch(i)); err != nil {
		e.err = err
	}
	e.next(i)
}

// batch is channel i's batch being filled, as an event.
func (e *Emitter[T]) batch(i int) Event {
	ev := Event{Kind: KindBatch, Batch: e.bufs[i]}
	if e.now != nil {
		ev.Times = e.times[i]
	}
	if e.keyRoute != nil {
		ev.Groups = e.groups[i]
	}
	return ev
}

// next gives channel i empty slices for its next batch: those of a batch
// the receiver has handled, if its channel hands them back, or new ones.
func (e *Emitter[T]) next(i int) {
	var spare Event
	if s, ok := e.outs[i].(Spares); ok {
		spare, _ = s.Spare()
	}
	b, _ := spare.Batch.([]T)
	clear(b) // the records it held may be garbage now
	e.bufs[i] = slices.Grow(b[:0], e.size)
	if e.now != nil {
		e.times[i] = slices.Grow(spare.Times[:0], e.size)
	}
	if e.keyRoute != nil {
		e.groups[i] = slices.Grow(spare.Groups[:0], e.size)
	}
}

// send pushes ev to o, timing the wait when o has no room for it; an
// elastic emitter forces it instead.
func (e *Emitter[T]) send(o OutputChannel, ev Event) error {
	if ok, err := o.TryPush(ev); ok || err != nil {
		return err
	}
	if e.Elastic {
		if e.forced == nil {
			e.forced = make([]int, len(e.outs))
		}
		if i := slices.Index(e.outs, o); e.forced[i] < MaxForced {
			e.forced[i]++
			return o.ForcePush(ev)
		}
	}
	e.FlushChannels() // what the others hold goes while this one waits
	start := time.Now()
	err := o.Push(e.ctx, ev)
	e.Stats.addBackPressure(time.Since(start))
	return err
}

// Err is the first push failure.
func (e *Emitter[T]) Err() error { return e.err }

func (e *Emitter[T]) Flush() error {
	for i := range e.bufs {
		e.push(i)
	}
	e.FlushChannels()
	return e.err
}

func (e *Emitter[T]) FlushChannels() {
	for _, o := range e.outs {
		if f, ok := o.(Flusher); ok {
			f.Flush()
		}
	}
}

func (e *Emitter[T]) Broadcast(ev Event) error {
	if err := e.Flush(); err != nil {
		return err
	}
	for _, o := range e.outs {
		if err := e.send(o, ev); err != nil {
			return err
		}
	}
	return nil
}

func (e *Emitter[T]) Congested() <-chan struct{} {
	for i, f := range e.forced {
		if f == 0 {
			continue
		}
		if !e.outs[i].HasRoom() {
			return e.outs[i].Room()
		}
		e.forced[i] = 0
	}
	return nil
}

func (e *Emitter[T]) Overtake(b Event) error {
	if e.err != nil {
		return e.err
	}
	for i, o := range e.outs {
		var tail Event
		if n := len(e.bufs[i]); n > 0 {
			e.Stats.addOut(n)
			tail = e.batch(i)
		}
		if err := o.Overtake(b, tail); err != nil {
			e.err = err
			return err
		}
		if tail.Kind == KindBatch {
			e.next(i)
		}
	}
	return nil
}

// ErrStopped is the cause of a task context ended because the job stops.
var ErrStopped = errors.New("job attempt stopped")
