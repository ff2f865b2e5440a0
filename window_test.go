package weir

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

type rec struct {
	Key string
	V   int64
}

type sum struct{}

func (sum) Zero() int64                { return 0 }
func (sum) Add(acc int64, r rec) int64 { return acc + r.V }
func (sum) Merge(a, b int64) int64     { return a + b }
func (sum) Result(acc int64) int64     { return acc }

// lines collects what an operator emits, with event times.
type lines struct {
	c   *chain
	out []string
}

func (l *lines) Collect(v any) { l.out = append(l.out, fmt.Sprintf("%v @%d", v, l.c.now)) }

type collectOf[T any] struct{ l *lines }

func (c collectOf[T]) Collect(v T) { c.l.Collect(v) }

// snapshots takes an operator's checkpoints and restores the last, as a
// script says.
type snapshots struct {
	w       operatortest.MemWriter
	handles []checkpoint.Handle
	id      checkpoint.ID
}

func (s *snapshots) take(t *testing.T, op operator.Operator) {
	t.Helper()
	s.id++
	async, err := op.Snapshot(s.id)
	if err != nil {
		t.Fatal(err)
	}
	if s.handles, err = async(&s.w); err != nil {
		t.Fatal(err)
	}
}

func (s *snapshots) last() *operator.Restore {
	return &operator.Restore{Checkpoint: s.id, Handles: s.handles, Read: s.w.Read}
}

// output prints what a script step emitted, and forgets it.
func output(out, late *lines) string {
	var b strings.Builder
	for _, l := range out.out {
		fmt.Fprintln(&b, l)
	}
	if late != nil {
		for _, l := range late.out {
			fmt.Fprintln(&b, "late:", l)
		}
		late.out = nil
	}
	out.out = nil
	if b.Len() == 0 {
		return "(nothing)\n"
	}
	return b.String()
}

// windowHarness runs one window operator subtask by hand: records with
// event times, watermarks, snapshots and restores.
type windowHarness struct {
	c       *chain
	out     *lines
	late    *lines
	op      operator.Operator
	in      Collector[rec]
	et      operator.EventTimed
	build   func(r *operator.Restore)
	dropped atomic.Int64 // records dropped as late
	clock   int64        // processing time, ms
	snapshots
}

func newWindowHarness(t *testing.T, d *datadriven.TestData) *windowHarness {
	var kind string
	var size, slide, gap, lateness int
	d.ScanArgs(t, "kind", &kind)
	d.MaybeScanArgs(t, "size", &size)
	d.MaybeScanArgs(t, "slide", &slide)
	d.MaybeScanArgs(t, "gap", &gap)
	d.MaybeScanArgs(t, "lateness", &lateness)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	var a WindowAssigner
	switch kind {
	case "tumbling":
		a = Tumbling(ms(size))
	case "sliding":
		a = Sliding(ms(size), ms(slide))
	case "session":
		a = Session(ms(gap))
	}
	if d.HasArg("processing") {
		a = a.ProcessingTime()
	}
	if err := a.check(); err != nil {
		t.Fatal(err)
	}
	h := &windowHarness{}
	process, lateOutput := d.HasArg("process"), d.HasArg("late-output")
	h.build = func(r *operator.Restore) {
		h.c = &chain{now: operator.MinTime, group: -1}
		h.out, h.late = &lines{c: h.c}, &lines{c: h.c}
		h.c.sides = map[int]any{1: Collector[rec](collectOf[rec]{h.late})}
		key := func(r rec) string { return r.Key }
		if process {
			f := func(k string, w TimeWindow, in []rec, out Collector[string]) error {
				var vs []string
				for _, r := range in {
					vs = append(vs, fmt.Sprint(r.V))
				}
				out.Collect(fmt.Sprintf("%s [%d,%d) %s", k, w.Start.UnixMilli(), w.End.UnixMilli(), strings.Join(vs, ",")))
				return nil
			}
			fold := windowFold[rec, []rec]{listing: true} // as WindowProcess
			op := &windowOp[string, rec, []rec, string]{key: key, kc: codec.For[string](), a: a, lateness: int64(lateness), fold: fold,
				emit: func(k string, w TimeWindow, acc []rec, out Collector[string]) error { return f(k, w, acc, out) }, hasLate: lateOutput}
			op.out, op.c, op.lateCount = collectOf[string]{h.out}, h.c, &h.dropped
			h.op, h.in, h.et = op, op, op
		} else {
			agg := sum{}
			fold := windowFold[rec, int64]{first: func(v rec) int64 { return v.V }, add: agg.Add, merge: agg.Merge}
			op := &windowOp[string, rec, int64, string]{key: key, kc: codec.For[string](), a: a, lateness: int64(lateness), fold: fold,
				emit: func(k string, w TimeWindow, acc int64, out Collector[string]) error {
					out.Collect(fmt.Sprintf("%s [%d,%d) = %d", k, w.Start.UnixMilli(), w.End.UnixMilli(), acc))
					return nil
				}, hasLate: lateOutput}
			op.out, op.c, op.lateCount = collectOf[string]{h.out}, h.c, &h.dropped
			h.op, h.in, h.et = op, op, op
		}
		ctx := (&operatortest.Run{}).Context("window", 0, 1, r)
		ctx.Now = func() time.Time { return time.UnixMilli(h.clock) }
		if err := h.op.Open(ctx); err != nil {
			t.Fatal(err)
		}
	}
	h.build(nil)
	return h
}

// TestWindowScripts runs the scripts in testdata/window: stories of
// records, watermarks, lateness and checkpoints.
func TestWindowScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/window", func(t *testing.T, path string) {
		var h *windowHarness
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "window":
				h = newWindowHarness(t, d)
				return "ok\n"
			case "records":
				// One record a line: key ts value.
				for _, l := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					var r rec
					var ts int64
					if _, err := fmt.Sscan(l, &r.Key, &ts, &r.V); err != nil {
						t.Fatalf("record %q: %v", l, err)
					}
					h.c.now = ts
					before := h.dropped.Load()
					h.in.Collect(r)
					if h.c.err != nil {
						t.Fatal(h.c.err)
					}
					if h.dropped.Load() > before {
						h.out.out = append(h.out.out, fmt.Sprintf("dropped as late: %s %d %d", r.Key, ts, r.V))
					}
				}
			case "watermark":
				var wm int64
				d.ScanArgs(t, "t", &wm)
				if err := h.et.AdvanceWatermark(wm); err != nil {
					t.Fatal(err)
				}
			case "time":
				// time t=ms: processing time moves to t; due timers fire.
				d.ScanArgs(t, "t", &h.clock)
				if err := h.op.(operator.Timed).FireTimers(time.UnixMilli(h.clock)); err != nil {
					t.Fatal(err)
				}
			case "end":
				if err := h.et.AdvanceWatermark(operator.MaxTime); err != nil {
					t.Fatal(err)
				}
			case "checkpoint":
				h.take(t, h.op)
				return "ok\n"
			case "restore":
				h.build(h.last())
				return "ok\n"
			default:
				t.Fatalf("unknown command %q", d.Cmd)
			}
			return output(h.out, h.late)
		})
	})
}
