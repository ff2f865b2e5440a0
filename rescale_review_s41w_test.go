package weir_test

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/connector/generator"
)

const s41N = 6000

// s41Reading: 5 sensors, 2 ms apart, blocks of 400 readings 500 ms apart,
// up to 60 ms out of order.
func s41Reading(i int64) reading {
	return reading{Sensor: i % 5, Value: i, At: 1_000_000 + i*2 + (i/400)*500 - (i*7919)%31*2}
}

func s41Job(t *testing.T, cfg weir.Config, out string, slow bool, fail func(reading)) *weir.Environment {
	t.Helper()
	e := env(cfg)
	rate := 30_000.0
	if slow {
		rate /= 25
	}
	g, err := generator.New(generator.Config[reading]{Count: s41N, Make: s41Reading, BatchSize: 50, RatePerSecond: rate})
	if err != nil {
		t.Fatal(err)
	}
	src := weir.Source(e, "readings", g, weir.Watermarks(weir.BoundedOutOfOrderness(100*time.Millisecond, readingAt)))
	checked := weir.Map(src, "check", func(r reading) reading {
		if fail != nil {
			fail(r)
		}
		return r
	})
	sensor := func(r reading) int64 { return r.Sensor }
	bySensor := weir.KeyBy(checked, sensor)
	sess := weir.WindowProcess(weir.Window(bySensor, weir.Session(50*time.Millisecond)), "sessions",
		func(k int64, w weir.TimeWindow, in []reading, out weir.Collector[string]) error {
			out.Collect(fmt.Sprintf("sess %d [%d,%d) %d", k, w.Start.UnixMilli(), w.End.UnixMilli(), len(in)))
			return nil
		})
	left := weir.KeyBy(weir.Filter(checked, "even", func(r reading) bool { return r.Value%2 == 0 }), sensor)
	right := weir.KeyBy(weir.Filter(checked, "odd", func(r reading) bool { return r.Value%2 == 1 }), sensor)
	ij := weir.IntervalJoin(left, right, -7*time.Millisecond, 3*time.Millisecond, "interval", func(a, b reading) string {
		return fmt.Sprintf("ij %d %d", a.Value, b.Value)
	})
	wj := weir.WindowCoGroup(left, right, weir.Sliding(10*time.Millisecond, 4*time.Millisecond), "cogroup",
		func(k int64, w weir.TimeWindow, as, bs []reading, out weir.Collector[string]) error {
			out.Collect(fmt.Sprintf("cg %d [%d,%d) %d %d", k, w.Start.UnixMilli(), w.End.UnixMilli(), len(as), len(bs)))
			return nil
		})
	sink, err := file.Sink(file.SinkConfig[string]{Dir: out, Format: lineFormat})
	if err != nil {
		t.Fatal(err)
	}
	weir.Sink(sess, "out sess", sink)
	weir.Sink(ij, "out ij", sink)
	weir.Sink(wj, "out cg", sink)
	return e
}

func s41BruteForce() []string {
	var out []string
	bySensor := map[int64][]reading{}
	for i := range int64(s41N) {
		r := s41Reading(i)
		bySensor[r.Sensor] = append(bySensor[r.Sensor], r)
	}
	for s, rs := range bySensor {
		sorted := slices.Clone(rs)
		slices.SortFunc(sorted, func(a, b reading) int { return int(a.At - b.At) })
		start, end, n := sorted[0].At, sorted[0].At+50, 0
		for _, r := range sorted {
			if r.At > end { // [start,end) and [r, r+50) do not touch
				out = append(out, fmt.Sprintf("sess %d [%d,%d) %d", s, start, end, n))
				start, n = r.At, 0
			}
			end = max(end, r.At+50)
			n++
		}
		out = append(out, fmt.Sprintf("sess %d [%d,%d) %d", s, start, end, n))
		cg := map[[2]int64][2]int{}
		for _, a := range rs {
			for _, b := range rs {
				if a.Value%2 == 0 && b.Value%2 == 1 && a.At-7 <= b.At && b.At <= a.At+3 {
					out = append(out, fmt.Sprintf("ij %d %d", a.Value, b.Value))
				}
			}
			for st := floorMs(a.At, 4); st > a.At-10; st -= 4 {
				c := cg[[2]int64{st, st + 10}]
				c[a.Value%2]++
				cg[[2]int64{st, st + 10}] = c
			}
		}
		for w, c := range cg {
			out = append(out, fmt.Sprintf("cg %d [%d,%d) %d %d", s, w[0], w[1], c[0], c[1]))
		}
	}
	slices.Sort(out)
	return out
}

func floorMs(t, unit int64) int64 {
	q := t / unit
	if t%unit != 0 && t < 0 {
		q--
	}
	return q * unit
}

func TestS41SessionsAndJoinsRescaled(t *testing.T) {
	want := s41BruteForce()
	check := func(what string, got []string) {
		t.Helper()
		if !slices.Equal(got, want) {
			missing, extra := diffSorted(want, got)
			t.Errorf("%s: %d results, want %d; missing %d %v; extra %d %v", what, len(got), len(want), len(missing), missing[:min(5, len(missing))], len(extra), extra[:min(5, len(extra))])
		}
	}
	sb := weir.StateBackend{}
	check("straight", runOnce(t, sb, false, func(cfg weir.Config, out string) *weir.Environment { return s41Job(t, cfg, out, false, nil) }))
	var n atomic.Int64
	check("after failures", runOnce(t, sb, true, func(cfg weir.Config, out string) *weir.Environment {
		return s41Job(t, cfg, out, false, func(reading) {
			if k := n.Add(1); k == 2000 || k == 4500 {
				panic(errors.New("injected failure"))
			}
		})
	}))
	check("rescaled 2 → 3 → 1", runRescaled(t, sb, []int{2, 3, 1}, func(cfg weir.Config, out string, slow bool) *weir.Environment {
		return s41Job(t, cfg, out, slow, nil)
	}))
}

func diffSorted(want, got []string) (missing, extra []string) {
	m := map[string]int{}
	for _, w := range want {
		m[w]++
	}
	for _, g := range got {
		m[g]--
	}
	for k, v := range m {
		for ; v > 0; v-- {
			missing = append(missing, k)
		}
		for ; v < 0; v++ {
			extra = append(extra, k)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	return
}
