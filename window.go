package weir

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/cacheline"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/backend"
)

// TimeWindow is a span of time, [Start, End).
type TimeWindow struct {
	Start, End time.Time
}

// MaxTimestamp is the window's last millisecond: what it emits has this
// event time.
func (w TimeWindow) MaxTimestamp() time.Time { return w.End.Add(-time.Millisecond) }

func timeWindow(start, end int64) TimeWindow {
	return TimeWindow{Start: time.UnixMilli(start).UTC(), End: time.UnixMilli(end).UTC()}
}

// WindowResult is what a windowed aggregation emits for a key and window.
type WindowResult[K any, V any] struct {
	Key    K
	Window TimeWindow
	Value  V
}

// WindowEnd is a result's window end in milliseconds since the epoch
// (event time's unit): a key to gather the results of one window from
// every key (KeyBy(results, weir.WindowEnd)). NB: not a time.Time, which
// KeyBy refuses as a key (its == compares a location's address and a
// monotonic reading).
func WindowEnd[K, V any](r WindowResult[K, V]) int64 { return r.Window.End.UnixMilli() }

type windowKind int

const (
	tumbling windowKind = iota + 1
	sliding
	sessions
)

// WindowAssigner says which windows a record belongs to.
type WindowAssigner struct {
	kind              windowKind
	size, slide, gap  int64 // milliseconds
	processing        bool
	sizeD, slideD, gD time.Duration
}

// geometry says how the assigner cuts time into the windows whose state
// it keeps, for the check of a restore (statetypes.go): a tumbling or
// sliding window's panes restored under another size or slide would never
// fire. A session's gap may change: its state holds each session's end.
func (a WindowAssigner) geometry() string {
	domain := "event time"
	if a.processing {
		domain = "processing time"
	}
	switch a.kind {
	case tumbling:
		return fmt.Sprintf("tumbling windows of %v on %s", a.sizeD, domain)
	case sliding:
		return fmt.Sprintf("sliding windows of %v every %v on %s", a.sizeD, a.slideD, domain)
	}
	return "session windows on " + domain
}

// Tumbling windows of size, back to back: [0, size), [size, 2·size), …
func Tumbling(size time.Duration) WindowAssigner {
	return WindowAssigner{kind: tumbling, size: size.Milliseconds(), slide: size.Milliseconds(), sizeD: size, slideD: size}
}

// Sliding windows of size starting every slide, at multiples of slide: a
// record belongs to about size/slide of them. Incremental aggregates keep
// one accumulator per slice of gcd(size, slide), not one per window. A
// slide longer than the size samples the stream, as in Flink: a record
// between two windows belongs to none and is dropped (sent to LateTo, or
// counted as late, only if it is itself behind the watermark by more than
// the allowed lateness).
func Sliding(size, slide time.Duration) WindowAssigner {
	return WindowAssigner{kind: sliding, size: size.Milliseconds(), slide: slide.Milliseconds(), sizeD: size, slideD: slide}
}

// Session windows: a key's records closer than gap to each other share a
// window, which ends gap after its last record. Windows merge as records
// bridge them.
func Session(gap time.Duration) WindowAssigner {
	return WindowAssigner{kind: sessions, gap: gap.Milliseconds(), gD: gap}
}

// ProcessingTime makes the windows follow the machine's clock instead of
// event time. They fire on processing-time timers; at the end of a bounded
// input the open ones do not fire (as in Flink).
func (a WindowAssigner) ProcessingTime() WindowAssigner {
	a.processing = true
	return a
}

func (a WindowAssigner) check() error {
	switch a.kind {
	case tumbling, sliding:
		if a.size <= 0 || a.slide <= 0 || a.sizeD%time.Millisecond != 0 || a.slideD%time.Millisecond != 0 {
			return fmt.Errorf("window size %v and slide %v must be whole milliseconds above 0", a.sizeD, a.slideD)
		}
	case sessions:
		if a.gap <= 0 || a.gD%time.Millisecond != 0 {
			return fmt.Errorf("session gap %v must be whole milliseconds above 0", a.gD)
		}
	default:
		return fmt.Errorf("no window assigner: use weir.Tumbling, weir.Sliding or weir.Session")
	}
	return nil
}

// pane is the slice sliding windows are built of.
func (a WindowAssigner) pane() int64 {
	x, y := a.size, a.slide
	for y != 0 {
		x, y = y, x%y
	}
	return x
}

type windowConfig struct {
	lateness time.Duration
	lateTo   any // **Stream[T]
}

