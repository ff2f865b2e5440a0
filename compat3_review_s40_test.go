package weir_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

// Windows: records x (event time x ms) keyed by x%4, counted per window.
func countWindows(a weir.WindowAssigner) func(in *weir.Stream[int64]) *weir.Stream[string] {
	return func(in *weir.Stream[int64]) *weir.Stream[string] {
		res := weir.WindowAggregate(weir.Window(weir.KeyBy(in, func(v int64) int64 { return v % 4 }), a), "win", weir.Count[int64]())
		return weir.Map(res, "fmt", func(r weir.WindowResult[int64, int64]) string {
			return fmt.Sprintf("%d [%d,%d) %d", r.Key, r.Window.Start.UnixMilli(), r.Window.End.UnixMilli(), r.Value)
		})
	}
}

func listWindows(a weir.WindowAssigner) func(in *weir.Stream[int64]) *weir.Stream[string] {
	return func(in *weir.Stream[int64]) *weir.Stream[string] {
		return weir.WindowProcess(weir.Window(weir.KeyBy(in, func(v int64) int64 { return v % 4 }), a), "win",
			func(k int64, w weir.TimeWindow, in []int64, out weir.Collector[string]) error {
				out.Collect(fmt.Sprintf("%d [%d,%d) %d", k, w.Start.UnixMilli(), w.End.UnixMilli(), len(in)))
				return nil
			})
	}
}

// checkWindows: every window of size ms that the run emitted counts its
// size/4 records (each key has every 4th millisecond).
func checkWindows(t *testing.T, got []string, size int64) {
	t.Helper()
	bad := 0
	for _, l := range got {
		var k, s, e, n int64
		if _, err := fmt.Sscanf(l, "%d [%d,%d) %d", &k, &s, &e, &n); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		if e-s != size || n != size/4 && e <= 3000 {
			bad++
			if bad <= 5 {
				t.Errorf("window %q: want [%d,%d) of %d records", l, s, s+size, size/4)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d windows wrong", bad, len(got))
	}
}

// TestReviewS40WindowAggregateToProcessSameUID: the job's next version
// keeps the window's UID but computes it with WindowProcess instead of
// WindowAggregate (both of kind "window"). The windows open at the
// savepoint must still count their records before it, or the restore be
// refused.
func TestReviewS40WindowAggregateToProcessSameUID(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ckpt := filepath.Join(t.TempDir(), "ckpt")
			if _, _, err := cancelRun(t, ckpt, false, 2, b.sb(t), 3000, 3, countWindows(weir.Tumbling(400*time.Millisecond)), nil); err != nil {
				t.Fatal(err)
			}
			got, res, err := cancelRun(t, ckpt, true, 2, b.sb(t), 3000, 0, listWindows(weir.Tumbling(400*time.Millisecond)), nil)
			t.Logf("err=%.300v attempts=%d got %q", err, res.Attempts, got)
			if err == nil {
				checkWindows(t, got, 400)
				return
			}
			checkRefused(t, got, res, err, "win")
		})
	}
}

// TestReviewS40WindowSizeChanged: Tumbling(400ms) becomes Tumbling(600ms)
// under the same UID, restored while window [0,400) is open. Every record
// must be counted in some window the two runs emitted (Flink fires the old
// windows as they were and puts new records in new windows), or the
// restore be refused.
func TestReviewS40WindowSizeChanged(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ckpt := filepath.Join(t.TempDir(), "ckpt")
			first, _, err := cancelRun(t, ckpt, false, 2, b.sb(t), 3000, 3, countWindows(weir.Tumbling(400*time.Millisecond)), nil)
			if err != nil {
				t.Fatal(err)
			}
			got, res, err := cancelRun(t, ckpt, true, 2, b.sb(t), 3000, 0, countWindows(weir.Tumbling(600*time.Millisecond)), nil)
			t.Logf("err=%.300v attempts=%d run 1 emitted %q, run 2 %q", err, res.Attempts, first, got)
			if err != nil {
				checkRefused(t, got, res, err, "win")
				return
			}
			seen := map[string]bool{}
			counted := map[int64]int64{}
			for _, l := range append(first, got...) {
				if seen[l] {
					continue
				}
				seen[l] = true
				var k, s, e, n int64
				if _, err := fmt.Sscanf(l, "%d [%d,%d) %d", &k, &s, &e, &n); err != nil {
					t.Fatalf("%q: %v", l, err)
				}
				counted[k] += n
			}
			for k := int64(0); k < 4; k++ {
				if counted[k] < 750 {
					t.Errorf("key %d: the windows emitted count %d records, the input has 750: %d lost", k, counted[k], 750-counted[k])
				}
			}
		})
	}
}

// TestReviewS40WindowAccumulatorTypeChanged: the aggregate's accumulator
// goes from int64 (weir.Count) to uint64.
func TestReviewS40WindowAccumulatorTypeChanged(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ckpt := filepath.Join(t.TempDir(), "ckpt")
			if _, _, err := cancelRun(t, ckpt, false, 2, b.sb(t), 3000, 3, countWindows(weir.Tumbling(400*time.Millisecond)), nil); err != nil {
				t.Fatal(err)
			}
			got, res, err := cancelRun(t, ckpt, true, 2, b.sb(t), 3000, 0, func(in *weir.Stream[int64]) *weir.Stream[string] {
				res := weir.WindowAggregate(weir.Window(weir.KeyBy(in, func(v int64) int64 { return v % 4 }), weir.Tumbling(400*time.Millisecond)), "win", ucount{})
				return weir.Map(res, "fmt", func(r weir.WindowResult[int64, uint64]) string {
					return fmt.Sprintf("%d [%d,%d) %d", r.Key, r.Window.Start.UnixMilli(), r.Window.End.UnixMilli(), r.Value)
				})
			}, nil)
			t.Logf("err=%.300v attempts=%d got %q", err, res.Attempts, got)
			if err == nil {
				checkWindows(t, got, 400)
				return
			}
			checkRefused(t, got, res, err, "win")
		})
	}
}

type ucount struct{}

func (ucount) Zero() uint64                   { return 0 }
func (ucount) Add(acc uint64, _ int64) uint64 { return acc + 1 }
func (ucount) Merge(a, b uint64) uint64       { return a + b }
func (ucount) Result(acc uint64) uint64       { return acc }
