package weir

import (
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/cacheline"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state"
)

// WatermarkStrategy says where a stream's event time comes from, and how
// far the watermark trails it: the watermark promises that no record at or
// before it will come any more, so event-time windows and timers up to it
// can fire.
type WatermarkStrategy[T any] struct {
	// Timestamp is a record's event time (millisecond precision).
	// Required.
	Timestamp func(T) time.Time
	// Watermark maps the greatest event time a split has seen to its
	// watermark. Default: a millisecond before it (Monotonous).
	Watermark func(max time.Time) time.Time
	// IdleTimeout lets a split that has had no record for this long stop
	// holding the watermark back, until its next record. Default 0: never.
	IdleTimeout time.Duration
	// outOfOrderness is BoundedOutOfOrderness's bound, which check
	// refuses below 0.
	outOfOrderness time.Duration
}

// BoundedOutOfOrderness expects records at most d behind the greatest
// event time seen: the watermark is that time minus d (and a millisecond,
// as in Flink). d may be as long as a Duration holds.
func BoundedOutOfOrderness[T any](d time.Duration, timestamp func(T) time.Time) WatermarkStrategy[T] {
	return WatermarkStrategy[T]{Timestamp: timestamp, outOfOrderness: d,
		Watermark: func(max time.Time) time.Time { return max.Add(-d).Add(-time.Millisecond) }}
}

// Monotonous expects event times that never decrease.
func Monotonous[T any](timestamp func(T) time.Time) WatermarkStrategy[T] {
	return BoundedOutOfOrderness(0, timestamp)
}

// WithIdleness returns s with an idle timeout.
func (s WatermarkStrategy[T]) WithIdleness(d time.Duration) WatermarkStrategy[T] {
	s.IdleTimeout = d
	return s
}

func (s WatermarkStrategy[T]) check() error {
	switch {
	case s.Timestamp == nil:
		return fmt.Errorf("watermark strategy: Timestamp is required")
	case s.IdleTimeout < 0:
		return fmt.Errorf("watermark strategy: idle timeout %v is negative", s.IdleTimeout)
	case s.outOfOrderness < 0:
		return fmt.Errorf("watermark strategy: the out-of-orderness bound %v is negative: it is how far records may come behind the greatest event time seen, so give 0 or more", s.outOfOrderness)
	}
	return nil
}

// watermarkOf maps a split's greatest event time to its watermark.
func (s WatermarkStrategy[T]) watermarkOf() func(int64) int64 {
	if s.Watermark == nil {
		return func(max int64) int64 { return max - 1 }
	}
	return func(max int64) int64 { return s.Watermark(time.UnixMilli(max)).UnixMilli() }
}

// Watermarks gives a Source event time: its records' timestamps and
// watermarks per split (see EnterSplit), the least of which the source
// emits.
func Watermarks[T any](s WatermarkStrategy[T]) Option {
	return func(n *node) { n.watermarks = s }
}

// EnterSplit tells a source with event time (Watermarks) that the records
// Read emits next come from split id: each split's watermark is tracked on
// its own, and the source's is the least of them. Readers that do not call
// it read one split. It is safe to call on any collector.
func EnterSplit[T any](out Collector[T], id string) {
	if s, ok := out.(splitter); ok {
		s.enterSplit(id)
	}
}

// FinishSplit tells a source with event time that split id emits no more
// records: it no longer holds the watermark back.
func FinishSplit[T any](out Collector[T], id string) {
	if s, ok := out.(splitter); ok {
		s.finishSplit(id)
	}
}

type splitter interface {
	enterSplit(id string)
	finishSplit(id string)
}

// clock tracks the event time of a source's (or an assigner's) splits.
type clock struct {
	watermarkOf func(int64) int64
	idleTimeout time.Duration
	now         func() time.Time
	opened      time.Time
	splits      map[string]*splitTime
	cur         *splitTime
	touched     []*splitTime
	// restored holds the greatest event times a checkpoint recorded.
	restored map[string]int64
	// self is the split of records read outside any EnterSplit: one per
	// subtask and parallelism.
	self string
	// unreadUnwritten puts back a defect for the clock generator to find
	// (clock_gen_test.go): a subtask without event time writes none, so a
	// restore at its parallelism takes the least of the others' for its.
	unreadUnwritten bool
}