// WindowOption configures a windowed stream.
type WindowOption func(*windowConfig)

// AllowedLateness keeps event-time windows d past their end: a late
// record within it updates its windows, which fire again with the updated
// result. Processing-time windows have no late records: the option is an
// error for them.
func AllowedLateness(d time.Duration) WindowOption {
	return func(c *windowConfig) { c.lateness = d }
}

// LateTo sends the records that come too late for all their windows to a
// stream of their own, which *late points to once the windowed operator is
// added. Without it they are dropped, counted (Metrics.Late) and logged.
func LateTo[T any](late **Stream[T]) WindowOption {
	return func(c *windowConfig) { c.lateTo = late }
}

// WindowedStream is a keyed stream cut into windows.
type WindowedStream[K comparable, T any] struct {
	ks       KeyedStream[K, T]
	assigner WindowAssigner
	cfg      windowConfig
}

// Window cuts a keyed stream into windows.
func Window[K comparable, T any](ks KeyedStream[K, T], a WindowAssigner, opts ...WindowOption) WindowedStream[K, T] {
	ws := WindowedStream[K, T]{ks: ks, assigner: a}
	for _, o := range opts {
		o(&ws.cfg)
	}
	return ws
}

// AggregateFunction aggregates incrementally: a window keeps one
// accumulator, not its records.
type AggregateFunction[In, Acc, Out any] interface {
	Zero() Acc
	Add(acc Acc, v In) Acc
	Merge(a, b Acc) Acc
	Result(acc Acc) Out
}

// Count counts records.
func Count[T any]() AggregateFunction[T, int64, int64] { return counting[T]{} }

type counting[T any] struct{}

func (counting[T]) Zero() int64              { return 0 }
func (counting[T]) Add(acc int64, _ T) int64 { return acc + 1 }
func (counting[T]) Merge(a, b int64) int64   { return a + b }
func (counting[T]) Result(acc int64) int64   { return acc }

// WindowAggregate aggregates each key's windows incrementally and emits a
// result per key and window when the window closes.
func WindowAggregate[K comparable, In, Acc, Out any](ws WindowedStream[K, In], name string, agg AggregateFunction[In, Acc, Out], opts ...Option) *Stream[WindowResult[K, Out]] {
	if isNil(agg) {
		ws.ks.environment().fail(fmt.Errorf("operator %q: its aggregate function is nil", name))
		agg = nilAggregate[In, Acc, Out]{}
	}
	fold := windowFold[In, Acc]{first: func(v In) Acc { return agg.Add(agg.Zero(), v) }, add: agg.Add, merge: agg.Merge}
	emit := func(key K, w TimeWindow, acc Acc, out Collector[WindowResult[K, Out]]) error {
		out.Collect(WindowResult[K, Out]{Key: key, Window: w, Value: agg.Result(acc)})
		return nil
	}
	return addWindow(ws, name, fold, emit, agg, opts)
}

type nilAggregate[In, Acc, Out any] struct{}

func (nilAggregate[In, Acc, Out]) Zero() (a Acc)       { return a }
func (nilAggregate[In, Acc, Out]) Add(a Acc, _ In) Acc { return a }
func (nilAggregate[In, Acc, Out]) Merge(a, _ Acc) Acc  { return a }
func (nilAggregate[In, Acc, Out]) Result(Acc) (o Out)  { return o }

// WindowReduce combines each key's records of a window with f,
// incrementally, and emits the result when the window closes.
func WindowReduce[K comparable, T any](ws WindowedStream[K, T], name string, f func(a, b T) T, opts ...Option) *Stream[WindowResult[K, T]] {
	fold := windowFold[T, T]{first: func(v T) T { return v }, add: f, merge: f}
	emit := func(key K, w TimeWindow, acc T, out Collector[WindowResult[K, T]]) error {
		out.Collect(WindowResult[K, T]{Key: key, Window: w, Value: acc})
		return nil
	}
	return addWindow(ws, name, fold, emit, f, opts)
}

// WindowFunction sees a whole window: its key, span and records (in
// arrival order within each pane of a sliding window and each merged
// session, the panes and sessions in order of their starts); it emits any
// number of results. The records are kept in
// state until the window closes, which costs more than an
// AggregateFunction.
type WindowFunction[K comparable, In, Out any] func(key K, w TimeWindow, in []In, out Collector[Out]) error

