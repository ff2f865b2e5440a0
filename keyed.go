package weir

import (
	"cmp"
	"fmt"
	"iter"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/internal/cacheline"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/backend"
)

// KeyedStream is a stream partitioned by a key: every record of one key
// goes to the same subtask, whose keyed state is scoped to that key.
type KeyedStream[K comparable, T any] struct {
	s     *Stream[T]
	key   func(T) K
	codec codec.Codec[K]
}

// KeyBy partitions s by key, which must be deterministic: the same record
// always has the same key, in every process. keyCodec, if given, encodes
// keys (for hashing and state); by default codec.ForKey[K], which encodes
// two keys alike exactly when they are equal under ==. Two kinds of key
// fail the job at once (they cannot be one key to its state): one holding
// NaN (not equal to itself), and, with the default codec of a struct or
// array key, one holding a string that is not UTF-8 (JSON writes it as
// another string).
func KeyBy[T any, K comparable](s *Stream[T], key func(T) K, keyCodec ...codec.Codec[K]) KeyedStream[K, T] {
	env := s.environment()
	if key == nil {
		env.fail(fmt.Errorf("KeyBy after operator %q: the key function is nil", env.nodes[s.node].UID))
	}
	c := codec.ForKey[K]()
	if len(keyCodec) > 0 {
		c = keyCodec[0]
	} else if err := keyTypeFaithful[K](); err != nil {
		env.fail(fmt.Errorf("KeyBy after operator %q: %w, or give KeyBy a key codec", env.nodes[s.node].UID, err))
	}
	return KeyedStream[K, T]{s: s, key: key, codec: c}
}

func (ks KeyedStream[K, T]) environment() *Environment { return ks.s.environment() }

// input is the hash edge into a consumer.
func (ks KeyedStream[K, T]) input(int) (graph.Input, inputSpec) {
	nan := floatIn(reflect.TypeFor[K]())
	route := func(p, maxP int) runtime.KeyRoute[T] {
		h := codec.NewHasher(ks.codec)
		subtask := make([]int, maxP) // by key group
		for g := range subtask {
			subtask[g] = keygroup.Subtask(maxP, p, g)
		}
		return func(v T) (int, uint16) {
			k := ks.key(v)
			if nan && k != k {
				// NB: a panic, as a key that cannot be encoded is: routes
				// return no error.
				panic(Permanent(fmt.Errorf("a record's key %v holds NaN, which is not equal to itself: its state would never be found again; map NaN to another key in the KeyBy's key function", k)))
			}
			g := keygroup.Of(h.Hash(k), maxP)
			return subtask[g], uint16(g)
		}
	}
	return graph.Input{From: ks.s.node, Partition: graph.Hash, Port: ks.s.port}, inputSpec{partition: graph.Hash, hashRoute: route}
}

// KeyedContext gives a keyed function its current key, state and timers.
// It belongs to one subtask; functions must not keep it past their call
// except to declare state in Open.
type KeyedContext[K comparable] struct {
	key         K
	backend     state.Backend
	timers      state.Timers[K] // processing time
	eventTimers state.Timers[K]
	kc          codec.Codec[K]
	op          *operator.Context
	c           *chain
	// onTimer is false when the function has no OnTimer: registering a
	// timer is then a mistake.
	onTimer bool
	// wm is the operator's watermark; domain, the time domain of the timer
	// firing.
	wm     int64
	domain TimeDomain
	// late counts the records of the operator (all its subtasks) dropped
	// for coming after the watermark.
	late *atomic.Int64
	// opening: the function's Open runs, and there is no current key.
	opening bool
	// types are its operator's state types, which a declaration checks.
	types *stateTypes
}

// TimeDomain is event time or processing time.
type TimeDomain int

const (
	// EventTime is when things happened, as records' timestamps say.
	EventTime TimeDomain = iota + 1
	// ProcessingTime is the clock of the machine.
	ProcessingTime
)

func (d TimeDomain) String() string {
	switch d {
	case EventTime:
		return "event time"
	case ProcessingTime:
		return "processing time"
	}
	return fmt.Sprintf("time-domain(%d)", int(d))
}

// Key is the key of the record or timer being handled.
func (c *KeyedContext[K]) Key() K { return c.key }

