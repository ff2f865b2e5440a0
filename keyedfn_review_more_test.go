package weir

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// Processing-time timers are keyed state: across a checkpoint and a
// restore at another parallelism each fires once, by its key's owner.
func TestReviewKPFProcessingTimersRescale(t *testing.T) {
	onBoth(t, func(t *testing.T, pebble bool) {
		h := newKH(t, pebble, func() KeyedProcessFunction[string, kr, string] { return &scripted{} })
		must(t, h.open(2))
		var want []string
		for i := range 20 {
			k := fmt.Sprintf("k%d", i)
			must(t, h.record(1, k, fmt.Sprintf("pt:%d;ev:%d", 100+i, 200+i)))
			want = append(want, fmt.Sprintf("fire processing time %s %d", k, 100+i), fmt.Sprintf("fire event time %s %d", k, 200+i))
		}
		must(t, h.checkpoint())
		must(t, h.restore(3))
		must(t, h.fire(1000))
		must(t, h.watermark(1000))
		for i, s := range h.subs {
			for _, tm := range []interface{ Next() (time.Time, bool) }{s.kctx.timers, s.kctx.eventTimers} {
				if at, ok := tm.Next(); ok {
					t.Errorf("subtask %d still has a timer at %v", i, at)
				}
			}
		}
		got := slices.Clone(h.out)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("got %q\nwant %q", got, want)
		}
	})
}

// State cleared in OnTimer reads as absent, in OnTimer and after, also
// across a checkpoint and a rescale.
func TestReviewKPFClearInOnTimer(t *testing.T) {
	onBoth(t, func(t *testing.T, pebble bool) {
		h := newKH(t, pebble, func() KeyedProcessFunction[string, kr, string] {
			return &scripted{onTimer: func(s *scripted, c *KeyedContext[string], at int64, out Collector[string]) error {
				s.v.Clear()
				s.m.Clear()
				s.l.Clear()
				v, ok := s.v.Value()
				var es []string
				for k := range s.m.All() {
					es = append(es, k)
				}
				out.Collect(fmt.Sprintf("after %s %q %v %v %v", c.Key(), v, ok, es, s.l.Get()))
				return nil
			}}
		})
		must(t, h.open(2))
		for i := range 6 {
			k := fmt.Sprintf("k%d", i)
			must(t, h.record(1, k, "set:x;madd:a=1;madd:b=2;ladd:z;ev:10"))
		}
		must(t, h.checkpoint())
		must(t, h.watermark(10))
		h.out = nil
		must(t, h.checkpoint())
		must(t, h.restore(3))
		for i := range 6 {
			must(t, h.record(20, fmt.Sprintf("k%d", i), "get;dump"))
		}
		var want []string
		for i := range 6 {
			want = append(want, fmt.Sprintf("get k%d \"\" false", i), fmt.Sprintf("map k%d [] list []", i))
		}
		wantOut(t, h, want...)
	})
}

// Map state iteration while removing the entry yielded, and the others.
func TestReviewKPFMapRemoveWhileIterating(t *testing.T) {
	onBoth(t, func(t *testing.T, pebble bool) {
		h := newKH(t, pebble, func() KeyedProcessFunction[string, kr, string] {
			return &scripted{onTimer: func(s *scripted, c *KeyedContext[string], at int64, out Collector[string]) error {
				n := 0
				for k := range s.m.All() {
					n++
					s.m.Remove(k)
				}
				out.Collect(fmt.Sprintf("iterated %d", n))
				return nil
			}}
		})
		must(t, h.open(1))
		cmd := ""
		for i := range 50 {
			cmd += fmt.Sprintf("madd:e%d=%d;", i, i)
		}
		must(t, h.record(1, "a", cmd))
		must(t, h.checkpoint()) // half on disk (pebble flushes)
		must(t, h.record(1, "a", "madd:x=1;madd:e3=9;ev:10"))
		must(t, h.watermark(10))
		must(t, h.record(11, "a", "dump"))
		must(t, h.checkpoint())
		must(t, h.restore(2))
		must(t, h.record(12, "a", "dump"))
		wantOut(t, h, "fire event time a 10", "iterated 51", "map a [] list []", "map a [] list []")
	})
}

// failAt is a collector that fails the chain on a value, as a chained
// operator after the keyed one does.
type failAt struct {
	h   *kh
	bad string
}

// After the chain failed in a processing-time OnTimer, no further timer
// fires (as in event time, which stops at the first failure).
func TestReviewKPFProcessingTimersStopAfterChainFailure(t *testing.T) {
	for _, d := range []TimeDomain{EventTime, ProcessingTime} {
		t.Run(d.String(), func(t *testing.T) {
			calls := 0
			h := newKH(t, false, func() KeyedProcessFunction[string, kr, string] {
				return &scripted{onTimer: func(s *scripted, c *KeyedContext[string], at int64, out Collector[string]) error {
					calls++
					c.c.fail(errors.New("downstream failed")) // what a chained operator's failure does
					return nil
				}}
			})
			must(t, h.open(1))
			for i := range 5 {
				must(t, h.record(1, fmt.Sprintf("k%d", i), "pt:10;ev:10"))
			}
			if d == EventTime {
				h.subs[0].AdvanceWatermark(10)
			} else {
				h.subs[0].FireTimers(time.UnixMilli(10))
			}
			if calls != 1 {
				t.Fatalf("%v: OnTimer ran %d times; the chain had failed after the first", d, calls)
			}
		})
	}
}
