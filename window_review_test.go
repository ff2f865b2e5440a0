package weir_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

// TestIntervalJoinRefusesSubMillisecondBounds (found by an outside review, session 35): an interval join asked for
// b in [a+100µs, a+900µs]. Event time is whole milliseconds, so no pair
// can satisfy it (Flink's bounds are milliseconds, and Weir refuses a
// window size, session gap or TTL that is not whole milliseconds). Weir
// truncates both bounds to 0 and joins records at the same millisecond.
func TestIntervalJoinRefusesSubMillisecondBounds(t *testing.T) {
	e := env(weir.Config{})
	byV := func(v int64) int64 { return 0 }
	src := func(name string) weir.KeyedStream[int64, int64] {
		return weir.KeyBy(weir.Source(e, name, gen(t, 3, func(i int64) int64 { return 1000 + i }), weir.Watermarks(weir.Monotonous(at))), byV)
	}
	got := &collect[int64]{}
	weir.Sink(weir.IntervalJoin(src("a"), src("b"), 100*time.Microsecond, 900*time.Microsecond, "j", sum), "out", got.sink())
	_, err := e.Execute(context.Background())
	if err == nil && len(got.values()) > 0 {
		t.Errorf("bounds [100µs, 900µs] accepted and joined %d pairs of records at the same millisecond: %v", len(got.values()), got.values())
	}
}

// TestAllowedLatenessRefusesSubMilliseconds (found by an outside review, session 35): AllowedLateness(-500µs)
// is negative, which addWindow refuses for -1ms, but Milliseconds()
// truncates it to 0 before the check.
func TestAllowedLatenessRefusesSubMilliseconds(t *testing.T) {
	e := env(weir.Config{})
	nums := weir.Source(e, "nums", gen(t, 10, func(i int64) int64 { return i }), weir.Watermarks(weir.Monotonous(at)))
	w := weir.Window(weir.KeyBy(nums, func(v int64) int64 { return v }), weir.Tumbling(time.Second), weir.AllowedLateness(-500*time.Microsecond))
	weir.Sink(weir.Map(weir.WindowAggregate(w, "w", weir.Count[int64]()), "v", value), "out", (&collect[int64]{}).sink())
	if _, err := e.Execute(context.Background()); err == nil {
		t.Errorf("AllowedLateness(-500µs) accepted")
	}
}

type distinct struct{}

func (distinct) Zero() map[int64]bool { return map[int64]bool{} }
func (distinct) Add(acc map[int64]bool, v int64) map[int64]bool {
	acc[v] = true
	return acc
}
func (distinct) Merge(a, b map[int64]bool) map[int64]bool {
	for k := range b {
		a[k] = true
	}
	return a
}
func (distinct) Result(acc map[int64]bool) int64 { return int64(len(acc)) }

// TestMapAccumulatorDoesNotRaceTheSnapshot (found by an outside review, session 35): a distinct count whose
// accumulator is a Go map updated in place, in one long window, on the
// heap backend with checkpoints every 5 ms: the asynchronous part of
// each snapshot encodes the map while Add writes it (run with -race).
func TestMapAccumulatorDoesNotRaceTheSnapshot(t *testing.T) {
	e := env(weir.Config{})
	nums := weir.Source(e, "nums", gen(t, 200_000, func(i int64) int64 { return i }), weir.Watermarks(weir.Monotonous(at)))
	w := weir.Window(weir.KeyBy(nums, func(v int64) int64 { return 0 }), weir.Tumbling(time.Hour))
	got := &collect[int64]{}
	weir.Sink(weir.Map(weir.WindowAggregate(w, "w", distinct{}), "v", value), "out", got.sink())
	execute(t, e)
	if v := got.values(); len(v) != 1 || v[0] != 200_000 {
		t.Errorf("got %v", v)
	}
}

// TestSlidingMapAccumulatorCountsOnce (found by an outside review, session 35): the job-level view of the pane
// merge aliasing: records (counted per value in a map) per 15 ms window sliding by 5 ms, over
// 7 and 12 (one key). Flink: [-5,10) 1, [0,15) 2, [5,20) 2, [10,25) 1.
func TestSlidingMapAccumulatorCountsOnce(t *testing.T) {
	onBackends(t, func(t *testing.T, sb weir.StateBackend) { testSlidingCountsTwice(t, sb) })
}

func testSlidingCountsTwice(t *testing.T, sb weir.StateBackend) {
	e := env(weir.Config{StateBackend: sb})
	vals := []int64{7, 12}
	nums := weir.Source(e, "nums", gen(t, 2, func(i int64) int64 { return vals[i] }), weir.Watermarks(weir.Monotonous(at)))
	w := weir.Window(weir.KeyBy(nums, func(v int64) int64 { return 0 }), weir.Sliding(15*time.Millisecond, 5*time.Millisecond))
	got := &collect[string]{}
	weir.Sink(weir.Map(weir.WindowAggregate(w, "w", countsOf{}), "v", func(r weir.WindowResult[int64, int64]) string {
		return fmt.Sprintf("[%d,%d) %d", r.Window.Start.UnixMilli(), r.Window.End.UnixMilli(), r.Value)
	}), "out", got.sink())
	execute(t, e)
	want := []string{"[-5,10) 1", "[0,15) 2", "[5,20) 2", "[10,25) 1"}
	if g := got.values(); !slices.Equal(g, want) {
		t.Errorf("got %q, want %q", g, want)
	}
}

// countsOf counts records through a map of value to count, merged in place.
type countsOf struct{}

func (countsOf) Zero() map[int64]int64 { return map[int64]int64{} }
func (countsOf) Add(acc map[int64]int64, v int64) map[int64]int64 {
	acc[v]++
	return acc
}
func (countsOf) Merge(a, b map[int64]int64) map[int64]int64 {
	for k, n := range b {
		a[k] += n
	}
	return a
}
func (countsOf) Result(acc map[int64]int64) (n int64) {
	for _, c := range acc {
		n += c
	}
	return n
}