type splitTime struct {
	max      int64
	seen     time.Time
	touched  bool
	finished bool
}

// newClock makes a clock for open to start.
func newClock(watermarkOf func(int64) int64, idle time.Duration) *clock {
	return cacheline.New(clock{watermarkOf: watermarkOf, idleTimeout: idle, splits: map[string]*splitTime{}, restored: map[string]int64{}})
}

func (c *clock) enterSplit(id string) {
	s := c.splits[id]
	if s == nil {
		s = cacheline.New(splitTime{max: operator.MinTime, seen: c.now()}) // written for every record
		if m, ok := c.restored[id]; ok {
			s.max = m
		}
		c.splits[id] = s
	}
	s.finished = false
	c.cur = s
}

func (c *clock) finishSplit(id string) {
	if s := c.splits[id]; s != nil {
		s.finished = true
	}
}

// observe records a record's event time in the current split.
func (c *clock) observe(ms int64) {
	if c.cur == nil {
		c.enterSplit(c.self)
	}
	s := c.cur
	if ms > s.max {
		s.max = ms
	}
	if !s.touched {
		s.touched = true
		c.touched = append(c.touched, s)
	}
}

// Watermark is the least watermark of the splits that are neither finished
// nor idle; idle when there is none such.
func (c *clock) Watermark() (int64, bool) {
	now := c.now()
	for _, s := range c.touched {
		s.seen, s.touched = now, false
	}
	c.touched = c.touched[:0]
	wm, active := operator.MaxTime, false
	for _, s := range c.splits {
		if s.finished || (c.idleTimeout > 0 && now.Sub(s.seen) > c.idleTimeout) {
			continue
		}
		active = true
		if s.max == operator.MinTime {
			wm = operator.MinTime
		} else {
			wm = min(wm, c.watermarkOf(s.max))
		}
	}
	if !active {
		if len(c.splits) == 0 && !(c.idleTimeout > 0 && now.Sub(c.opened) > c.idleTimeout) {
			return operator.MinTime, false // nothing read yet
		}
		return operator.MinTime, true
	}
	return wm, false
}

// snapshot returns the asynchronous part that writes the splits' greatest
// event times, so that a restored source's watermark resumes where it was.
//
// The subtask's own split is written even when it has no event time (at
// the least time): a restore at this parallelism must not take another
// subtask's event time for its own, and a restore at another must take
// the least of the old subtasks' as the least time (see open). Before, a
// subtask that had read nothing by a checkpoint was restored with the
// least of the others' event times, and its records, on time, were late.
func (c *clock) snapshot(oc *operator.Context) operator.Async {
	var items [][]byte
	add := func(id string, max int64) {
		items = append(items, binary.AppendVarint(codec.AppendBytes(nil, []byte(id)), max))
	}
	for id, s := range c.splits {
		if s.max != operator.MinTime || id == c.self && !c.unreadUnwritten {
			add(id, s.max)
		}
	}
	if _, entered := c.splits[c.self]; !entered && !c.unreadUnwritten {
		m, restored := c.restored[c.self]
		if !restored {
			m = operator.MinTime
		}
		add(c.self, m)
	}
	return oc.SnapshotList(state.Union, "_event_time", items)
}

// open starts the clock of subtask oc, restored if oc restores.
func (c *clock) open(oc *operator.Context) error {
	c.now, c.opened = oc.Now, oc.Now()
	c.self = fmt.Sprintf("%s%d/%d", subtaskSplit, oc.Subtask, oc.Parallelism)
	if oc.Restore == nil {
		return nil
	}
	items, err := state.RestoreList(oc.Restore.Handles, oc.Restore.Read, state.Union, "_event_time", oc.Subtask, oc.Parallelism)
	if err != nil {
		return err
	}
	least, subtasks := operator.MaxTime, false
	for _, it := range items {
		b, n, err := codec.ReadBytes(it)
		if err != nil {
			return fmt.Errorf("restore event time: %w", err)
		}
		m, k := binary.Varint(it[n:])
		if k <= 0 {
			return fmt.Errorf("restore event time: %w", codec.ErrShort)
		}
		id := string(b)
		if strings.HasPrefix(id, subtaskSplit) {
			subtasks, least = true, min(least, m)
		}
		if old, ok := c.restored[id]; !ok || m > old {
			c.restored[id] = m
		}
	}
	if _, ok := c.restored[c.self]; subtasks && !ok {
		// The parallelism changed: the least of the old subtasks' event
		// times makes nothing on time late (the least time if one had
		// none). NB: a checkpoint of an earlier version wrote nothing for
		// a subtask without event time, which this takes for a change.
		c.restored[c.self] = least
	}
	return nil
}