// current is the key state and timers are of. In Open there is none: no
// record or timer is being handled, and the job fails, saying so (Flink:
// "No key set").
func (c *KeyedContext[K]) current() K {
	if c.opening {
		c.c.fail(operator.Permanent(fmt.Errorf("%s used keyed state or a timer in Open, where there is no current key: create state in Open, and read, write or register timers in Process or OnTimer", c.op.UID)))
	}
	return c.key
}

// Now is the processing time.
func (c *KeyedContext[K]) Now() time.Time { return c.op.Now() }

// Timestamp is the event time of the record being handled, or of the
// timer firing; the zero Time when the stream has no event time.
func (c *KeyedContext[K]) Timestamp() time.Time { return fromMillis(c.c.now) }

// Watermark is the operator's current watermark: records at or before it
// are late. The zero Time before the first.
func (c *KeyedContext[K]) Watermark() time.Time { return fromMillis(c.wm) }

// TimeDomain says, in OnTimer, which kind of timer fired.
func (c *KeyedContext[K]) TimeDomain() TimeDomain { return c.domain }

// RegisterEventTimer asks for OnTimer when the watermark reaches at, for
// the current key; one at or before the watermark fires with the next
// watermark. Event-time timers are checkpointed, and all fire at the end
// of the input.
func (c *KeyedContext[K]) RegisterEventTimer(at time.Time) {
	if c.mayTime() {
		c.eventTimers.Register(c.current(), at)
	}
}

// mayTime fails the job if the function has no OnTimer to call.
func (c *KeyedContext[K]) mayTime() bool {
	if !c.onTimer {
		c.c.fail(operator.Permanent(fmt.Errorf("%s registered a timer, but its function has no OnTimer method to call when it fires: implement weir.KeyedTimerFunction, or do not register timers", c.op.UID)))
	}
	return c.onTimer
}

// DeleteEventTimer cancels the current key's event-time timer at at.
func (c *KeyedContext[K]) DeleteEventTimer(at time.Time) { c.eventTimers.Delete(c.current(), at) }

// dropLate counts a record dropped for being late, and logs the first ten
// and every thousandth.
func (c *KeyedContext[K]) dropLate(ts int64) {
	if n := c.late.Add(1); n <= 10 || n%1000 == 0 {
		c.op.Logger.Warn("dropped a record behind the watermark", "operator", c.op.UID, "event-time", time.UnixMilli(ts).UTC(),
			"watermark", fromMillis(c.wm).UTC(), "dropped", n)
	}
}

