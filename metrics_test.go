package weir_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/generator"
)

// TestMetricsCountEveryOperatorsRecords: every operator's Records is the
// number of records that entered it, for operators chained behind others
// in a task as for the heads, and for records emitted outside a batch
// (windows fired by watermarks and at the end of input), counted here
// independently in the user functions (issue 19, defect 20: chained
// operators showed 0).
func TestMetricsCountEveryOperatorsRecords(t *testing.T) {
	const n = 30_000
	var mapped, filtered, kept, sumsOut, labelled, windowsOut atomic.Int64
	env := weir.New(weir.Config{Job: "metrics", Parallelism: 2, BatchSize: 64,
		Checkpoint: weir.CheckpointConfig{Mode: weir.NoCheckpoints}})
	src, err := generator.New(generator.Config[int64]{Count: n, Make: func(i int64) int64 { return i }})
	if err != nil {
		t.Fatal(err)
	}
	at := func(i int64) time.Time { return time.UnixMilli(i) }
	nums := weir.Source(env, "numbers", src, weir.Watermarks(weir.Monotonous(at)))
	// numbers → double → thirds is one task (both chained behind the
	// source), and so are sum → sums and window → label → windows.
	doubled := weir.Map(nums, "double", func(i int64) int64 { mapped.Add(1); return 2 * i })
	thirds := weir.Filter(doubled, "thirds", func(i int64) bool {
		filtered.Add(1)
		if i%3 == 0 {
			return false
		}
		kept.Add(1)
		return true
	})
	byDigit := weir.KeyBy(thirds, func(i int64) int64 { return i % 10 })
	sums := weir.Reduce(byDigit, "sum", func(a, b int64) int64 { return a + b })
	weir.Sink(sums, "sums", weir.SinkFunc(func(int64) error { sumsOut.Add(1); return nil }))
	windows := weir.WindowAggregate(weir.Window(byDigit, weir.Tumbling(50*time.Millisecond)), "window", weir.Count[int64]())
	label := weir.Map(windows, "label", func(r weir.WindowResult[int64, int64]) int64 { labelled.Add(1); return r.Value })
	weir.Sink(label, "windows", weir.SinkFunc(func(int64) error { windowsOut.Add(1); return nil }))
	if _, err := env.Execute(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{
		"numbers": n, "double": mapped.Load(), "thirds": filtered.Load(),
		"sum": kept.Load(), "sums": sumsOut.Load(),
		"window": kept.Load(), "label": labelled.Load(), "windows": windowsOut.Load(),
	}
	if mapped.Load() != n || labelled.Load() == 0 || labelled.Load() != windowsOut.Load() {
		t.Fatalf("the job took %d records into double and %d into label, %d into windows; want %d and some, as many", mapped.Load(), labelled.Load(), windowsOut.Load(), n)
	}
	got := map[string]int64{}
	for _, m := range env.Metrics() {
		got[m.UID] = m.Records
	}
	for uid, w := range want {
		if got[uid] != w {
			t.Errorf("operator %s: Records %d, want %d (every operator: %v)", uid, got[uid], w, got)
		}
	}
}
