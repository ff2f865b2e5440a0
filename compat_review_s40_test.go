package weir_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

// Outside review, session 40: restoring a savepoint of a job's earlier
// version into its next version, one step beside the tested paths.

// evolveRun runs the n-th version of a job named "evolve": sources
// nums1..numsN (the earlier runs' restored and exhausted), each of count
// numbers 0..count-1, unioned, then build. Run n > 1 restores "latest".
func evolveRun(t *testing.T, ckpt string, n, p int, sb weir.StateBackend, count int64,
	build func(in *weir.Stream[int64]) *weir.Stream[string]) ([]string, weir.Result, error) {
	t.Helper()
	restore := ""
	if n > 1 {
		restore = "latest"
	}
	e := weir.New(weir.Config{Job: "evolve", Parallelism: p, StateBackend: sb, Restore: restore,
		Checkpoint: weir.CheckpointConfig{Interval: 5 * time.Millisecond, Dir: ckpt}})
	var sources []*weir.Stream[int64]
	for i := 1; i <= n; i++ {
		sources = append(sources, weir.Source(e, fmt.Sprint("nums", i), gen(t, count, func(i int64) int64 { return i })))
	}
	in := sources[0]
	if n > 1 {
		in = weir.Union(sources[0], "union", sources[1:])
	}
	var c collect[string]
	weir.Sink(build(in), "out", c.sink())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := e.Execute(ctx)
	got := c.values()
	slices.Sort(got)
	return got, res, err
}

// valueFn keeps one ValueState[int64, V] named "acc" per key; at each
// record it emits what the state held before and stores next(old, x).
type valueFn[V any] struct {
	s    *weir.ValueState[int64, V]
	next func(old V, x int64) V
}

func (f *valueFn[V]) Open(c *weir.KeyedContext[int64]) (err error) {
	f.s, err = weir.NewValueState[int64, V](c, "acc")
	return err
}

func (f *valueFn[V]) Process(c *weir.KeyedContext[int64], x int64, out weir.Collector[string]) error {
	v, ok := f.s.Value()
	out.Collect(fmt.Sprintf("%d %v %+v", c.Key(), ok, v))
	f.s.Update(f.next(v, x))
	return nil
}

func valueJob[V any](keys int64, next func(V, int64) V) func(in *weir.Stream[int64]) *weir.Stream[string] {
	return func(in *weir.Stream[int64]) *weir.Stream[string] {
		return weir.Process(weir.KeyBy(in, func(v int64) int64 { return v % keys }), "acc",
			func() weir.KeyedProcessFunction[int64, int64, string] { return &valueFn[V]{next: next} })
	}
}

var backends = []struct {
	name string
	sb   func(t *testing.T) weir.StateBackend
}{
	{"heap", func(*testing.T) weir.StateBackend { return weir.StateBackend{} }},
	{"pebble", func(t *testing.T) weir.StateBackend {
		return weir.StateBackend{Kind: weir.PebbleState, Dir: t.TempDir()}
	}},
}

// checkRefused: the restore must fail at start, naming the operator and
// the state, and emit nothing; else it must show the old values intact.
func checkRefused(t *testing.T, got []string, res weir.Result, err error, names ...string) {
	t.Helper()
	if err == nil {
		n := min(len(got), 5)
		t.Fatalf("the restore into a changed state type succeeded; the job emitted %d records, the first %q", len(got), got[:n])
	}
	for _, s := range names {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not name %q", err, s)
		}
	}
	if len(got) != 0 {
		t.Errorf("the job emitted %d records before it failed, the first %q", len(got), got[:min(len(got), 3)])
	}
	if res.Attempts != 1 {
		t.Errorf("%d attempts: a restart cannot fix a state type", res.Attempts)
	}
}

type pointV1 struct{ X, Y int64 }
type pointV2Swapped struct{ Y, X int64 }
type pointV3Added struct {
	X, Y  int64
	Label string
}
type pointV4Removed struct{ X int64 }

// TestReviewS40ValueStateStructFieldsReordered: v1 stores per key
// {X: 1000+k, Y: k}; v2 declares the struct with its fields in another
// order (Y, X), a change Flink's POJO serializer reads by field name.
func TestReviewS40ValueStateStructFieldsReordered(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ckpt := filepath.Join(t.TempDir(), "ckpt")
			sb := b.sb(t)
			if _, _, err := evolveRun(t, ckpt, 1, 2, sb, 10, valueJob(10, func(_ pointV1, x int64) pointV1 { return pointV1{X: 1000 + x, Y: x} })); err != nil {
				t.Fatal(err)
			}
			got, res, err := evolveRun(t, ckpt, 2, 2, sb, 10, valueJob(10, func(_ pointV2Swapped, x int64) pointV2Swapped { return pointV2Swapped{X: 1000 + x, Y: x} }))
			if err == nil {
				for _, l := range got {
					var k, x, y int64
					var ok bool
					if _, e := fmt.Sscanf(l, "%d %t {Y:%d X:%d}", &k, &ok, &y, &x); e != nil {
						t.Fatalf("%q: %v", l, e)
					}
					if x != 1000+k || y != k {
						t.Errorf("key %d restored {X:%d Y:%d}, the old version stored {X:%d Y:%d}", k, x, y, 1000+k, k)
					}
				}
				return
			}
			checkRefused(t, got, res, err, "acc")
		})
	}
}