// WindowProcess calls f with each key's window when it closes.
func WindowProcess[K comparable, In, Out any](ws WindowedStream[K, In], name string, f WindowFunction[K, In, Out], opts ...Option) *Stream[Out] {
	// The records go to list state, a key per record on disk backends: an
	// added record is written, the window is not rewritten.
	fold := windowFold[In, []In]{listing: true}
	emit := func(key K, w TimeWindow, acc []In, out Collector[Out]) error { return f(key, w, acc, out) }
	return addWindow(ws, name, fold, emit, f, opts)
}

// windowFold folds records into an accumulator: the first of a pane or
// window, then the others; panes and sessions merge. With listing, Acc is
// []In and the records are kept in list state instead, by key and pane or
// session.
type windowFold[In, Acc any] struct {
	first   func(In) Acc
	add     func(Acc, In) Acc
	merge   func(Acc, Acc) Acc
	listing bool
}

func addWindow[K comparable, In, Acc, Out any](ws WindowedStream[K, In], name string, fold windowFold[In, Acc],
	emit func(K, TimeWindow, Acc, Collector[Out]) error, fn any, opts []Option) *Stream[Out] {
	env := ws.ks.environment()
	if err := ws.assigner.check(); err != nil {
		env.fail(fmt.Errorf("operator %q: %w", name, err))
	}
	if ws.cfg.lateness < 0 || ws.cfg.lateness%time.Millisecond != 0 && ws.cfg.lateness != math.MaxInt64 {
		env.fail(fmt.Errorf("operator %q: allowed lateness %v is negative or not whole milliseconds (event time is in milliseconds; math.MaxInt64: for ever)", name, ws.cfg.lateness))
	}
	if ws.cfg.lateness > 0 && ws.assigner.processing {
		env.fail(fmt.Errorf("operator %q: allowed lateness is for event-time windows; processing-time windows fire once, when the clock passes their end: drop weir.AllowedLateness, or use event time", name))
	}
	var late **Stream[In]
	if ws.cfg.lateTo != nil {
		var ok bool
		switch late, ok = ws.cfg.lateTo.(**Stream[In]); {
		case !ok:
			env.fail(fmt.Errorf("operator %q: LateTo needs a **weir.Stream of the window's records, not %T", name, ws.cfg.lateTo))
		case late == nil:
			env.fail(fmt.Errorf("operator %q: LateTo was given a nil pointer: give it the address of a variable the window sets to its late records' stream (var late *weir.Stream[T]; weir.LateTo(&late))", name))
		}
	}
	n := &node{}
	n.instance = func(c *chain, next any) (operator.Operator, any) {
		op := cacheline.New(windowOp[K, In, Acc, Out]{key: ws.ks.key, kc: ws.ks.codec, a: ws.assigner, lateness: ws.cfg.lateness.Milliseconds(),
			fold: fold, emit: emit, hasLate: late != nil})
		op.out, op.c, op.lateCount = next.(Collector[Out]), c, &n.late
		return op, Collector[In](op)
	}
	n.head = headOf[In](n)
	s := addOp[Out](env, name, kindWindow, fn, opts, n, ws.ks)
	if !ws.assigner.processing {
		needEventTime(s, "event-time windows need", " (or windows on processing time)")
	}
	if late != nil {
		n.sides = map[int]emitterFunc{1: emitterOf[In]}
		n.wire[1] = wireOf[In]()
		*late = &Stream[In]{env: env, node: s.node, port: 1}
	}
	return s
}

// needEventTime fails the job unless s's records have event time.
func needEventTime[T any](s *Stream[T], what, or string) {
	if n := s.environment().nodes[s.node]; !n.timed {
		s.environment().fail(fmt.Errorf("operator %q: %s records with event time on every input: give the sources weir.Watermarks, or use weir.AssignWatermarks%s", n.Name, what, or))
	}
}

// sessionState is one session window's state: its end and accumulator.
type sessionState[Acc any] struct {
	End int64
	Acc Acc
}

