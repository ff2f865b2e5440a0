package weir_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/connector/generator"
)

type reading struct {
	Sensor int64
	Value  int64
	At     int64 // event time, ms
}

func readingAt(r reading) time.Time { return time.UnixMilli(r.At) }

// readings: 20,000 readings of 7 sensors, 3 ms apart in event time, up to
// 90 ms out of order.
func readings(i int64) reading {
	return reading{Sensor: i % 7, Value: i % 13, At: 1_000_000 + i*3 - (i*7919)%31*3}
}

// windowJob sums each sensor's values in tumbling 1 s windows and counts
// its readings in sliding 2 s windows every 500 ms, from a generator with
// bounded out-of-orderness, into an exactly-once file sink in out; a slow
// generator runs at 1/25 of the rate. fail, if set, is called with every
// reading before it is summed.
func windowJob(t *testing.T, cfg weir.Config, out string, slow bool, fail func(reading)) *weir.Environment {
	t.Helper()
	e := env(cfg)
	rate := 50_000.0
	if slow {
		rate /= 25
	}
	g, err := generator.New(generator.Config[reading]{Count: 20_000, Make: readings, BatchSize: 100, RatePerSecond: rate})
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
	bySensor := weir.KeyBy(checked, func(r reading) int64 { return r.Sensor })
	sums := weir.WindowReduce(weir.Window(bySensor, weir.Tumbling(time.Second)), "sums",
		func(a, b reading) reading { return reading{Sensor: a.Sensor, Value: a.Value + b.Value} })
	counts := weir.WindowAggregate(weir.Window(bySensor, weir.Sliding(2*time.Second, 500*time.Millisecond)), "counts", weir.Count[reading]())
	sink, err := file.Sink(file.SinkConfig[string]{Dir: out, Format: lineFormat})
	if err != nil {
		t.Fatal(err)
	}
	weir.Sink(weir.Map(sums, "fmt sums", func(r weir.WindowResult[int64, reading]) string {
		return fmt.Sprintf("sum %d [%d,%d) %d", r.Key, r.Window.Start.UnixMilli(), r.Window.End.UnixMilli(), r.Value.Value)
	}), "out sums", sink)
	weir.Sink(weir.Map(counts, "fmt counts", func(r weir.WindowResult[int64, int64]) string {
		return fmt.Sprintf("count %d [%d,%d) %d", r.Key, r.Window.Start.UnixMilli(), r.Window.End.UnixMilli(), r.Value)
	}), "out counts", sink)
	weir.Sink(weir.Process(bySensor, "timer sums", func() weir.KeyedProcessFunction[int64, reading, string] { return &bucketSum{} }), "out timer sums", sink)
	return e
}

// bucketSum sums each sensor's values per second of event time with its
// own state and event-time timers, as a tumbling window does.
type bucketSum struct {
	sums *weir.MapState[int64, int64, int64] // bucket start → sum
}

func (b *bucketSum) Open(c *weir.KeyedContext[int64]) (err error) {
	b.sums, err = weir.NewMapState[int64, int64, int64](c, "sums")
	return err
}

func (b *bucketSum) Process(c *weir.KeyedContext[int64], r reading, _ weir.Collector[string]) error {
	if !c.Timestamp().After(c.Watermark()) {
		return fmt.Errorf("reading %v is late: at %v, watermark %v", r, c.Timestamp(), c.Watermark())
	}
	start := r.At - r.At%1000
	sum, _ := b.sums.Get(start)
	b.sums.Put(start, sum+r.Value)
	c.RegisterEventTimer(time.UnixMilli(start + 999))
	return nil
}

func (b *bucketSum) OnTimer(c *weir.KeyedContext[int64], at time.Time, out weir.Collector[string]) error {
	if c.TimeDomain() != weir.EventTime || !c.Timestamp().Equal(at) {
		return fmt.Errorf("timer at %v: domain %v, timestamp %v", at, c.TimeDomain(), c.Timestamp())
	}
	start := at.UnixMilli() - 999
	sum, _ := b.sums.Get(start)
	b.sums.Remove(start)
	out.Collect(fmt.Sprintf("timer sum %d [%d,%d) %d", c.Key(), start, start+1000, sum))
	return nil
}

// eventTimeConfig is the configuration of the event-time story tests:
// parallelism 2, a watermark every millisecond, restarts.
func eventTimeConfig(sb weir.StateBackend) weir.Config {
	return weir.Config{Parallelism: 2, WatermarkInterval: time.Millisecond, Restart: weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: 5}, StateBackend: sb}
}

// onBackends runs f with the heap backend (incremental checkpoints, the
// default, and full ones) and with Pebble.
func onBackends(t *testing.T, f func(t *testing.T, sb weir.StateBackend)) {
	t.Run("heap", func(t *testing.T) { f(t, weir.StateBackend{}) })
	t.Run("heap full", func(t *testing.T) { f(t, weir.StateBackend{Full: true}) })
	t.Run("pebble", func(t *testing.T) { f(t, weir.StateBackend{Kind: weir.PebbleState, Dir: t.TempDir()}) })
}