func fromMillis(ms int64) time.Time {
	if ms == operator.MinTime {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// Subtask and Parallelism say which instance this is.
func (c *KeyedContext[K]) Subtask() int     { return c.op.Subtask }
func (c *KeyedContext[K]) Parallelism() int { return c.op.Parallelism }

// RegisterTimer asks for OnTimer at processing time at (millisecond
// precision) for the current key. Timers are checkpointed. At the end of
// the input, timers that are not due yet do not fire (as in Flink). A
// function without OnTimer (KeyedTimerFunction) must not register timers:
// the job fails, saying so.
func (c *KeyedContext[K]) RegisterTimer(at time.Time) {
	if c.mayTime() && c.c.clockAllowed(c.op.UID) {
		c.timers.Register(c.current(), at)
	}
}

// DeleteTimer cancels the current key's timer at time at.
func (c *KeyedContext[K]) DeleteTimer(at time.Time) { c.timers.Delete(c.current(), at) }

func stateCodec[V any](cs []codec.Codec[V]) codec.Codec[V] {
	if len(cs) > 0 {
		return cs[0]
	}
	return codec.For[V]()
}

// ValueState holds one value per key.
//
// A value that Value gives out and the function then changes in place (a
// map, a slice, a struct behind a pointer) must be stored again with
// Update, as with Flink's state: the Pebble backend keeps only what Update
// stores, and the heap backend gives out a copy once a checkpoint has
// frozen the value. The same holds for ListState and MapState.
type ValueState[K comparable, V any] struct {
	t state.Value[K, V]
	c *KeyedContext[K]
}

// NewValueState declares value state name; call it from Open.
func NewValueState[K comparable, V any](c *KeyedContext[K], name string, vc ...codec.Codec[V]) (*ValueState[K, V], error) {
	if err := c.types.declare(c.op.UID, name, "value of "+typeOf(stateCodec(vc), codec.For[V](), false)); err != nil {
		return nil, err
	}
	t, err := backend.NewValue(c.backend, name, c.kc, stateCodec(vc))
	return &ValueState[K, V]{t: t, c: c}, err
}

func (s *ValueState[K, V]) Value() (V, bool) { return s.t.Get(s.c.current()) }
func (s *ValueState[K, V]) Update(v V)       { s.t.Put(s.c.current(), v) }
func (s *ValueState[K, V]) Clear()           { s.t.Delete(s.c.current()) }

// ListState holds a list per key. Adding to it does not read it.
type ListState[K comparable, V any] struct {
	t state.List[K, V]
	c *KeyedContext[K]
}

// NewListState declares list state name; call it from Open.
func NewListState[K comparable, V any](c *KeyedContext[K], name string, vc ...codec.Codec[V]) (*ListState[K, V], error) {
	if err := c.types.declare(c.op.UID, name, "list of "+typeOf(stateCodec(vc), codec.For[V](), false)); err != nil {
		return nil, err
	}
	t, err := backend.NewList(c.backend, name, c.kc, stateCodec(vc))
	return &ListState[K, V]{t: t, c: c}, err
}

// Get returns the list; do not modify it, nor its elements in place
// (the heap backend's snapshots may be encoding them): Update a changed
// list.
func (s *ListState[K, V]) Get() []V { return s.t.Get(s.c.current()) }

// All streams the list (on disk backends, without loading it whole).
func (s *ListState[K, V]) All() iter.Seq[V] { return s.t.All(s.c.current()) }

func (s *ListState[K, V]) Add(v V)       { s.t.Add(s.c.current(), v) }
func (s *ListState[K, V]) Update(vs []V) { s.t.Update(s.c.current(), vs) }
func (s *ListState[K, V]) Clear()        { s.t.Delete(s.c.current()) }

// MapState holds a map per key.
type MapState[K, UK comparable, V any] struct {
	t     state.Map[K, UK, V]
	c     *KeyedContext[K]
	name  string
	nan   bool           // UK holds floats (floatIn)
	check func(UK) error // codec.KeyCheck, nil when every user key encodes apart
}

// keyTypeFaithful says why keys of type K cannot go through their default
// codec (codec.ForKey) unchanged, or nil. State tells keys apart by their
// encoding (in a snapshot, in Pebble): two keys that encode alike would
// share one's state after a restore, silently.
func keyTypeFaithful[K any]() error {
	t := reflect.TypeFor[K]()
	if p := pointerIn(t); p != nil {
		return fmt.Errorf("key type %s: %s compares by address, which no encoding carries (state tells keys apart by their encoding: two keys that encode alike would share their state): key by the value pointed at", t, p)
	}
	if err := codec.Faithful[K](); err != nil {
		return fmt.Errorf("key type %s: %w (state tells keys apart by their encoding: two keys that encode alike would share their state)", t, err)
	}
	return nil
}

// floatIn says whether comparable type t holds a float (in its arrays and
// struct fields), which may be NaN.
func floatIn(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return true
	case reflect.Array:
		return floatIn(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if floatIn(t.Field(i).Type) {
				return true
			}
		}
	}
	return false
}

// pointerIn is a pointer type in comparable type t (in its arrays and
// struct fields), or nil.
func pointerIn(t reflect.Type) reflect.Type {
	switch t.Kind() {
	case reflect.Pointer, reflect.UnsafePointer:
		return t
	case reflect.Array:
		return pointerIn(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if p := pointerIn(t.Field(i).Type); p != nil {
				return p
			}
		}
	}
	return nil
}

// NewMapState declares map state name; call it from Open.
func NewMapState[K, UK comparable, V any](c *KeyedContext[K], name string) (*MapState[K, UK, V], error) {
	if err := keyTypeFaithful[UK](); err != nil {
		return nil, Permanent(fmt.Errorf("map state %q: user %w", name, err))
	}
	if err := c.types.declare(c.op.UID, name, "map of "+typeOf(codec.ForKey[UK](), codec.ForKey[UK](), true)+" to "+typeOf(codec.For[V](), codec.For[V](), false)); err != nil {
		return nil, err
	}
	t, err := backend.NewMap(c.backend, name, c.kc, codec.ForKey[UK](), codec.For[V]())
	return &MapState[K, UK, V]{t: t, c: c, name: name, nan: floatIn(reflect.TypeFor[UK]()), check: codec.KeyCheck[UK]()}, err
}

// Get finds no entry under a user key Put refuses (it stores none).
func (s *MapState[K, UK, V]) Get(uk UK) (V, bool) {
	if s.refuses(uk) != nil {
		var zero V
		return zero, false
	}
	return s.t.Get(s.c.current(), uk)
}

// Put fails the job at once given a user key holding NaN, as KeyBy does a
// key (NaN is not equal to itself, so no Get would find the entry again),
// or one its codec cannot encode, or not apart from others
// (codec.KeyCheck): the heap backend would find out only at the next
// checkpoint.
func (s *MapState[K, UK, V]) Put(uk UK, v V) {
	if err := s.refuses(uk); err != nil {
		panic(Permanent(err))
	}
	s.t.Put(s.c.current(), uk, v)
}

// Remove does nothing given a user key Put refuses (it stores none).
func (s *MapState[K, UK, V]) Remove(uk UK) {
	if s.refuses(uk) != nil {
		return
	}
	s.t.Remove(s.c.current(), uk)
}

// refuses says why Put refuses user key uk, or nil.
func (s *MapState[K, UK, V]) refuses(uk UK) error {
	if s.nan && uk != uk {
		return fmt.Errorf("map state %q: user key %v holds NaN, which is not equal to itself: no Get would find its entry; map NaN to another user key", s.name, uk)
	}
	if s.check != nil {
		if err := s.check(uk); err != nil {
			return fmt.Errorf("map state %q: user key: %w", s.name, err)
		}
	}
	return nil
}

// All returns the current key's map; do not modify it.
func (s *MapState[K, UK, V]) All() iter.Seq2[UK, V] { return s.t.All(s.c.current()) }
func (s *MapState[K, UK, V]) Clear()                { s.t.Delete(s.c.current()) }

// KeyedProcessFunction handles the records of a keyed stream. It may also
// implement KeyedOpener (to declare state) and KeyedTimerFunction.
type KeyedProcessFunction[K comparable, In, Out any] interface {
	Process(c *KeyedContext[K], in In, out Collector[Out]) error
}

// KeyedOpener is called once per subtask before any record.
type KeyedOpener[K comparable] interface {
	Open(c *KeyedContext[K]) error
}

// KeyedTimerFunction is called when a timer fires, with its key current
// (c.TimeDomain says which kind). What an event-time timer emits has its
// time as event time.
type KeyedTimerFunction[K comparable, Out any] interface {
	OnTimer(c *KeyedContext[K], at time.Time, out Collector[Out]) error
}

// keyed is the machinery every keyed operator shares: state backend,
// timers, snapshot and restore.
type keyed[K comparable, Out any] struct {
	kctx   KeyedContext[K]
	hasher *codec.Hasher[K]
	// checked counts keys set, for the sampled check of carried key groups.
	checked uint64
	onTime  KeyedTimerFunction[K, Out]
	out     Collector[Out]
	c       *chain
	// lateCount is the node's count of late records (nil: one of its own).
	lateCount *atomic.Int64
	// wmCap bounds the watermark in a verification rerun: the operator's
	// at the checkpoint (chain.watermarkCap).
	wmCap int64
	// firedUnder is the greatest watermark the state's windows may have
	// fired under: greater than the watermark after a rescale took the least of
	// the subtasks' (restoreWatermarks); while it is, a window that looks
	// unfired may have fired, its timer spent (behind).
	firedUnder int64
	// beforeEnd is the greatest watermark the operator had below MaxTime,
	// which a checkpoint after the end of its input (ended: Finish)
	// records for a restore to resume from (snapshotWatermark).
	beforeEnd int64
	ended     bool
	knobs     keyedKnobs
	// types are the state's types, restored and declared (statetypes.go).
	types stateTypes
}

// keyedKnobs put back defects, for tests that show the keyed function
// generator (keyedfn_gen_test.go) would find them. All false in every job.
type keyedKnobs struct {
	// staleTimerTime: a processing-time timer fires with the event time
	// of the record handled before it, not with none.
	staleTimerTime bool
	// keepProcessingTimers: the end of the input leaves the timers not due
	// yet in the state, so a restore of a later checkpoint fires them.
	keepProcessingTimers bool
	// resumeAtTheEnd: windowKnobs.resumeAtTheEnd.
	resumeAtTheEnd bool
}

// behind reports whether the state may hold windows that fired under a
// greater watermark than the operator's.
func (k *keyed[K, Out]) behind() bool { return k.kctx.wm < k.firedUnder }

func (k *keyed[K, Out]) open(oc *operator.Context, kc codec.Codec[K], fn any) error {
	if fn == nil {
		return nilFromFactory(oc.UID, "function")
	}
	var rs *state.Restored
	k.types = stateTypes{}
	if oc.Restore != nil {
		rs = &state.Restored{Handles: oc.Restore.Handles, Reader: oc.Restore.Reader(), Owned: oc.Restore.Owned}
		var err error
		if k.types.restored, err = restoreStateTypes(oc.Restore, oc); err != nil {
			return err
		}
	}
	// NB: before the backend reads a restored key.
	if err := k.types.declare(oc.UID, keyTypeName, typeOf(kc, codec.ForKey[K](), true)); err != nil {
		return err
	}
	b, err := backend.New(k.c.state, backend.Scope{Job: oc.Job, Operator: oc.UID, Subtask: oc.Subtask, KeyGroups: oc.KeyGroups}, rs)
	if err != nil {
		if oc.Restore != nil {
			return fmt.Errorf("restore keyed state from checkpoint %d: %w", oc.Restore.Checkpoint, err)
		}
		return err
	}
	k.kctx.backend = b // closed by Close, whatever fails next
	timers, err := backend.NewTimers(b, "_timers", kc)
	if err != nil {
		return err
	}
	eventTimers, err := backend.NewTimers(b, "_event_timers", kc)
	if err != nil {
		return err
	}
	wm := operator.MinTime
	k.firedUnder = operator.MinTime
	if oc.Restore != nil {
		if wm, k.firedUnder, err = restoreWatermarks(oc.Restore, oc); err != nil {
			return err
		}
	}
	k.beforeEnd = wm
	if k.wmCap, err = k.c.watermarkCap(oc); err != nil {
		return err
	}
	k.onTime, _ = fn.(KeyedTimerFunction[K, Out])
	if k.lateCount == nil {
		k.lateCount = new(atomic.Int64)
	}
	k.kctx = KeyedContext[K]{backend: b, timers: timers, eventTimers: eventTimers, kc: kc, op: oc, c: k.c, onTimer: k.onTime != nil, wm: wm, late: k.lateCount, types: &k.types}
	k.hasher = codec.NewHasher(kc)
	if o, ok := fn.(KeyedOpener[K]); ok {
		k.kctx.opening = true
		err := o.Open(&k.kctx)
		k.kctx.opening = false
		return cmp.Or(err, k.c.err)
	}
	return nil
}

// setKey makes key current; false (with the chain failed) if this subtask
// does not own its key group, which means a non-deterministic key selector.
func (k *keyed[K, Out]) setKey(key K) bool {
	oc := k.kctx.op
	// The sender routed the record by its key group and sent it along:
	// the key is hashed once. Every 64th record is hashed again, so a key
	// selector that returns another key the second time is still caught.
	g := k.c.group
	if k.checked++; g < 0 || k.checked%64 == 0 {
		g = keygroup.Of(k.hasher.Hash(key), oc.MaxParallelism)
		if k.c.group >= 0 && g != k.c.group {
			k.c.fail(operator.Permanent(fmt.Errorf("%s: key %v belongs to key group %d, but the record was routed to key group %d: the key selector must return the same key for a record every time it is called",
				oc.UID, key, g, k.c.group)))
			return false
		}
	}
	if !oc.KeyGroups.Contains(g) {
		k.c.fail(operator.Permanent(fmt.Errorf("%s: key %v belongs to key group %d, which subtask %d (key groups %v) does not own: the key selector must return the same key for a record every time it is called",
			oc.UID, key, g, oc.Subtask, oc.KeyGroups)))
		return false
	}
	k.kctx.backend.SetGroup(g)
	k.kctx.key = key
	return true
}

func (k *keyed[K, Out]) Snapshot(id checkpoint.ID) (operator.Async, error) {
	oc := k.kctx.op
	a, err := k.kctx.backend.Snapshot(id)
	if err != nil {
		return nil, err
	}
	withWatermark, err := both(oc.StateWriter(a), nil)(snapshotWatermark(oc, k.kctx.wm, k.firedUnder, k.resumeFrom(), k.ended))
	return both(withWatermark, err)(k.types.snapshot(oc))
}

// resumeFrom is the watermark a restore of a snapshot taken after the end
// of the input resumes from.
func (k *keyed[K, Out]) resumeFrom() int64 {
	if k.knobs.resumeAtTheEnd {
		return operator.MaxTime
	}
	return k.beforeEnd
}

func (k *keyed[K, Out]) NextTimer() (time.Time, bool) { return k.kctx.timers.Next() }

func (k *keyed[K, Out]) FireTimers(now time.Time) error {
	k.kctx.domain = ProcessingTime
	return k.kctx.timers.FireUpTo(now.UnixMilli(), func(key K, at time.Time) error {
		if k.onTime == nil {
			return nil // restored from a version of the function that had OnTimer
		}
		k.kctx.key = key
		if !k.knobs.staleTimerTime {
			k.c.now = operator.MinTime
		}
		if err := k.onTime.OnTimer(&k.kctx, at, k.out); err != nil {
			return err
		}
		return k.c.err // a failure down the chain stops the timers
	})
}

// AdvanceWatermark fires the event-time timers up to wm, earliest first.
func (k *keyed[K, Out]) AdvanceWatermark(wm int64) error {
	if k.c.verify != nil {
		wm = min(wm, k.wmCap)
	}
	if wm <= k.kctx.wm {
		return nil // a restored watermark is ahead of the inputs'
	}
	k.kctx.wm = wm
	if wm != operator.MaxTime {
		k.beforeEnd = wm
	}
	k.kctx.domain = EventTime
	return k.kctx.eventTimers.FireUpTo(wm, func(key K, at time.Time) error {
		if k.onTime == nil {
			return nil
		}
		k.kctx.key, k.c.now = key, at.UnixMilli()
		if err := k.onTime.OnTimer(&k.kctx, at, k.out); err != nil {
			return err
		}
		return k.c.err
	})
}

// Finish: the input ended. Processing-time timers not due yet will never
// fire (as in Flink); they are dropped, so the final checkpoint holds none
// and a restore of it fires none either.
func (k *keyed[K, Out]) Finish() error {
	k.ended = true
	if !k.knobs.keepProcessingTimers {
		k.kctx.timers.Clear()
	}
	return nil
}

func (k *keyed[K, Out]) NotifyComplete(id checkpoint.ID) error {
	k.kctx.backend.NotifyComplete(id)
	return nil
}

func (k *keyed[K, Out]) NotifyAborted(id checkpoint.ID) { k.kctx.backend.NotifyAborted(id) }

func (k *keyed[K, Out]) Close() error {
	if k.kctx.backend == nil {
		return nil
	}
	return k.kctx.backend.Close()
}

// Process applies a keyed process function; newFn builds each subtask's.
func Process[K comparable, In, Out any](ks KeyedStream[K, In], name string, newFn func() KeyedProcessFunction[K, In, Out], opts ...Option) *Stream[Out] {
	n := &node{}
	n.instance = func(c *chain, next any) (operator.Operator, any) {
		op := cacheline.New(processOp[K, In, Out]{fn: newFn(), key: ks.key, kc: ks.codec})
		op.out, op.c = next.(Collector[Out]), c
		return op, Collector[In](op)
	}
	n.head = headOf[In](n)
	return addOp[Out](ks.environment(), name, kindKeyedProcess, newFn, opts, n, ks)
}

type processOp[K comparable, In, Out any] struct {
	keyed[K, Out]
	fn  KeyedProcessFunction[K, In, Out]
	key func(In) K
	kc  codec.Codec[K]
}

func (p *processOp[K, In, Out]) Open(oc *operator.Context) error { return p.open(oc, p.kc, p.fn) }

func (p *processOp[K, In, Out]) Collect(v In) {
	if !p.setKey(p.key(v)) {
		return
	}
	if err := p.fn.Process(&p.kctx, v, p.out); err != nil {
		p.c.fail(fmt.Errorf("%s: %w", p.kctx.op.UID, err))
	}
}

// Reduce combines the records of each key with f and emits the running
// result after every record.
func Reduce[K comparable, T any](ks KeyedStream[K, T], name string, f func(acc, v T) T, opts ...Option) *Stream[T] {
	if f == nil {
		ks.environment().fail(fmt.Errorf("operator %q: its function is nil", name))
	}
	return Process(ks, name, func() KeyedProcessFunction[K, T, T] { return &reducer[K, T]{f: f} }, opts...)
}

type reducer[K comparable, T any] struct {
	f   func(acc, v T) T
	acc *ValueState[K, T]
}

func (r *reducer[K, T]) Open(c *KeyedContext[K]) (err error) {
	r.acc, err = NewValueState[K, T](c, "reduce")
	return err
}

func (r *reducer[K, T]) Process(_ *KeyedContext[K], v T, out Collector[T]) error {
	if acc, ok := r.acc.Value(); ok {
		v = r.f(acc, v)
	}
	r.acc.Update(v)
	out.Collect(v)
	return nil
}

// KeyedCoProcessFunction handles two keyed inputs with one key space: a
// join. It may implement KeyedOpener and KeyedTimerFunction.
type KeyedCoProcessFunction[K comparable, A, B, Out any] interface {
	Process1(c *KeyedContext[K], a A, out Collector[Out]) error
	Process2(c *KeyedContext[K], b B, out Collector[Out]) error
}

// KeyedCoProcess applies a function over two streams keyed alike.
func KeyedCoProcess[K comparable, A, B, Out any](a KeyedStream[K, A], b KeyedStream[K, B], name string, newFn func() KeyedCoProcessFunction[K, A, B, Out], opts ...Option) *Stream[Out] {
	return keyedCoProcess(a, b, name, kindKeyedCoProcess, newFn, opts)
}

// keyedCoProcess is KeyedCoProcess for an operator of the given kind.
func keyedCoProcess[K comparable, A, B, Out any](a KeyedStream[K, A], b KeyedStream[K, B], name, kind string, newFn func() KeyedCoProcessFunction[K, A, B, Out], opts []Option) *Stream[Out] {
	n := &node{}
	n.instance = func(c *chain, next any) (operator.Operator, any) {
		op := cacheline.New(keyedCoOp[K, A, B, Out]{fn: newFn(), keyA: a.key, keyB: b.key, kc: a.codec, n: n})
		op.out, op.c, op.lateCount = next.(Collector[Out]), c, &n.late
		return op, nil
	}
	n.head = func(op operator.Operator, _ any, _ *chain) any { return op }
	return addOp[Out](a.environment(), name, kind, newFn, opts, n, a, b)
}

type keyedCoOp[K comparable, A, B, Out any] struct {
	keyed[K, Out]
	fn   KeyedCoProcessFunction[K, A, B, Out]
	keyA func(A) K
	keyB func(B) K
	kc   codec.Codec[K]
	n    *node
}

func (o *keyedCoOp[K, A, B, Out]) Open(oc *operator.Context) error { return o.open(oc, o.kc, o.fn) }

func (o *keyedCoOp[K, A, B, Out]) ProcessBatch(input int, batch any, times []int64, groups []uint16) error {
	return processTwo(o.n, o.c, input, batch, times, groups,
		func(a A) error {
			if !o.setKey(o.keyA(a)) {
				return o.c.err
			}
			return o.fn.Process1(&o.kctx, a, o.out)
		},
		func(b B) error {
			if !o.setKey(o.keyB(b)) {
				return o.c.err
			}
			return o.fn.Process2(&o.kctx, b, o.out)
		})
}