// windowOp runs windows for one subtask. Tumbling and sliding windows keep
// an accumulator per key and pane (a slice of gcd(size, slide)); a window
// merges its panes when it fires. Sessions keep an accumulator per key and
// session. A timer per key and window end fires it (event time: when the
// watermark passes its last millisecond); with allowed lateness another,
// kept apart (cleanups), cleans up after it.
type windowOp[K comparable, In, Acc, Out any] struct {
	keyed[K, Out]
	key      func(In) K
	kc       codec.Codec[K]
	a        WindowAssigner
	lateness int64
	fold     windowFold[In, Acc]
	emit     func(K, TimeWindow, Acc, Collector[Out]) error
	hasLate  bool
	late     Collector[In]
	panes    state.Map[K, int64, Acc]
	// copyAcc copies an accumulator that merge may change in place
	// (codec.Copier; nil if nothing can be): a window of several panes
	// merges copies of them, as later windows share them.
	copyAcc  func(Acc) Acc
	sessions state.Map[K, int64, sessionState[Acc]]
	// records holds, when listing, the records of each key's pane (by its
	// start) or session (by its start).
	records state.List[paneKey[K], In]
	// keyPanes holds the current key's panes as keyPanes read them, and
	// firing those of the window firing, in order; both reused.
	keyPanes, firing []pane[Acc]
	// merged and ends hold the starts and ends of the sessions a record
	// merges; reused.
	merged, ends []int64
	// cleanups holds, for event-time windows, the timers that clean a
	// window up when its allowed lateness ends, apart from the timers that
	// fire one: a clean-up instant can be another window's last
	// millisecond, and if it were one timer, a window that fired under a
	// greater watermark before a rescale would fire again, unchanged, at
	// another's clean-up.
	cleanups state.Timers[K]
	// firedUpTo is the processing time up to which timers have fired
	// (MinTime: none yet, or since the restore).
	firedUpTo int64
	knobs     windowKnobs
}

// windowKnobs put back defects that were fixed, for tests that show the
// window generator (window_gen_test.go) would find them. All false in
// every job.
type windowKnobs struct {
	// registerFiredWindows: a late record's new pane or session asks for
	// a timer at its window's end although the window has fired, so the
	// next watermark fires it a second time.
	registerFiredWindows bool
	// keepSpentTimers: a record in an existing pane registers no timer
	// after a rescale restored a watermark behind the one its window fired
	// under, so the window's update is never emitted.
	keepSpentTimers bool
	// endsAtSlideMultiples: a timer fires a sliding window only when its
	// end is a multiple of the slide, so a size that is not one fires none.
	endsAtSlideMultiples bool
	// sharedCleanups: clean-up timers are kept with the firing ones, as
	// before session 33 (and in its checkpoints), so after a rescale
	// regressed the watermark a window fires again, unchanged, at another
	// window's clean-up.
	sharedCleanups bool
	// resumeAtTheEnd: a checkpoint taken after the end of the input
	// records the end (MaxTime) as the watermark a restore resumes from.
	resumeAtTheEnd bool
}

type pane[Acc any] struct {
	start int64
	acc   Acc
}

// paneKey is a key and the start of one of its panes or sessions.
type paneKey[K any] struct {
	Key   K
	Start int64
}

type paneKeyCodec[K any] struct{ kc codec.Codec[K] }

func (c paneKeyCodec[K]) Append(dst []byte, k paneKey[K]) []byte {
	return binary.AppendVarint(c.kc.Append(dst, k.Key), k.Start)
}

func (c paneKeyCodec[K]) Decode(src []byte) (paneKey[K], int, error) {
	k, n, err := c.kc.Decode(src)
	if err != nil {
		return paneKey[K]{}, 0, err
	}
	start, m := binary.Varint(src[n:])
	if m <= 0 {
		return paneKey[K]{}, 0, codec.ErrShort
	}
	return paneKey[K]{Key: k, Start: start}, n + m, nil
}

// pk is the current key's pane or session starting at start.
func (w *windowOp[K, In, Acc, Out]) pk(start int64) paneKey[K] {
	return paneKey[K]{Key: w.kctx.key, Start: start}
}

// listed is the records of the current key's pane or session at start, as
// the accumulator.
func (w *windowOp[K, In, Acc, Out]) listed(start int64) Acc {
	return any(slices.Collect(w.records.All(w.pk(start)))).(Acc)
}

