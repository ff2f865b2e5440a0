package weir_test

// Found by an outside review of session 35's fixes.

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

// countsIntoB merges into its second argument, which Flink's
// AggregateFunction.merge allows ("may reuse any of the given accumulators
// as the target for the merge and return that").
type countsIntoB struct{ countsOf }

func (countsIntoB) Merge(a, b map[int64]int64) map[int64]int64 {
	for k, n := range a {
		b[k] += n
	}
	return b
}

// TestSlidingMergeIntoSecondArgument: as TestSlidingMapAccumulatorCountsOnce,
// but Merge reuses its second accumulator: copyAcc copies only the first
// pane, so the second pane's stored accumulator is merged into and later
// windows count records twice.
func TestSlidingMergeIntoSecondArgument(t *testing.T) {
	onBackends(t, func(t *testing.T, sb weir.StateBackend) {
		e := env(weir.Config{StateBackend: sb})
		vals := []int64{7, 12}
		nums := weir.Source(e, "nums", gen(t, 2, func(i int64) int64 { return vals[i] }), weir.Watermarks(weir.Monotonous(at)))
		w := weir.Window(weir.KeyBy(nums, func(v int64) int64 { return 0 }), weir.Sliding(15*time.Millisecond, 5*time.Millisecond))
		got := &collect[string]{}
		weir.Sink(weir.Map(weir.WindowAggregate(w, "w", countsIntoB{}), "v", func(r weir.WindowResult[int64, int64]) string {
			return fmt.Sprintf("[%d,%d) %d", r.Window.Start.UnixMilli(), r.Window.End.UnixMilli(), r.Value)
		}), "out", got.sink())
		execute(t, e)
		want := []string{"[-5,10) 1", "[0,15) 2", "[5,20) 2", "[10,25) 1"}
		if g := got.values(); !slices.Equal(g, want) {
			t.Errorf("got %q, want %q", g, want)
		}
	})
}

// TestAllowedLatenessForeverIsAccepted: AllowedLateness(math.MaxInt64)
// ("keep every window open for late records", as Flink users pass
// Long.MAX_VALUE) ran before this change (truncated to whole
// milliseconds); it is now refused as "not whole milliseconds".
func TestAllowedLatenessForeverIsAccepted(t *testing.T) {
	e := env(weir.Config{})
	nums := weir.Source(e, "nums", gen(t, 10, func(i int64) int64 { return i }), weir.Watermarks(weir.Monotonous(at)))
	w := weir.Window(weir.KeyBy(nums, func(v int64) int64 { return 0 }), weir.Tumbling(time.Second), weir.AllowedLateness(time.Duration(math.MaxInt64)))
	got := &collect[int64]{}
	weir.Sink(weir.Map(weir.WindowAggregate(w, "w", weir.Count[int64]()), "v", value), "out", got.sink())
	if _, err := e.Execute(context.Background()); err != nil {
		t.Fatalf("AllowedLateness(math.MaxInt64) refused: %v", err)
	}
}
