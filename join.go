package weir

import (
	"fmt"
	"math"
	"time"
)

// WindowCoGroup calls f with the records of both streams that fall into
// each key's window (tumbling or sliding, on event time), when the window
// closes. Records are kept in state until then; late ones are dropped.
func WindowCoGroup[K comparable, A, B, Out any](a KeyedStream[K, A], b KeyedStream[K, B], windows WindowAssigner, name string,
	f func(key K, w TimeWindow, as []A, bs []B, out Collector[Out]) error, opts ...Option) *Stream[Out] {
	env := a.environment()
	if err := windows.check(); err != nil {
		env.fail(fmt.Errorf("operator %q: %w", name, err))
	} else if windows.kind == sessions || windows.processing {
		env.fail(fmt.Errorf("operator %q: co-group and join windows must be tumbling or sliding, on event time", name))
	}
	if f == nil {
		env.fail(fmt.Errorf("operator %q: its function is nil", name))
	}
	s := keyedCoProcess(a, b, name, kindWindowJoin, func() KeyedCoProcessFunction[K, A, B, Out] {
		return &coGroup[K, A, B, Out]{w: windows, f: f}
	}, opts)
	needEventTime(s, "window joins need", "")
	return s
}

// WindowJoin emits f(a, b) for every pair of records of the two streams
// with the same key in the same window.
func WindowJoin[K comparable, A, B, Out any](a KeyedStream[K, A], b KeyedStream[K, B], windows WindowAssigner, name string,
	f func(A, B) Out, opts ...Option) *Stream[Out] {
	if f == nil {
		a.environment().fail(fmt.Errorf("operator %q: its function is nil", name))
	}
	return WindowCoGroup(a, b, windows, name, func(_ K, _ TimeWindow, as []A, bs []B, out Collector[Out]) error {
		for _, x := range as {
			for _, y := range bs {
				out.Collect(f(x, y))
			}
		}
		return nil
	}, opts...)
}

type coGroup[K comparable, A, B, Out any] struct {
	w     WindowAssigner
	f     func(K, TimeWindow, []A, []B, Collector[Out]) error
	as    *MapState[K, int64, []A]
	bs    *MapState[K, int64, []B]
	knobs joinKnobs
}

// joinKnobs put back defects, for tests that show the join generator
// (join_gen_test.go) would find them. All false in every job.
type joinKnobs struct {
	// lateAfterEnd: a window join takes a record for a window whose last
	// millisecond the watermark reached (it fired already).
	lateAfterEnd bool
	// takeAtWatermark: an interval join takes a record at the watermark,
	// after the other side's records it would match may have gone.
	takeAtWatermark bool
}

func (g *coGroup[K, A, B, Out]) Open(c *KeyedContext[K]) (err error) {
	if g.as, err = NewMapState[K, int64, []A](c, "left"); err != nil {
		return err
	}
	g.bs, err = NewMapState[K, int64, []B](c, "right")
	return err
}

// windowsOf calls add with the start of every window of the current
// record that is not late, after registering its timer; a record late for
// all its windows is dropped and counted.
func windowsOf[K comparable](c *KeyedContext[K], w WindowAssigner, knobs joinKnobs, add func(start int64)) {
	ts := c.c.now
	last := floorTo(ts, w.slide)
	if last+w.size <= ts && ts > c.wm {
		return // between two windows of a slide longer than the size: in none
	}
	if last+w.size-1 <= c.wm {
		c.dropLate(ts)
		return
	}
	for start := last; start > ts-w.size; start -= w.slide {
		end := start + w.size
		if end-1 <= c.wm && (!knobs.lateAfterEnd || end <= c.wm) {
			break // late for this window and the earlier ones
		}
		c.RegisterEventTimer(time.UnixMilli(end - 1))
		add(start)
	}
}

func (g *coGroup[K, A, B, Out]) Process1(c *KeyedContext[K], v A, _ Collector[Out]) error {
	windowsOf(c, g.w, g.knobs, func(start int64) {
		l, _ := g.as.Get(start)
		g.as.Put(start, append(l, v))
	})
	return nil
}

func (g *coGroup[K, A, B, Out]) Process2(c *KeyedContext[K], v B, _ Collector[Out]) error {
	windowsOf(c, g.w, g.knobs, func(start int64) {
		l, _ := g.bs.Get(start)
		g.bs.Put(start, append(l, v))
	})
	return nil
}