func (w *windowOp[K, In, Acc, Out]) Open(oc *operator.Context) error {
	if err := w.open(oc, w.kc, w); err != nil {
		return err
	}
	if w.hasLate {
		w.late = w.c.sides[1].(Collector[In])
	}
	w.firedUpTo = operator.MinTime
	if w.a.processing && oc.Restore != nil {
		if err := w.restoreFired(oc.Restore); err != nil {
			return err
		}
	}
	// The window's accumulator and records, checked against the restored
	// ones (statetypes.go) before they are read.
	acc, in := typeOf(codec.For[Acc](), codec.For[Acc](), false), typeOf(codec.For[In](), codec.For[In](), false)
	err := w.types.declare(oc.UID, windowsTypeName, w.a.geometry())
	if err != nil {
		return err
	}
	if w.a.kind == sessions {
		err = w.types.declare(oc.UID, "sessions", "sessions of "+acc)
	} else {
		err = w.types.declare(oc.UID, "panes", "panes of "+acc)
	}
	if err == nil && w.fold.listing {
		err = w.types.declare(oc.UID, "records", "list of "+in)
	}
	if err != nil {
		return err
	}
	if w.a.kind == sessions {
		w.sessions, err = backend.NewMap(w.kctx.backend, "sessions", w.kc, codec.ForKey[int64](), codec.For[sessionState[Acc]]())
	} else {
		w.panes, err = backend.NewMap(w.kctx.backend, "panes", w.kc, codec.ForKey[int64](), codec.For[Acc]())
		w.copyAcc = codec.Copier(codec.For[Acc]())
	}
	if err == nil && w.fold.listing {
		w.records, err = backend.NewList(w.kctx.backend, "records", paneKeyCodec[K]{w.kc}, codec.For[In]())
	}
	if err == nil && !w.a.processing && !w.knobs.sharedCleanups {
		w.cleanups, err = backend.NewTimers(w.kctx.backend, "_window_cleanups", w.kc)
	}
	return err
}

// now is the time a record belongs to: its event time, or the clock.
func (w *windowOp[K, In, Acc, Out]) now() (int64, bool) {
	if w.a.processing {
		return w.kctx.op.Now().UnixMilli(), true
	}
	return w.c.now, w.c.now != operator.MinTime
}

// register asks for a timer at t, of the windows' time domain, that fires
// the window ending at t+1.
func (w *windowOp[K, In, Acc, Out]) register(t int64) {
	if w.a.processing {
		if w.kctx.c.clockAllowed(w.kctx.op.UID) {
			w.kctx.timers.Register(w.kctx.key, time.UnixMilli(t))
		}
	} else {
		w.kctx.eventTimers.Register(w.kctx.key, time.UnixMilli(t))
	}
}

// registerCleanup asks for a timer at t that cleans up the windows whose
// allowed lateness ends at t.
func (w *windowOp[K, In, Acc, Out]) registerCleanup(t int64) {
	if w.knobs.sharedCleanups {
		w.register(t)
		return
	}
	w.cleanups.Register(w.kctx.key, time.UnixMilli(t))
}

func (w *windowOp[K, In, Acc, Out]) Collect(v In) {
	if !w.setKey(w.key(v)) {
		return
	}
	ts, ok := w.now()
	if !ok {
		w.c.fail(operator.Permanent(fmt.Errorf("%s: a record has no event time; give the source weir.Watermarks, or use weir.AssignWatermarks", w.kctx.op.UID)))
		return
	}
	var err error
	if w.a.kind == sessions {
		err = w.addToSession(ts, v)
	} else {
		err = w.addToPane(ts, v)
	}
	if err != nil {
		w.c.fail(fmt.Errorf("%s: %w", w.kctx.op.UID, err))
	}
}

// isLate reports whether a window ending at end (exclusive) is past its
// allowed lateness: the watermark passed its last millisecond plus that.
func (w *windowOp[K, In, Acc, Out]) isLate(end int64) bool {
	return !w.a.processing && end-1+w.lateness <= w.kctx.wm
}

// nearTheLimits is the error of a record whose window would end (or
// begin) past the limits of event time: its end would wrap around.
func nearTheLimits(ts int64, size time.Duration) error {
	return operator.Permanent(fmt.Errorf("window: a record's event time %d ms is within %v of the limits of event time (int64 milliseconds since 1970), where its window cannot end: give records event times well within them", ts, size))
}

func floorTo(t, unit int64) int64 {
	q := t / unit
	if t%unit != 0 && t < 0 {
		q--
	}
	return q * unit
}