// subtaskSplit prefixes the split id of records outside any EnterSplit.
const subtaskSplit = "\x00subtask "

// timedSource is a source with event time: it stamps records and makes
// watermarks per split.
type timedSource[T any] struct {
	*sourceOp[T]
	clock *clock
}

// timeCollector stamps records with their event time on their way out of
// a source's reader.
type timeCollector[T any] struct {
	next      Collector[T]
	timestamp func(T) time.Time
	c         *chain
	clock     *clock
}

func (t *timeCollector[T]) Collect(v T) {
	ms := t.timestamp(v).UnixMilli()
	t.c.now = ms
	t.clock.observe(ms)
	t.next.Collect(v)
}

func (t *timeCollector[T]) enterSplit(id string)  { t.clock.enterSplit(id) }
func (t *timeCollector[T]) finishSplit(id string) { t.clock.finishSplit(id) }

func (s *timedSource[T]) Open(ctx *operator.Context) error {
	if err := s.clock.open(ctx); err != nil {
		return err
	}
	s.oc = ctx
	return s.sourceOp.Open(ctx)
}

func (s *timedSource[T]) Watermark() (int64, bool) { return s.clock.Watermark() }

func (s *timedSource[T]) Snapshot(id checkpoint.ID) (operator.Async, error) {
	return both(s.sourceOp.Snapshot(id))(s.clock.snapshot(s.oc))
}

// both returns an Async writing what a and b write; a may be nil.
func both(a operator.Async, err error) func(b operator.Async) (operator.Async, error) {
	return func(b operator.Async) (operator.Async, error) {
		if err != nil || a == nil {
			return b, err
		}
		return func(w operator.Writer) ([]checkpoint.Handle, error) {
			ha, err := a(w)
			if err != nil {
				return nil, err
			}
			hb, err := b(w)
			return append(ha, hb...), err
		}, nil
	}
}

// AssignWatermarks gives s event time, as the Watermarks option gives a
// source: its records are stamped and watermarks made from them (as one
// split). Event time that s had is replaced. The operator heads a task of
// its own.
func AssignWatermarks[T any](s *Stream[T], name string, strategy WatermarkStrategy[T], opts ...Option) *Stream[T] {
	if err := strategy.check(); err != nil {
		s.environment().fail(fmt.Errorf("operator %q: %w", name, err))
	}
	n := &node{}
	n.instance = func(c *chain, next any) (operator.Operator, any) {
		op := cacheline.New(assigner[T]{out: next.(Collector[T]), c: c, timestamp: strategy.Timestamp,
			clock: newClock(strategy.watermarkOf(), strategy.IdleTimeout)})
		return op, Collector[T](op)
	}
	n.head = headOf[T](n)
	out := addOp[T](s.environment(), name, kindAssigner, strategy.Timestamp, append(opts, NoChain()), n, s)
	n.timed, n.idleTimeout = true, strategy.IdleTimeout
	return out
}

type assigner[T any] struct {
	operator.Base
	out       Collector[T]
	c         *chain
	timestamp func(T) time.Time
	clock     *clock
	oc        *operator.Context
}

func (a *assigner[T]) Open(ctx *operator.Context) error {
	a.oc = ctx
	return a.clock.open(ctx)
}

func (a *assigner[T]) Collect(v T) {
	ms := a.timestamp(v).UnixMilli()
	a.c.now = ms
	a.clock.observe(ms)
	a.out.Collect(v)
}

func (a *assigner[T]) Watermark() (int64, bool) { return a.clock.Watermark() }

func (a *assigner[T]) Snapshot(checkpoint.ID) (operator.Async, error) {
	return a.clock.snapshot(a.oc), nil
}