func (g *coGroup[K, A, B, Out]) OnTimer(c *KeyedContext[K], at time.Time, out Collector[Out]) error {
	start := at.UnixMilli() + 1 - g.w.size
	as, _ := g.as.Get(start)
	bs, _ := g.bs.Get(start)
	g.as.Remove(start)
	g.bs.Remove(start)
	if len(as) == 0 && len(bs) == 0 {
		return nil
	}
	return g.f(c.Key(), timeWindow(start, start+g.w.size), as, bs, out)
}

// IntervalJoin emits f(a, b) for every pair with the same key whose event
// times satisfy a + lower ≤ b ≤ a + upper; the result has the later of the
// two event times. Each side is kept in state only as long as the
// watermark allows a match; records behind the watermark are dropped.
func IntervalJoin[K comparable, A, B, Out any](a KeyedStream[K, A], b KeyedStream[K, B], lower, upper time.Duration, name string,
	f func(A, B) Out, opts ...Option) *Stream[Out] {
	if lower > upper {
		a.environment().fail(fmt.Errorf("operator %q: interval join lower bound %v is above its upper bound %v", name, lower, upper))
	}
	if lower%time.Millisecond != 0 && lower != math.MinInt64 || upper%time.Millisecond != 0 && upper != math.MaxInt64 {
		a.environment().fail(fmt.Errorf("operator %q: interval join bounds %v and %v must be whole milliseconds (event time is in milliseconds)", name, lower, upper))
	}
	if f == nil {
		a.environment().fail(fmt.Errorf("operator %q: its function is nil", name))
	}
	s := keyedCoProcess(a, b, name, kindIntervalJoin, func() KeyedCoProcessFunction[K, A, B, Out] {
		return &intervalJoin[K, A, B, Out]{lower: lower.Milliseconds(), upper: upper.Milliseconds(), f: f}
	}, opts)
	needEventTime(s, "interval joins need", "")
	return s
}

type intervalJoin[K comparable, A, B, Out any] struct {
	lower, upper int64
	f            func(A, B) Out
	as           *MapState[K, int64, []A]
	bs           *MapState[K, int64, []B]
	knobs        joinKnobs
}

func (j *intervalJoin[K, A, B, Out]) Open(c *KeyedContext[K]) (err error) {
	if j.as, err = NewMapState[K, int64, []A](c, "left"); err != nil {
		return err
	}
	j.bs, err = NewMapState[K, int64, []B](c, "right")
	return err
}

func (j *intervalJoin[K, A, B, Out]) Process1(c *KeyedContext[K], v A, out Collector[Out]) error {
	// a matches the b in [a+lower, a+upper]; none can match it after
	// a+upper.
	interval(c, v, j.as, j.bs, j.lower, j.upper, j.upper, j.knobs, func(b B) { out.Collect(j.f(v, b)) })
	return nil
}

func (j *intervalJoin[K, A, B, Out]) Process2(c *KeyedContext[K], v B, out Collector[Out]) error {
	// b matches the a in [b−upper, b−lower]; none can match it after
	// b−lower.
	interval(c, v, j.bs, j.as, -j.upper, -j.lower, -j.lower, j.knobs, func(a A) { out.Collect(j.f(a, v)) })
	return nil
}

// interval handles a record v of one side of an interval join, at the
// current event time t: unless it is late, it is paired (by pair, at the
// later of the two times) with the other side's records in [t+lo, t+hi],
// and kept until the watermark passes t+keep.
func interval[K comparable, V, W any](c *KeyedContext[K], v V, mine *MapState[K, int64, []V], other *MapState[K, int64, []W], lo, hi, keep int64, knobs joinKnobs, pair func(W)) {
	t := c.c.now
	if t <= c.wm && (!knobs.takeAtWatermark || t < c.wm) {
		c.dropLate(t)
		return
	}
	for to, ws := range other.All() {
		if t+lo <= to && to <= t+hi {
			c.c.now = max(t, to)
			for _, w := range ws {
				pair(w)
			}
		}
	}
	c.c.now = t
	l, _ := mine.Get(t)
	mine.Put(t, append(l, v))
	c.RegisterEventTimer(time.UnixMilli(t + keep))
}