func (w *windowOp[K, In, Acc, Out]) addToPane(ts int64, v In) error {
	a := w.a
	if ts > math.MaxInt64-a.size || ts < math.MinInt64+a.size {
		return nearTheLimits(ts, a.sizeD)
	}
	lastStart := floorTo(ts, a.slide)
	if lastStart+a.size <= ts {
		// Between two windows of a slide longer than the size: in none.
		// Late only if the record itself is (as in Flink).
		if w.isLate(ts + 1) {
			return w.lateRecord(ts, v)
		}
		return nil
	}
	if w.isLate(lastStart + a.size) {
		return w.lateRecord(ts, v) // every window of the record is past
	}
	if a.processing {
		// A window whose timer has fired has no state left to add to, in
		// Flink: a record in its last millisecond, after it fired, starts
		// it afresh. Its panes are shared with later windows here, so it
		// fires at once with the record alone (for the windows that have
		// not fired, the record goes to its pane as any other).
		live := false
		for start := lastStart; start > ts-a.size; start -= a.slide {
			if end := start + a.size; end-1 > w.firedUpTo {
				live = true
			} else if err := w.emitWindow(start, end, w.alone(v)); err != nil {
				return err
			}
		}
		if !live {
			return nil
		}
	}
	pane := floorTo(ts, a.pane())
	acc, had := w.panes.Get(w.kctx.key, pane)
	switch {
	case w.fold.listing:
		w.records.Add(w.pk(pane), v)
		if !had {
			w.panes.Put(w.kctx.key, pane, acc) // the pane exists
		}
	case had:
		w.panes.Put(w.kctx.key, pane, w.fold.add(acc, v))
	default:
		w.panes.Put(w.kctx.key, pane, w.fold.first(v))
	}
	for start := lastStart; start > ts-a.size; start -= a.slide {
		end := start + a.size
		if w.isLate(end) || (a.processing && end-1 <= w.firedUpTo) {
			continue
		}
		if !had || w.behind() && !w.fired(end) && !w.knobs.keepSpentTimers {
			// A new pane: its windows need timers (an existing pane's have
			// them, unless a rescale restored a watermark less than the one
			// the window fired under: its timer is spent, and the window
			// must fire again).
			w.registerWindow(end)
		}
		if w.fired(end) {
			// Within the allowed lateness of a window that fired: fire it
			// again, updated, now (and only now: no timer fires it again).
			if err := w.firePanes(start, end, w.readPanes()); err != nil {
				return err
			}
		}
	}
	return nil
}

// alone is the accumulator of a window holding v only.
func (w *windowOp[K, In, Acc, Out]) alone(v In) Acc {
	if w.fold.listing {
		return any([]In{v}).(Acc)
	}
	return w.fold.first(v)
}

// Snapshot adds, for processing-time windows, the time up to which timers
// have fired, so that a restore knows which windows fired.
func (w *windowOp[K, In, Acc, Out]) Snapshot(id checkpoint.ID) (operator.Async, error) {
	a, err := w.keyed.Snapshot(id)
	if err != nil || !w.a.processing {
		return a, err
	}
	oc := w.kctx.op
	return both(a, nil)(oc.SnapshotList(state.Union, "_fired", [][]byte{binary.AppendVarint(nil, w.firedUpTo)}))
}

// restoreFired reads the time up to which timers had fired: the latest of
// every subtask's, as all follow one clock (a window a subtask had not
// fired yet then fires in two results rather than repeat what it had).
func (w *windowOp[K, In, Acc, Out]) restoreFired(rs *operator.Restore) error {
	oc := w.kctx.op
	items, err := state.RestoreList(rs.Handles, rs.Read, state.Union, "_fired", oc.Subtask, oc.Parallelism)
	if err != nil {
		return fmt.Errorf("restore the windows' fired time: %w", err)
	}
	for _, it := range items {
		t, n := binary.Varint(it)
		if n <= 0 {
			return fmt.Errorf("restore the windows' fired time: %w", codec.ErrShort)
		}
		w.firedUpTo = max(w.firedUpTo, t)
	}
	return nil
}

// FireTimers fires the processing-time timers due by now: every window
// that ended by now has fired.
func (w *windowOp[K, In, Acc, Out]) FireTimers(now time.Time) error {
	if err := w.keyed.FireTimers(now); err != nil {
		return err
	}
	w.firedUpTo = max(w.firedUpTo, now.UnixMilli())
	return nil
}

// fired reports whether the event-time window ending at end (exclusive)
// has fired: the watermark reached its last millisecond.
func (w *windowOp[K, In, Acc, Out]) fired(end int64) bool {
	return !w.a.processing && end-1 <= w.kctx.wm
}

// registerWindow asks for the timers of the window ending at end: one to
// fire it, unless it has fired (a record within the allowed lateness of a
// fired window fires it at once; a timer in the past would fire it again
// with the next watermark), and one to clean it up after the lateness.
func (w *windowOp[K, In, Acc, Out]) registerWindow(end int64) {
	if !w.fired(end) || w.knobs.registerFiredWindows {
		w.register(end - 1)
	}
	if w.lateness > 0 {
		w.registerCleanup(end - 1 + w.lateness)
	}
}

