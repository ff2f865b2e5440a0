package weir

import (
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// joined is a record of either side of a scripted join.
type joined struct {
	Key string
	ID  int64
}

// joinHarness runs one join subtask by hand: records of both sides with
// event times, watermarks, processing time, snapshots and restores.
type joinHarness struct {
	c     *chain
	out   *lines
	op    *keyedCoOp[string, joined, joined, string]
	now   int64 // processing time, ms
	keys  []string
	build func(r *operator.Restore)
	snapshots
}

func newJoinHarness(t *testing.T, d *datadriven.TestData) *joinHarness {
	var kind string
	var size, slide, lower, upper, ttl int
	d.ScanArgs(t, "kind", &kind)
	d.MaybeScanArgs(t, "size", &size)
	d.MaybeScanArgs(t, "slide", &slide)
	d.MaybeScanArgs(t, "lower", &lower)
	d.MaybeScanArgs(t, "upper", &upper)
	d.MaybeScanArgs(t, "ttl", &ttl)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	pair := func(a, b joined) string { return fmt.Sprintf("a%d b%d", a.ID, b.ID) }
	h := &joinHarness{}
	h.build = func(r *operator.Restore) {
		var fn KeyedCoProcessFunction[string, joined, joined, string]
		switch kind {
		case "window":
			w := Tumbling(ms(size))
			if slide > 0 {
				w = Sliding(ms(size), ms(slide))
			}
			fn = &coGroup[string, joined, joined, string]{w: w, f: func(k string, w TimeWindow, as, bs []joined, out Collector[string]) error {
				out.Collect(fmt.Sprintf("%s [%d,%d) a=%v b=%v", k, w.Start.UnixMilli(), w.End.UnixMilli(), ids(as), ids(bs)))
				return nil
			}}
		case "interval":
			fn = &intervalJoin[string, joined, joined, string]{lower: int64(lower), upper: int64(upper), f: pair}
		case "regular":
			fn = &regularJoin[string, joined, joined, string]{ttl: int64(ttl), f: pair}
		default:
			t.Fatalf("unknown join kind %q", kind)
		}
		key := func(j joined) string { return j.Key }
		h.c = &chain{now: operator.MinTime, group: -1}
		h.out = &lines{c: h.c}
		h.op = &keyedCoOp[string, joined, joined, string]{fn: fn, keyA: key, keyB: key, kc: codec.For[string](), n: &node{}}
		h.op.out, h.op.c = collectOf[string]{h.out}, h.c
		ctx := (&operatortest.Run{}).Context("join", 0, 1, r)
		ctx.Now = func() time.Time { return time.UnixMilli(h.now) }
		if err := h.op.Open(ctx); err != nil {
			t.Fatal(err)
		}
	}
	h.build(nil)
	return h
}

func ids(js []joined) []int64 {
	var out []int64
	for _, j := range js {
		out = append(out, j.ID)
	}
	return out
}

// state prints what the join keeps, per key and side.
func (h *joinHarness) state() string {
	var b strings.Builder
	for _, k := range h.keys {
		h.op.setKey(k)
		switch f := h.op.fn.(type) {
		case *intervalJoin[string, joined, joined, string]:
			fmt.Fprintf(&b, "%s: a %v b %v\n", k, byTime(f.as.All()), byTime(f.bs.All()))
		case *coGroup[string, joined, joined, string]:
			fmt.Fprintf(&b, "%s: a %v b %v\n", k, byTime(f.as.All()), byTime(f.bs.All()))
		case *regularJoin[string, joined, joined, string]:
			var as, bs []string
			for _, a := range f.as.Get() {
				as = append(as, fmt.Sprintf("%d@%d", a.V.ID, a.At))
			}
			for _, x := range f.bs.Get() {
				bs = append(bs, fmt.Sprintf("%d@%d", x.V.ID, x.At))
			}
			fmt.Fprintf(&b, "%s: a %v b %v\n", k, as, bs)
		}
	}
	return b.String()
}

// byTime prints a join's state of one side: ids by time.
func byTime(all iter.Seq2[int64, []joined]) string {
	m := maps.Collect(all)
	var ts []int64
	for t := range m {
		ts = append(ts, t)
	}
	slices.Sort(ts)
	var parts []string
	for _, t := range ts {
		parts = append(parts, fmt.Sprintf("%d:%v", t, ids(m[t])))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// TestJoinScripts runs the scripts in testdata/join: the window, interval
// and regular joins, step by step, with what they keep in state.
func TestJoinScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/join", func(t *testing.T, path string) {
		var h *joinHarness
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "join":
				h = newJoinHarness(t, d)
				return "ok\n"
			case "records":
				// One record a line: side (a or b), key, event time, id.
				for _, l := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					var side string
					var r joined
					var ts int64
					if _, err := fmt.Sscan(l, &side, &r.Key, &ts, &r.ID); err != nil || (side != "a" && side != "b") {
						t.Fatalf("record %q: want side key time id (%v)", l, err)
					}
					if !slices.Contains(h.keys, r.Key) {
						h.keys = append(h.keys, r.Key)
					}
					input := 0
					if side == "b" {
						input = 1
					}
					before := h.op.lateCount.Load()
					if err := h.op.ProcessBatch(input, []joined{r}, []int64{ts}, nil); err != nil {
						t.Fatal(err)
					}
					if h.op.lateCount.Load() > before {
						h.out.out = append(h.out.out, fmt.Sprintf("dropped as late: %s %s %d %d", side, r.Key, ts, r.ID))
					}
				}
			case "watermark":
				var wm int64
				d.ScanArgs(t, "t", &wm)
				if err := h.op.AdvanceWatermark(wm); err != nil {
					t.Fatal(err)
				}
			case "time":
				d.ScanArgs(t, "t", &h.now)
				if err := h.op.FireTimers(time.UnixMilli(h.now)); err != nil {
					t.Fatal(err)
				}
			case "state":
				return h.state()
			case "checkpoint":
				h.take(t, h.op)
				return "ok\n"
			case "restore":
				h.build(h.last())
				return "ok\n"
			default:
				t.Fatalf("unknown command %q", d.Cmd)
			}
			slices.Sort(h.out.out) // pairs come in the order of a map
			return output(h.out, nil)
		})
	})
}
