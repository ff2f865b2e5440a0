package weir_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

// Case 15: Execute validates the graph and returns an error for each
// mistake, instead of panicking or producing wrong output.
func TestExecuteRefusesBrokenGraphs(t *testing.T) {
	nums := func(e *weir.Environment) *weir.Stream[int64] {
		return weir.Source(e, "nums", gen(t, 10, func(i int64) int64 { return i }))
	}
	out := (&collect[int64]{}).sink()
	cases := []struct {
		name  string
		build func(e *weir.Environment)
		want  string
	}{
		{"a source without a sink", func(e *weir.Environment) { nums(e) }, `operator "nums" has no consumer`},
		{"a map without a sink", func(e *weir.Environment) {
			weir.Map(nums(e), "double", func(v int64) int64 { return 2 * v })
		}, `operator "double" has no consumer`},
		{"streams of two environments", func(e *weir.Environment) {
			other := weir.New(weir.Config{})
			weir.Sink(weir.Union(nums(e), "both", []*weir.Stream[int64]{nums(other)}), "out", out)
		}, `operator "both" reads a stream of another Environment`},
		{"a nil stream", func(e *weir.Environment) {
			weir.Sink(weir.Union(nums(e), "both", []*weir.Stream[int64]{nil}), "out", out)
		}, `operator "both" reads a nil stream`},
		{"a nil map function", func(e *weir.Environment) {
			weir.Sink(weir.Map[int64, int64](nums(e), "m", nil), "out", out)
		}, `operator "m": its function is nil`},
		{"a nil filter", func(e *weir.Environment) {
			weir.Sink(weir.Filter(nums(e), "f", nil), "out", out)
		}, `operator "f": its function is nil`},
		{"a nil key function", func(e *weir.Environment) {
			weir.Sink(weir.Reduce(weir.KeyBy[int64, int64](nums(e), nil), "r", func(a, b int64) int64 { return a + b }), "out", out)
		}, "the key function is nil"},
		{"a nil reduce function", func(e *weir.Environment) {
			weir.Sink(weir.Reduce(weir.KeyBy(nums(e), func(v int64) int64 { return v }), "r", nil), "out", out)
		}, `operator "r": its function is nil`},
		{"a nil sink", func(e *weir.Environment) { weir.Sink[int64](nums(e), "out", nil) }, `operator "out": its function is nil`},
		{"a nil source", func(e *weir.Environment) {
			weir.Sink(weir.Source[int64](e, "src", nil), "out", out)
		}, `operator "src": its function is nil`},
		{"event-time windows without event time", func(e *weir.Environment) {
			w := weir.Window(weir.KeyBy(nums(e), func(v int64) int64 { return v }), weir.Tumbling(time.Second))
			weir.Sink(weir.Map(weir.WindowAggregate(w, "w", weir.Count[int64]()), "v", value), "out", out)
		}, `operator "w": event-time windows need records with event time on every input`},
		{"a window join of a stream without event time", func(e *weir.Environment) {
			byV := func(v int64) int64 { return v }
			timed := weir.Source(e, "timed", gen(t, 10, func(i int64) int64 { return i }), weir.Watermarks(weir.Monotonous(at)))
			weir.Sink(weir.WindowJoin(weir.KeyBy(timed, byV), weir.KeyBy(nums(e), byV), weir.Tumbling(time.Second), "j", sum), "out", out)
		}, `operator "j": window joins need records with event time on every input`},
		{"windows after a union of streams with and without event time", func(e *weir.Environment) {
			timed := weir.Source(e, "timed", gen(t, 10, func(i int64) int64 { return i }), weir.Watermarks(weir.Monotonous(at)))
			both := weir.Union(timed, "both", []*weir.Stream[int64]{nums(e)})
			w := weir.Window(weir.KeyBy(both, func(v int64) int64 { return v }), weir.Tumbling(time.Second))
			weir.Sink(weir.Map(weir.WindowAggregate(w, "w", weir.Count[int64]()), "v", value), "out", out)
		}, `operator "w": event-time windows need records with event time on every input`},
		{"an interval join with bounds the wrong way round", func(e *weir.Environment) {
			byV := func(v int64) int64 { return v }
			timed := weir.KeyBy(weir.Source(e, "timed", gen(t, 10, func(i int64) int64 { return i }), weir.Watermarks(weir.Monotonous(at))), byV)
			weir.Sink(weir.IntervalJoin(timed, timed, time.Second, -time.Second, "j", sum), "out", out)
		}, `operator "j": interval join lower bound 1s is above its upper bound -1s`},
		{"a session window join", func(e *weir.Environment) {
			byV := func(v int64) int64 { return v }
			timed := weir.KeyBy(weir.Source(e, "timed", gen(t, 10, func(i int64) int64 { return i }), weir.Watermarks(weir.Monotonous(at))), byV)
			weir.Sink(weir.WindowJoin(timed, timed, weir.Session(time.Second), "j", sum), "out", out)
		}, `operator "j": co-group and join windows must be tumbling or sliding, on event time`},
		{"a window join with a slide of 0", func(e *weir.Environment) {
			byV := func(v int64) int64 { return v }
			timed := weir.KeyBy(weir.Source(e, "timed", gen(t, 10, func(i int64) int64 { return i }), weir.Watermarks(weir.Monotonous(at))), byV)
			weir.Sink(weir.WindowJoin(timed, timed, weir.Sliding(10*time.Millisecond, 0), "j", sum), "out", out)
		}, `operator "j": window size 10ms and slide 0s must be whole milliseconds above 0`},
		{"allowed lateness on processing time", func(e *weir.Environment) {
			w := weir.Window(weir.KeyBy(nums(e), func(v int64) int64 { return v }), weir.Tumbling(time.Second).ProcessingTime(), weir.AllowedLateness(time.Second))
			weir.Sink(weir.Map(weir.WindowAggregate(w, "w", weir.Count[int64]()), "v", value), "out", out)
		}, `operator "w": allowed lateness is for event-time windows`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := env(weir.Config{})
			c.build(e)
			_, err := e.Execute(context.Background())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

func at(v int64) time.Time                          { return time.UnixMilli(v) }
func sum(a, b int64) int64                          { return a + b }
func value(r weir.WindowResult[int64, int64]) int64 { return r.Value }

// Case 16: the zero Config works, with the documented defaults: a
// checkpoint interval, checkpoints kept on cancel, slog.Default() as the
// logger.
func TestZeroConfigDefaults(t *testing.T) {
	var logs bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	defer slog.SetDefault(old)
	e := weir.New(weir.Config{})
	if c := e.Config(); c.Checkpoint.Interval != weir.DefaultCheckpointInterval || c.Checkpoint.Mode != weir.ExactlyOnce || c.Restart != weir.DefaultRestart {
		t.Fatalf("defaults %+v", c)
	}
	var c collect[int64]
	weir.Sink(weir.Source(e, "nums", gen(t, 100, func(i int64) int64 { return i })), "out", c.sink())
	execute(t, e)
	if len(c.values()) != 100 {
		t.Fatalf("%d records", len(c.values()))
	}
	// The bounded job ended with its final checkpoint, logged at info.
	if !strings.Contains(logs.String(), "checkpoint completed") {
		t.Fatalf("nothing logged to slog.Default():\n%s", logs.String())
	}

	// Checkpoints survive a cancel unless DiscardOnCancel.
	dir := t.TempDir()
	for _, discard := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		e := weir.New(weir.Config{Job: "j", Fresh: true, Checkpoint: weir.CheckpointConfig{Interval: 5 * time.Millisecond, Dir: dir, DiscardOnCancel: discard},
			OnEvent: func(ev weir.JobEvent) {
				if ev.Kind == weir.EventCheckpointCompleted {
					cancel()
				}
			}})
		g, _ := newRateLimited(1000, 1_000_000)
		weir.Sink(weir.Source(e, "nums", g), "out", (&collect[int64]{}).sink())
		if _, err := e.Execute(ctx); !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		kept, _ := filepath.Glob(filepath.Join(dir, "j", "chk-*", "_metadata"))
		if (len(kept) > 0) == discard {
			t.Errorf("DiscardOnCancel %v: checkpoints left %v", discard, kept)
		}
	}
}

// Case 16: a run that ends by its context's deadline after failures says
// both: the deadline, and the failure.
func TestDeadlineErrorCarriesTheLastFailure(t *testing.T) {
	// The deadline passes once the job waits to restart, however slow
	// the machine is to get there.
	ctx := &expiring{Context: context.Background(), done: make(chan struct{})}
	e := env(weir.Config{Restart: weir.FixedDelay{Delay: time.Hour, MaxAttempts: 5}, OnEvent: func(ev weir.JobEvent) {
		if ev.Kind == weir.EventRestarting {
			ctx.once.Do(func() { close(ctx.done) })
		}
	}})
	out := weir.Process(weir.KeyBy(weir.Source(e, "n", gen(t, 50, func(i int64) int64 { return i })), func(v int64) int64 { return v }), "p",
		func() weir.KeyedProcessFunction[int64, int64, int64] { return poison{} })
	weir.Sink(out, "out", (&collect[int64]{}).sink())
	_, err := e.Execute(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "record 7 cannot be processed") {
		t.Fatalf("error %v; want the deadline and the failure", err)
	}
}

// expiring is a context whose deadline passes when done is closed.
type expiring struct {
	context.Context // never done
	done            chan struct{}
	once            sync.Once
}

func (c *expiring) Done() <-chan struct{} { return c.done }

func (c *expiring) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}