func (w *windowOp[K, In, Acc, Out]) addToSession(ts int64, v In) error {
	if ts > math.MaxInt64-w.a.gap {
		return nearTheLimits(ts, w.a.gD)
	}
	start, end := ts, ts+w.a.gap
	var acc Acc
	if !w.fold.listing {
		acc = w.fold.first(v)
	}
	merged := w.merged[:0]
	for s, sess := range w.sessions.All(w.kctx.key) {
		if s <= end && ts <= sess.End { // overlapping or touching: one session
			merged = append(merged, s)
			start, end = min(start, s), max(end, sess.End)
		}
	}
	if w.isLate(end) {
		return w.lateRecord(ts, v)
	}
	// Merge the sessions in the order of their starts, then add the
	// record: records stay in arrival order within a session.
	w.merged = merged
	ends := w.ends[:0]
	for i, s := range sortedInt64(merged) {
		sess, _ := w.sessions.Get(w.kctx.key, s)
		ends = append(ends, sess.End)
		switch {
		case w.fold.listing:
			if s != start { // the earliest session's records stay put
				for r := range w.records.All(w.pk(s)) {
					w.records.Add(w.pk(start), r)
				}
				w.records.Delete(w.pk(s))
			}
		case i == 0:
			acc = sess.Acc
		default:
			acc = w.fold.merge(acc, sess.Acc)
		}
		w.sessions.Remove(w.kctx.key, s)
	}
	switch {
	case w.fold.listing:
		w.records.Add(w.pk(start), v)
	case len(merged) > 0:
		acc = w.fold.add(acc, v)
	}
	w.sessions.Put(w.kctx.key, start, sessionState[Acc]{End: end, Acc: acc})
	w.unregister(ends)
	w.registerWindow(end)
	w.ends = ends
	if w.fired(end) {
		return w.emitSession(start, end, acc)
	}
	return nil
}

// emitSession emits the session [start, end) of the current key.
func (w *windowOp[K, In, Acc, Out]) emitSession(start, end int64, acc Acc) error {
	if w.fold.listing {
		acc = w.listed(start)
	}
	return w.emitWindow(start, end, acc)
}

// unregister deletes the timers of the current key's sessions that ended
// at ends and merged into another, except the instants a session of the
// key still needs, the merged one included. Timers are kept per key and
// instant, not per session, and a checkpoint taken before clean-ups were
// kept apart holds one session's clean-up where another's firing may be
// (a timer kept that no session needs of its kind does nothing).
func (w *windowOp[K, In, Acc, Out]) unregister(ends []int64) {
	fires, cleanups := w.kctx.eventTimers, w.cleanups
	if w.a.processing {
		fires = w.kctx.timers
	}
	if w.knobs.sharedCleanups {
		cleanups = fires
	}
	needed := func(t int64) bool {
		for _, sess := range w.sessions.All(w.kctx.key) {
			if sess.End-1 == t || w.lateness > 0 && sess.End-1+w.lateness == t {
				return true
			}
		}
		return false
	}
	for _, end := range ends {
		if !needed(end - 1) {
			fires.Delete(w.kctx.key, time.UnixMilli(end-1))
		}
		if w.lateness > 0 && !needed(end-1+w.lateness) {
			cleanups.Delete(w.kctx.key, time.UnixMilli(end-1+w.lateness))
		}
	}
}

func sortedInt64(xs []int64) []int64 {
	for i := 1; i < len(xs); i++ {
		for j := i; j > 0 && xs[j] < xs[j-1]; j-- {
			xs[j], xs[j-1] = xs[j-1], xs[j]
		}
	}
	return xs
}

// lateRecord handles a record too late for every window it belongs to.
func (w *windowOp[K, In, Acc, Out]) lateRecord(ts int64, v In) error {
	if w.late != nil {
		w.late.Collect(v)
		return nil
	}
	w.kctx.dropLate(ts)
	return nil
}

// OnTimer fires the window that ends at t+1, and cleans up those whose
// allowed lateness ended at t (a checkpoint taken before clean-ups were
// kept apart holds their timers here).
func (w *windowOp[K, In, Acc, Out]) OnTimer(_ *KeyedContext[K], at time.Time, _ Collector[Out]) error {
	return w.onTimer(at.UnixMilli(), true)
}

