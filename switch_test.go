package weir_test

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

// threeStates keeps per key a count (value state), the records it saw
// (list state) and, per record, the run that saw it (map state). At each
// record it emits the key and what the states held before the record.
type threeStates struct {
	run int64
	v   *weir.ValueState[int64, int64]
	l   *weir.ListState[int64, int64]
	m   *weir.MapState[int64, int64, int64]
}

func (f *threeStates) Open(c *weir.KeyedContext[int64]) (err error) {
	if f.v, err = weir.NewValueState[int64, int64](c, "count"); err != nil {
		return err
	}
	if f.l, err = weir.NewListState[int64, int64](c, "seen"); err != nil {
		return err
	}
	f.m, err = weir.NewMapState[int64, int64, int64](c, "runs")
	return err
}

func (f *threeStates) Process(c *weir.KeyedContext[int64], x int64, out weir.Collector[string]) error {
	n, _ := f.v.Value()
	m := maps.Collect(f.m.All())
	out.Collect(threeStatesLine(c.Key(), n, f.l.Get(), m))
	f.v.Update(n + 1)
	f.l.Add(x + 10000*f.run)
	f.m.Put(x+10000*f.run, f.run)
	return nil
}

func threeStatesLine(k, n int64, l []int64, m map[int64]int64) string {
	var b strings.Builder
	fmt.Fprint(&b, k, " count ", n, " seen ", l, " runs")
	for _, uk := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprint(&b, " ", uk, ":", m[uk])
	}
	return b.String()
}

// runThreeStates runs the n-th run of a job of threeStates at parallelism
// p on state backend sb: sources nums1..numsN (those of earlier runs
// restored, exhausted), the n-th of count records. It returns what the job
// emitted, its result and its error.
// numberRuns is the input of a job's nth run: n rate-limited sources of
// count numbers each (slow enough for checkpoints midway), the ones of the
// earlier runs with their restored positions, and one new one.
func numberRuns(t *testing.T, e *weir.Environment, n int, count int64) *weir.Stream[int64] {
	t.Helper()
	var sources []*weir.Stream[int64]
	for i := 1; i <= n; i++ {
		g, err := newRateLimited(2000, count)
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, weir.Source(e, fmt.Sprint("nums", i), g))
	}
	if n == 1 {
		return sources[0]
	}
	return weir.Union(sources[0], "union", sources[1:])
}

func runThreeStates(t *testing.T, ckpt string, n, p int, sb weir.StateBackend, count int64) ([]string, weir.Result, error) {
	t.Helper()
	restore := ""
	if n > 1 {
		restore = "latest"
	}
	e := weir.New(weir.Config{Job: "switch", Parallelism: p, StateBackend: sb, Restore: restore,
		Checkpoint: weir.CheckpointConfig{Interval: 5 * time.Millisecond, Dir: ckpt}})
	in := numberRuns(t, e, n, count)
	var c collect[string]
	out := weir.Process(weir.KeyBy(in, func(v int64) int64 { return v % 1000 }), "states",
		func() weir.KeyedProcessFunction[int64, int64, string] { return &threeStates{run: int64(n)} })
	weir.Sink(out, "out", c.sink())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := e.Execute(ctx)
	return c.values(), res, err
}

// TestSwitchHeapToPebble: a job checkpointed on the heap (incremental or
// full) at parallelism 2 and restored on Pebble at 3, finds its value,
// list and map state; so does a second restore on Pebble of what the
// first one checkpointed (at 2).
func TestSwitchHeapToPebble(t *testing.T) {
	for _, tc := range []struct {
		name string
		heap weir.StateBackend
	}{
		{"heap incremental", weir.StateBackend{}},
		{"heap full", weir.StateBackend{Full: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ckpt := filepath.Join(t.TempDir(), "ckpt")
			pebble := weir.StateBackend{Kind: weir.PebbleState, Dir: t.TempDir()}
			// Run 1: two records a key (x and x+1000), then runs 2 and 3
			// one each (x): run r adds x+10000r to the list and maps it
			// to r.
			if _, res, err := runThreeStates(t, ckpt, 1, 2, tc.heap, 2000); err != nil || res.Attempts != 1 {
				t.Fatalf("run 1: %v after %d attempts", err, res.Attempts)
			}
			for run := int64(2); run <= 3; run++ {
				got, res, err := runThreeStates(t, ckpt, int(run), 5-int(run), pebble, 1000)
				if err != nil || res.Attempts != 1 {
					t.Fatalf("run %d: %v after %d attempts", run, err, res.Attempts)
				}
				if len(got) != 1000 {
					t.Fatalf("run %d: %d records, want 1000", run, len(got))
				}
				slices.Sort(got)
				want := make([]string, 0, 1000)
				for k := range int64(1000) {
					l := []int64{k + 10000, k + 1000 + 10000}
					m := map[int64]int64{k + 10000: 1, k + 1000 + 10000: 1}
					for r := int64(2); r < run; r++ {
						l = append(l, k+10000*r)
						m[k+10000*r] = r
					}
					want = append(want, threeStatesLine(k, run, l, m))
				}
				slices.Sort(want)
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("run %d on Pebble saw\n%s\nwant\n%s", run, got[i], want[i])
					}
				}
			}
		})
	}
}

// TestSwitchPebbleToHeap: the heap backend cannot read a Pebble
// checkpoint's keyed state: the restore fails at once (no restarts),
// naming the operator, both backends and the fix.
func TestSwitchPebbleToHeap(t *testing.T) {
	ckpt := filepath.Join(t.TempDir(), "ckpt")
	pebble := weir.StateBackend{Kind: weir.PebbleState, Dir: t.TempDir()}
	if _, res, err := runThreeStates(t, ckpt, 1, 2, pebble, 2000); err != nil || res.Attempts != 1 {
		t.Fatalf("run 1: %v after %d attempts", err, res.Attempts)
	}
	got, res, err := runThreeStates(t, ckpt, 2, 2, weir.StateBackend{}, 1000)
	if err == nil {
		t.Fatalf("restored a Pebble checkpoint on the heap without error; the job emitted %d records, the first %q", len(got), got[:min(1, len(got))])
	}
	if res.Attempts != 1 {
		t.Errorf("%d attempts, want 1: a restart cannot fix the backend", res.Attempts)
	}
	for _, s := range []string{"states", "pebble state backend", "heap", "--state-backend pebble"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if len(got) != 0 {
		t.Errorf("the job emitted %d records before it failed", len(got))
	}
}