// snapshotWatermark writes an operator's watermark wm, so that after a
// restore nothing that was late becomes on time, and nothing on time late;
// and fired, the greatest watermark its state's windows may have fired
// under (at least wm: more after a rescale took a lesser one). After the
// input ended (ended, and the end moved wm to MaxTime), beforeEnd is the
// watermark the input had brought it to: a restore resumes from it, since
// MaxTime then says the input ended, not where event time is, and a job
// resumed with more input (a file added, a bounded topic written to) would
// take every record of it for late, and fire no timer it sets (as Flink,
// which restores no watermark, does not). A watermark of MaxTime before
// the end (a strategy's) is restored as it is.
func snapshotWatermark(oc *operator.Context, wm, fired, beforeEnd int64, ended bool) operator.Async {
	item := binary.AppendVarint(binary.AppendUvarint(binary.AppendUvarint(nil, uint64(oc.Subtask)), uint64(oc.Parallelism)), wm)
	item = binary.AppendVarint(item, max(wm, fired))
	if ended && wm == operator.MaxTime {
		item = binary.AppendVarint(item, beforeEnd)
	}
	return oc.SnapshotList(state.Union, "_watermark", [][]byte{item})
}

// restoreWatermarks is the watermark a keyed operator resumes with, and
// the greatest watermark the restored state's windows may have fired
// under: this subtask's when the parallelism is the same, else the least
// and the greatest of all (a checkpoint of an earlier version records no
// fired: the watermark is taken). When it is greater than the watermark, a
// window that fired may look unfired. A subtask whose input had ended
// resumes from the watermark it had before (snapshotWatermark); its state
// holds no window, as every one fired and was cleaned up at the end, under
// MaxTime: what its checkpoints record as fired from then on, which tells
// weir verify that no rerun can reproduce them (watermarkCap).
func restoreWatermarks(rs *operator.Restore, oc *operator.Context) (wm, fired int64, err error) {
	w, err := readWatermarks(rs, oc)
	return w.resume.wm, w.resume.fired, err
}

// watermarks are an operator's watermark and the greatest it may have
// fired windows under.
type watermarks struct{ wm, fired int64 }

// restoredWatermarks is what a checkpoint recorded of an operator's
// watermarks (snapshotWatermark), as it was (at, what a verification rerun
// is capped at) and as a restore resumes (before the end of the input,
// when it had ended).
type restoredWatermarks struct{ at, resume watermarks }

func readWatermarks(rs *operator.Restore, oc *operator.Context) (restoredWatermarks, error) {
	none := watermarks{operator.MinTime, operator.MinTime}
	items, err := state.RestoreList(rs.Handles, rs.Read, state.Union, "_watermark", oc.Subtask, oc.Parallelism)
	if err != nil || len(items) == 0 {
		return restoredWatermarks{none, none}, err
	}
	short := func() (restoredWatermarks, error) {
		return restoredWatermarks{none, none}, fmt.Errorf("restore watermark: %w", codec.ErrShort)
	}
	least := watermarks{operator.MaxTime, operator.MinTime}
	all := restoredWatermarks{least, least}
	for _, it := range items {
		sub, n1 := binary.Uvarint(it)
		p, n2 := binary.Uvarint(it[max(n1, 0):])
		if n1 <= 0 || n2 <= 0 {
			return short()
		}
		var vals []int64 // wm, fired, and after the end the watermark before it
		for rest := it[n1+n2:]; len(rest) > 0; {
			v, k := binary.Varint(rest)
			if k <= 0 || len(vals) == 3 {
				return short()
			}
			vals, rest = append(vals, v), rest[k:]
		}
		if len(vals) == 0 {
			return short()
		}
		at := watermarks{vals[0], vals[0]}
		if len(vals) > 1 {
			at.fired = max(vals[1], at.wm)
		}
		w := restoredWatermarks{at, at}
		if len(vals) > 2 {
			w.resume = watermarks{vals[2], operator.MaxTime}
		}
		if int(p) == oc.Parallelism && int(sub) == oc.Subtask {
			return w, nil
		}
		all.at = watermarks{min(all.at.wm, w.at.wm), max(all.at.fired, w.at.fired)}
		all.resume = watermarks{min(all.resume.wm, w.resume.wm), max(all.resume.fired, w.resume.fired)}
	}
	return all, nil
}