// AdvanceWatermark fires the timers due by wm, then the clean-ups: no
// window a clean-up removes is one a later firing reads.
func (w *windowOp[K, In, Acc, Out]) AdvanceWatermark(wm int64) error {
	if err := w.keyed.AdvanceWatermark(wm); err != nil || w.cleanups == nil {
		return err
	}
	return w.cleanups.FireUpTo(w.kctx.wm, func(key K, at time.Time) error {
		w.kctx.key = key
		return w.onTimer(at.UnixMilli(), false)
	})
}

// onTimer fires, if fire, the current key's window that ends at t+1, and
// cleans up those whose allowed lateness ended at t.
func (w *windowOp[K, In, Acc, Out]) onTimer(t int64, fire bool) error {
	if w.a.kind == sessions {
		for start, sess := range w.sessions.All(w.kctx.key) {
			if fire && sess.End-1 == t {
				if err := w.emitSession(start, sess.End, sess.Acc); err != nil {
					return err
				}
			}
			if sess.End-1+w.lateness == t {
				w.sessions.Remove(w.kctx.key, start)
				if w.fold.listing {
					w.records.Delete(w.pk(start))
				}
			}
		}
		return nil
	}
	// Windows start at multiples of the slide, so their ends are
	// multiples of the slide only when the size is one too.
	a := w.a
	endsWindow := func(end int64) bool {
		if w.knobs.endsAtSlideMultiples {
			return floorTo(end, a.slide) == end
		}
		return floorTo(end-a.size, a.slide) == end-a.size
	}
	fire = fire && endsWindow(t+1)
	drop := w.lateness > 0 && endsWindow(t+1-w.lateness)
	if !fire && !drop {
		return nil
	}
	panes := w.readPanes()
	if fire {
		if err := w.firePanes(t+1-a.size, t+1, panes); err != nil {
			return err
		}
		if w.lateness == 0 {
			w.dropPanes(t+1, panes)
		}
	}
	if drop {
		w.dropPanes(t+1-w.lateness, panes)
	}
	return nil
}

// readPanes reads the current key's panes, in one pass: a window asks for
// panes most of which are absent for a sparse key, and on Pebble every
// absent one asked for would be a lookup in the database.
func (w *windowOp[K, In, Acc, Out]) readPanes() []pane[Acc] {
	clear(w.keyPanes)
	w.keyPanes = w.keyPanes[:0]
	for p, pa := range w.panes.All(w.kctx.key) {
		w.keyPanes = append(w.keyPanes, pane[Acc]{p, pa})
	}
	return w.keyPanes
}

// firePanes emits the window [start, end) from the key's panes (as
// readPanes read them), if it has any.
func (w *windowOp[K, In, Acc, Out]) firePanes(start, end int64, panes []pane[Acc]) error {
	w.firing = w.firing[:0]
	for _, pa := range panes {
		if start <= pa.start && pa.start < end {
			w.firing = append(w.firing, pa)
		}
	}
	if len(w.firing) == 0 {
		return nil
	}
	slices.SortFunc(w.firing, func(a, b pane[Acc]) int { return cmp.Compare(a.start, b.start) })
	var acc Acc
	var records []In // when listing
	for i, pa := range w.firing {
		switch {
		case w.fold.listing:
			records = slices.AppendSeq(records, w.records.All(w.pk(pa.start)))
		case i > 0 && w.copyAcc != nil:
			// NB: merge may change either argument, as Flink's may; the
			// panes are later windows' too.
			if i == 1 {
				acc = w.copyAcc(acc)
			}
			acc = w.fold.merge(acc, w.copyAcc(pa.acc))
		case i > 0:
			acc = w.fold.merge(acc, pa.acc)
		default:
			acc = pa.acc
		}
	}
	clear(w.firing) // the accumulators are the window's now
	if w.fold.listing {
		acc = any(records).(Acc)
	}
	return w.emitWindow(start, end, acc)
}

func (w *windowOp[K, In, Acc, Out]) emitWindow(start, end int64, acc Acc) error {
	saved := w.c.now
	w.c.now = end - 1
	err := w.emit(w.kctx.key, timeWindow(start, end), acc, w.out)
	w.c.now = saved
	if err != nil {
		return err
	}
	return w.c.err
}

// dropPanes removes the panes no window after the one ending at end
// needs.
func (w *windowOp[K, In, Acc, Out]) dropPanes(end int64, panes []pane[Acc]) {
	limit := end + w.a.slide - w.a.size
	for _, pa := range panes {
		if pa.start < limit {
			w.panes.Remove(w.kctx.key, pa.start)
			if w.fold.listing {
				w.records.Delete(w.pk(pa.start))
			}
		}
	}
}