// TestReviewS40ValueStateStructFieldAdded: v2 adds a field (Flink's POJO
// serializer restores the old values and the new field's zero).
func TestReviewS40ValueStateStructFieldAdded(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ckpt := filepath.Join(t.TempDir(), "ckpt")
			sb := b.sb(t)
			if _, _, err := evolveRun(t, ckpt, 1, 2, sb, 10, valueJob(10, func(_ pointV1, x int64) pointV1 { return pointV1{X: 1000 + x, Y: x} })); err != nil {
				t.Fatal(err)
			}
			got, res, err := evolveRun(t, ckpt, 2, 2, sb, 10, valueJob(10, func(_ pointV3Added, x int64) pointV3Added { return pointV3Added{X: 1000 + x, Y: x, Label: "new"} }))
			t.Logf("err=%v attempts=%d got=%q", err, res.Attempts, got)
			if err == nil {
				for _, l := range got {
					var k, x, y int64
					var ok bool
					if _, e := fmt.Sscanf(l, "%d %t {X:%d Y:%d Label:}", &k, &ok, &x, &y); e != nil || !ok || x != 1000+k || y != k {
						t.Errorf("%q: want the old {X:%d Y:%d} and an empty Label (%v)", l, 1000+k, k, e)
					}
				}
				return
			}
			checkRefused(t, got, res, err, "acc")
		})
	}
}

// TestReviewS40ValueStateStructFieldRemoved: v2 drops a field.
func TestReviewS40ValueStateStructFieldRemoved(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ckpt := filepath.Join(t.TempDir(), "ckpt")
			sb := b.sb(t)
			if _, _, err := evolveRun(t, ckpt, 1, 2, sb, 10, valueJob(10, func(_ pointV1, x int64) pointV1 { return pointV1{X: 1000 + x, Y: x} })); err != nil {
				t.Fatal(err)
			}
			got, res, err := evolveRun(t, ckpt, 2, 2, sb, 10, valueJob(10, func(_ pointV4Removed, x int64) pointV4Removed { return pointV4Removed{X: 1000 + x} }))
			t.Logf("err=%v attempts=%d got=%q", err, res.Attempts, got)
			if err == nil {
				for _, l := range got {
					var k, x int64
					var ok bool
					if _, e := fmt.Sscanf(l, "%d %t {X:%d}", &k, &ok, &x); e != nil || !ok || x != 1000+k {
						t.Errorf("%q: want the old {X:%d} (%v)", l, 1000+k, e)
					}
				}
				return
			}
			checkRefused(t, got, res, err, "acc")
		})
	}
}

// TestReviewS40ValueStateInt64ToUint64: a counter's type goes from int64
// to uint64 ("counts are never negative").
func TestReviewS40ValueStateInt64ToUint64(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ckpt := filepath.Join(t.TempDir(), "ckpt")
			sb := b.sb(t)
			if _, _, err := evolveRun(t, ckpt, 1, 2, sb, 10, valueJob(10, func(_ int64, x int64) int64 { return 1000 + x })); err != nil {
				t.Fatal(err)
			}
			got, res, err := evolveRun(t, ckpt, 2, 2, sb, 10, valueJob(10, func(_ uint64, x int64) uint64 { return uint64(1000 + x) }))
			t.Logf("err=%v attempts=%d got=%q", err, res.Attempts, got)
			if err == nil {
				for _, l := range got {
					var k, v int64
					var ok bool
					if _, e := fmt.Sscanf(l, "%d %t %d", &k, &ok, &v); e != nil || !ok || v != 1000+k {
						t.Errorf("%q: want the old value %d (%v)", l, 1000+k, e)
					}
				}
				return
			}
			checkRefused(t, got, res, err, "acc")
		})
	}
}

// TestReviewS40ValueStateInt64ToFloat64: a sum becomes a float64.
func TestReviewS40ValueStateInt64ToFloat64(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ckpt := filepath.Join(t.TempDir(), "ckpt")
			sb := b.sb(t)
			if _, _, err := evolveRun(t, ckpt, 1, 2, sb, 10, valueJob(10, func(_ int64, x int64) int64 { return 1000 + x })); err != nil {
				t.Fatal(err)
			}
			got, res, err := evolveRun(t, ckpt, 2, 2, sb, 10, valueJob(10, func(_ float64, x int64) float64 { return float64(1000 + x) }))
			t.Logf("err=%v attempts=%d got=%q", err, res.Attempts, got)
			if err == nil {
				for _, l := range got {
					var k int64
					var v float64
					var ok bool
					if _, e := fmt.Sscanf(l, "%d %t %g", &k, &ok, &v); e != nil || !ok || v != float64(1000+k) {
						t.Errorf("%q: want the old value %d (%v)", l, 1000+k, e)
					}
				}
				return
			}
			checkRefused(t, got, res, err, "acc")
		})
	}
}
