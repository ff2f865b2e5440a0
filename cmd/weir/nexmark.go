package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/examples/nexmark"
)

// flinkPerCore is Flink 2.0's published throughput per CPU core
// (nexmark/nexmark GUIDE_V2.md: 8 single-slot task managers, RocksDB
// incremental checkpoints every 30 s, 100K/s event-time rate).
var flinkPerCore = map[string]float64{
	"q0": 379e3, "q1": 395e3, "q2": 414e3, "q3": 219e3, "q4": 28.2e3, "q5": 74.5e3, "q7": 22.9e3, "q8": 162e3,
}

func newBench() *cobra.Command {
	bench := &cobra.Command{Use: "bench", Short: "Benchmarks"}
	bench.PersistentFlags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof; a default.pgo)")
	var queries, output, backend, stateDir, ckptDir, mode string
	var incremental, traceCheckpoints bool
	events := int64(10_000_000)
	var rate float64
	var parallelism int
	var interval time.Duration
	nx := &cobra.Command{
		Use:   "nexmark",
		Short: "Run Nexmark queries and report events per second per CPU core, next to Flink's",
		Long: `Run Nexmark queries over the built-in generator, one after the other, each with
its own checkpoints, and print per query: events, wall time, CPU cores used
(process CPU time ÷ wall time), events per second per core, checkpoints completed
with their duration (p50, p99) and the largest one's size, the results, and Flink
2.0's published per-core figure with the ratio. Results go to a black hole, as
in the reference runs, or with --output as JSON lines to DIR/<query>.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			qs, err := nexmark.Lookup(queries)
			if err != nil {
				return fmt.Errorf("--query: %w", err)
			}
			m, err := weir.ParseMode(mode)
			switch {
			case err != nil:
				return fmt.Errorf("--mode: %w", err)
			case events < 1:
				return fmt.Errorf("--events %d: must be at least 1", events)
			case parallelism < 1:
				return fmt.Errorf("--parallelism %d: must be at least 1", parallelism)
			case rate <= 0:
				return fmt.Errorf("--rate %v: must be above 0", rate)
			case m != weir.NoCheckpoints && interval <= 0:
				return fmt.Errorf("--checkpoint-interval %v: must be above 0", interval)
			case output != "" && m == weir.NoCheckpoints:
				return errors.New("--output writes exactly-once, at checkpoints: it needs --mode exactly-once or at-least-once")
			}
			sb, err := stateBackend(cmd, backend, stateDir, incremental)
			if err != nil {
				return err
			}
			if ckptDir == "" && m != weir.NoCheckpoints {
				if ckptDir, err = os.MkdirTemp("", "weir-nexmark-"); err != nil {
					return err
				}
				defer os.RemoveAll(ckptDir)
			}
			fmt.Fprintf(os.Stderr, "weir: nexmark, %d events at %s/s of event time, parallelism %d, checkpoints %s every %v, %d CPUs\n",
				events, si(rate), parallelism, m, interval, runtime.NumCPU())
			stop, err := startProfile()
			if err != nil {
				return err
			}
			defer stop()
			tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "query\tevents\twall\tcores\tevents/s/core\tcheckpoints\tp50\tp99\tstate\tresults\tFlink/core\tratio\t")
			for _, q := range qs {
				var traces io.Writer
				if traceCheckpoints {
					traces = os.Stderr
				}
				r, err := benchQuery(cmd, q, nexmark.Config{Events: events, Rate: rate}, parallelism, m, interval, ckptDir, output, sb, traces)
				if err != nil {
					tw.Flush()
					return fmt.Errorf("%s: %w", q.Name, err)
				}
				fmt.Fprintf(tw, "%s\t%d\t%.2fs\t%.2f\t%s\t%d\t%s\t%s\t%s\t%d\t%s\t%.2f×\t\n", q.Name, events, r.wall.Seconds(), r.cores(),
					si(r.perCore(events)), r.checkpoints, ms(r.p50), ms(r.p99), byteSize(r.state), r.results,
					si(flinkPerCore[q.Name]), r.perCore(events)/flinkPerCore[q.Name])
			}
			return tw.Flush()
		},
	}
	fl := nx.Flags()
	fl.StringVar(&queries, "query", "all", "queries to run: a comma-separated list (q0,q5) or all")
	fl.Var((*count)(&events), "events", "events to generate per query (10000000, 10M, 500k)")
	fl.Float64Var(&rate, "rate", nexmark.DefaultRate, "event-time rate: events per second of event time (it sets timestamps; generation runs flat out)")
	fl.IntVar(&parallelism, "parallelism", runtime.NumCPU(), "subtasks per operator (and generator splits)")
	fl.DurationVar(&interval, "checkpoint-interval", time.Second, "time between checkpoints")
	fl.StringVar(&mode, "mode", "exactly-once", "checkpoint mode: exactly-once, at-least-once or none")
	fl.StringVar(&ckptDir, "checkpoint-dir", "", "directory for checkpoints (default: a temporary one, removed at the end)")
	addStateFlags(nx, &backend, &stateDir, &incremental)
	fl.BoolVar(&traceCheckpoints, "trace-checkpoints", false, "print each completed checkpoint's duration, bytes uploaded and its tasks' longest alignment, synchronous and asynchronous parts (to standard error)")
	fl.StringVar(&output, "output", "", "write each query's results as JSON lines to DIR/<query> instead of a black hole")
	bench.AddCommand(nx, newStateBench(), newWordCountBench(), newClusterBench())
	return bench
}

// benchResult is one query's run.
type benchResult struct {
	wall, cpu   time.Duration
	checkpoints int
	p50, p99    time.Duration
	state       int64
	results     int64
}

func (r benchResult) cores() float64 { return r.cpu.Seconds() / r.wall.Seconds() }

func (r benchResult) perCore(events int64) float64 { return float64(events) / r.cpu.Seconds() }

func benchQuery(cmd *cobra.Command, q nexmark.Query, cfg nexmark.Config, p int, mode weir.Mode, interval time.Duration, ckptDir, output string, sb weir.StateBackend, traces io.Writer) (benchResult, error) {
	var r benchResult
	var results atomic.Int64
	var state atomic.Int64
	out := nexmark.Output{Results: &results}
	if output != "" {
		out.Dir = filepath.Join(output, q.Name)
	}
	env := weir.New(weir.Config{Job: "nexmark-" + q.Name, Parallelism: p,
		Checkpoint: weir.CheckpointConfig{Mode: mode, Interval: interval, Dir: ckptDir, DiscardOnCancel: true},
		Fresh:      mode != weir.NoCheckpoints, StateBackend: sb,
		OnEvent: func(e weir.JobEvent) {
			if e.Kind != weir.EventCheckpointCompleted {
				return
			}
			if e.Size > state.Load() {
				state.Store(e.Size) // only the job's driver calls OnEvent
			}
			if traces != nil {
				traceCheckpoint(traces, q.Name, e)
			}
		}})
	if err := nexmark.Add(env, cfg, q, out); err != nil {
		return r, err
	}
	cpu0, err := cpuTime()
	if err != nil {
		return r, err
	}
	start := time.Now()
	res, err := env.Execute(cmd.Context())
	if err != nil {
		return r, err
	}
	r.wall = time.Since(start)
	cpu1, err := cpuTime()
	if err != nil {
		return r, err
	}
	r.cpu = cpu1 - cpu0
	r.checkpoints, r.state, r.results = res.Checkpoints, state.Load(), results.Load()
	if d := slices.Sorted(slices.Values(res.Durations)); len(d) > 0 {
		r.p50, r.p99 = d[len(d)/2], d[min(len(d)-1, len(d)*99/100)]
	}
	return r, nil
}

// traceCheckpoint prints where a completed checkpoint's time went: from the
// trigger to its completion, the bytes it uploaded, and the longest
// alignment, synchronous and asynchronous part of any of its tasks, with
// the task that acknowledged last and its parts.
func traceCheckpoint(w io.Writer, query string, e weir.JobEvent) {
	if len(e.Tasks) == 0 {
		return
	}
	var align, sync, async time.Duration
	last := e.Tasks[len(e.Tasks)-1] // they are in the order they acknowledged
	for _, t := range e.Tasks {
		align, sync, async = max(align, t.Align), max(sync, t.Sync), max(async, t.Async)
	}
	fmt.Fprintf(w, "%s checkpoint %d: %v, uploaded %s of %s; longest align %v, sync %v, async %v; last %v (acked %v: align %v, sync %v, async %v)\n",
		query, e.ID, e.Duration.Round(time.Millisecond), byteSize(e.Uploaded), byteSize(e.Size),
		align.Round(time.Millisecond), sync.Round(time.Millisecond), async.Round(time.Millisecond),
		last.Task, last.Acked.Round(time.Millisecond), last.Align.Round(time.Millisecond),
		last.Sync.Round(time.Millisecond), last.Async.Round(time.Millisecond))
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("CPU time: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond))
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

func newNexmark() *cobra.Command {
	nx := &cobra.Command{Use: "nexmark", Short: "Nexmark tools"}
	events := int64(10_000_000)
	var rate float64
	var parallelism int
	var output string
	gen := &cobra.Command{
		Use:   "generate",
		Short: "Write the events the Nexmark source generates as JSON lines",
		Long: `Write the events the Nexmark source generates, as JSON lines ({"person":…},
{"auction":…} or {"bid":…}), split by split: 'weir bench nexmark' with the same
--events, --rate and --parallelism reads exactly these events.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output == "" {
				return errors.New("--output is required (a file, or - for standard output)")
			}
			if parallelism < 1 {
				return fmt.Errorf("--parallelism %d: must be at least 1", parallelism)
			}
			if events < 1 {
				return fmt.Errorf("--events %d: must be at least 1", events)
			}
			seq, err := nexmark.Events(nexmark.Config{Events: events, Rate: rate}, parallelism)
			if err != nil {
				return err
			}
			var w io.Writer = os.Stdout
			if output != "-" {
				f, err := os.Create(output)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			}
			bw := bufio.NewWriterSize(w, 1<<20)
			enc := json.NewEncoder(bw)
			for e := range seq {
				if err := enc.Encode(e); err != nil {
					return fmt.Errorf("write %s: %w", output, err)
				}
				if cmd.Context().Err() != nil {
					return exitError{code: 130, msg: "interrupted"}
				}
			}
			if err := bw.Flush(); err != nil {
				return fmt.Errorf("write %s: %w", output, err)
			}
			if f, ok := w.(*os.File); ok && f != os.Stdout {
				return f.Close()
			}
			return nil
		},
	}
	fl := gen.Flags()
	fl.Var((*count)(&events), "events", "events to generate (10000000, 10M, 500k)")
	fl.Float64Var(&rate, "rate", nexmark.DefaultRate, "event-time rate: events per second of event time")
	fl.IntVar(&parallelism, "parallelism", runtime.NumCPU(), "generator splits, as the source of a job at this parallelism has")
	fl.StringVar(&output, "output", "", "the file to write, or - for standard output")
	nx.AddCommand(gen)
	return nx
}

// count is a flag holding a count, with an optional k, M or G suffix.
type count int64

func (c *count) String() string { return strconv.FormatInt(int64(*c), 10) }
func (c *count) Type() string   { return "count" }

func (c *count) Set(s string) error {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "k"):
		mult, s = 1_000, strings.TrimSuffix(s, "k")
	case strings.HasSuffix(s, "M"):
		mult, s = 1_000_000, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1_000_000_000, strings.TrimSuffix(s, "G")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("want a whole number, with k, M or G if you like (10M)")
	}
	*c = count(n * mult)
	return nil
}