// OnTimer drops the records whose last chance to match has passed: a
// timer at t was registered by an a at t−upper or a b at t+lower (see
// Process1 and Process2), and every older record's timer fired before it,
// so those two entries are all there is to remove, as Flink does.
func (j *intervalJoin[K, A, B, Out]) OnTimer(c *KeyedContext[K], at time.Time, _ Collector[Out]) error {
	t := at.UnixMilli()
	j.as.Remove(t - j.upper)
	j.bs.Remove(t + j.lower)
	return nil
}

// JoinConfig configures Join.
type JoinConfig struct {
	// TTL bounds how long each record is kept for matching, in processing
	// time since it arrived (Flink's state time-to-live). Default 0:
	// forever, and the state grows with the input.
	TTL time.Duration
}

// Join emits f(a, b) for every pair of records of the two streams with the
// same key, whenever the second of the two arrives: the regular,
// unbounded join. Its state holds every record for cfg.TTL.
func Join[K comparable, A, B, Out any](a KeyedStream[K, A], b KeyedStream[K, B], name string, f func(A, B) Out, cfg JoinConfig, opts ...Option) *Stream[Out] {
	if f == nil {
		a.environment().fail(fmt.Errorf("operator %q: its function is nil", name))
	}
	if cfg.TTL < 0 || cfg.TTL%time.Millisecond != 0 {
		a.environment().fail(fmt.Errorf("operator %q: TTL %v must be whole milliseconds, not negative (0: forever)", name, cfg.TTL))
	}
	return keyedCoProcess(a, b, name, kindJoin, func() KeyedCoProcessFunction[K, A, B, Out] {
		return &regularJoin[K, A, B, Out]{ttl: cfg.TTL.Milliseconds(), f: f}
	}, opts)
}

// Kept is a record a join keeps, with the processing time it arrived.
type Kept[T any] struct {
	At int64
	V  T
}

type regularJoin[K comparable, A, B, Out any] struct {
	ttl int64
	f   func(A, B) Out
	as  *ListState[K, Kept[A]]
	bs  *ListState[K, Kept[B]]
}

func (j *regularJoin[K, A, B, Out]) Open(c *KeyedContext[K]) (err error) {
	if j.as, err = NewListState[K, Kept[A]](c, "left"); err != nil {
		return err
	}
	j.bs, err = NewListState[K, Kept[B]](c, "right")
	return err
}

// ttlGrain rounds expiry times up, so that a key has few timers.
const ttlGrain = 1000

func (j *regularJoin[K, A, B, Out]) expireAt(c *KeyedContext[K], now int64) {
	if j.ttl > 0 {
		c.RegisterTimer(time.UnixMilli(floorTo(now+j.ttl+ttlGrain-1, ttlGrain)))
	}
}

// live reports whether a record kept since at is within the TTL at now:
// one past it is not matched, though its timer (rounded up to ttlGrain)
// has not dropped it yet (as Flink's state TTL never returns an expired
// value).
func (j *regularJoin[K, A, B, Out]) live(at, now int64) bool { return j.ttl == 0 || at > now-j.ttl }

func (j *regularJoin[K, A, B, Out]) Process1(c *KeyedContext[K], v A, out Collector[Out]) error {
	now := c.Now().UnixMilli()
	for _, b := range j.bs.Get() {
		if j.live(b.At, now) {
			out.Collect(j.f(v, b.V))
		}
	}
	j.as.Add(Kept[A]{At: now, V: v})
	j.expireAt(c, now)
	return nil
}

func (j *regularJoin[K, A, B, Out]) Process2(c *KeyedContext[K], v B, out Collector[Out]) error {
	now := c.Now().UnixMilli()
	for _, a := range j.as.Get() {
		if j.live(a.At, now) {
			out.Collect(j.f(a.V, v))
		}
	}
	j.bs.Add(Kept[B]{At: now, V: v})
	j.expireAt(c, now)
	return nil
}

// OnTimer drops what outlived the TTL.
func (j *regularJoin[K, A, B, Out]) OnTimer(c *KeyedContext[K], at time.Time, _ Collector[Out]) error {
	limit := at.UnixMilli() - j.ttl
	j.as.Update(keepAfter(j.as.Get(), limit))
	j.bs.Update(keepAfter(j.bs.Get(), limit))
	return nil
}

func keepAfter[T any](l []Kept[T], limit int64) []Kept[T] {
	var keep []Kept[T]
	for _, k := range l {
		if k.At > limit {
			keep = append(keep, k)
		}
	}
	return keep
}