// runOnce runs a job built by build into a fresh output directory, and
// returns its committed lines, sorted. With failures, the job must have
// restarted.
func runOnce(t *testing.T, sb weir.StateBackend, failures bool, build func(cfg weir.Config, out string) *weir.Environment) []string {
	t.Helper()
	out := t.TempDir()
	if res := execute(t, build(eventTimeConfig(sb), out)); failures && res.Attempts < 2 {
		t.Fatalf("%d attempts: the injected failures did not fire", res.Attempts)
	}
	return sortedLines(t, out)
}

// runRescaled runs a job built by build at each parallelism of ps in turn,
// each restoring the latest checkpoint of the one before, which is
// cancelled after two completed checkpoints; the last runs to the end. It
// returns the committed lines, sorted. The runs cancelled midway are built
// slow (their sources at a fraction of the rate), so that their input
// outlasts two checkpoints however loaded the machine; the last at full
// speed.
func runRescaled(t *testing.T, sb weir.StateBackend, ps []int, build func(cfg weir.Config, out string, slow bool) *weir.Environment) []string {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	for i, p := range ps {
		cfg := eventTimeConfig(sb)
		cfg.Parallelism, cfg.Checkpoint.Dir = p, filepath.Join(dir, "ckpt")
		if i > 0 {
			cfg.Restore = "latest"
		}
		ctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
		completed := 0
		if i < len(ps)-1 {
			cfg.OnEvent = func(ev weir.JobEvent) {
				if ev.Kind == weir.EventCheckpointCompleted {
					if completed++; completed == 2 {
						cancel()
					}
				}
			}
		}
		_, err := build(cfg, out, i < len(ps)-1).Execute(ctx)
		cancel()
		if i < len(ps)-1 && !errors.Is(err, context.Canceled) {
			t.Fatalf("run at parallelism %d: %v (the input must outlast two checkpoints)", p, err)
		}
		if i == len(ps)-1 && err != nil {
			t.Fatalf("last run, at parallelism %d: %v", p, err)
		}
	}
	return sortedLines(t, out)
}

// sortedLines is what the file sink committed in dir, one entry a line.
func sortedLines(t *testing.T, dir string) []string {
	t.Helper()
	var got []string
	for l, n := range committedLines(t, dir) {
		for range n {
			got = append(got, l)
		}
	}
	slices.Sort(got)
	return got
}

// bruteForce computes windowJob's results directly.
func bruteForce() []string {
	sums, counts := map[string]int64{}, map[string]int64{}
	for i := range int64(20_000) {
		r := readings(i)
		start := r.At - r.At%1000
		sums[fmt.Sprintf("sum %d [%d,%d)", r.Sensor, start, start+1000)] += r.Value
		sums[fmt.Sprintf("timer sum %d [%d,%d)", r.Sensor, start, start+1000)] += r.Value
		for s := r.At - r.At%500; s > r.At-2000; s -= 500 {
			counts[fmt.Sprintf("count %d [%d,%d)", r.Sensor, s, s+2000)]++
		}
	}
	var out []string
	for k, v := range sums {
		out = append(out, fmt.Sprint(k, " ", v))
	}
	for k, v := range counts {
		out = append(out, fmt.Sprint(k, " ", v))
	}
	slices.Sort(out)
	return out
}

// TestEventTimeWindows: tumbling and sliding windows over event time with
// out-of-order records, and a keyed function summing with event-time
// timers, give what a brute-force count over the same records
// gives; so does a run that fails twice midway and restores, and one
// rescaled from 2 to 3 to 1 subtasks.
func TestEventTimeWindows(t *testing.T) {
	want := bruteForce()
	onBackends(t, func(t *testing.T, sb weir.StateBackend) {
		check := func(what string, got []string) {
			t.Helper()
			if !slices.Equal(got, want) {
				t.Fatalf("%s: %d results, want %d; first %v, want %v", what, len(got), len(want), got[:min(3, len(got))], want[:3])
			}
		}
		check("straight", runOnce(t, sb, false, func(cfg weir.Config, out string) *weir.Environment { return windowJob(t, cfg, out, false, nil) }))
		var n atomic.Int64
		check("after failures", runOnce(t, sb, true, func(cfg weir.Config, out string) *weir.Environment {
			return windowJob(t, cfg, out, false, func(reading) {
				if k := n.Add(1); k == 7000 || k == 15000 {
					panic(errors.New("injected failure"))
				}
			})
		}))
		check("rescaled 2 → 3 → 1", runRescaled(t, sb, []int{2, 3, 1}, func(cfg weir.Config, out string, slow bool) *weir.Environment {
			return windowJob(t, cfg, out, slow, nil)
		}))
	})
}
