package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/spf13/cobra"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/examples/wordcount"
)

func newWordCountBench() *cobra.Command {
	var (
		files, lines, parallelism, runs int
		wcfast                          string
	)
	cmd := &cobra.Command{
		Use:   "wordcount",
		Short: "Words per CPU-second of the word count: checkpoints off, every 1s and every 100ms, beside wcfast",
		Long: `Count the words of a generated corpus (--files × --lines lines of 8 words over
a 2,000-word vocabulary) with Weir's word count, with checkpoints off, every
second and every 100 ms (exactly-once, heap state), and with wcfast, the
fastest hand-written Go word count we know, built from --wcfast (its column is
skipped when that directory is absent). Each figure is the best of --runs
runs, and "all runs" gives the range; CPU time is user plus system time of
the process (of wcfast's process for wcfast).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if files < 1 || lines < 1 || parallelism < 1 || runs < 1 {
				return errors.New("--files, --lines, --parallelism and --runs must be at least 1")
			}
			stop, err := startProfile()
			if err != nil {
				return err
			}
			defer stop()
			return benchWordCount(cmd.Context(), cmd.OutOrStdout(), files, lines, parallelism, runs, wcfast)
		},
	}
	cmd.Flags().IntVar(&files, "files", 8, "input files")
	cmd.Flags().IntVar(&lines, "lines", 250_000, "lines per input file (8 words each)")
	cmd.Flags().IntVar(&parallelism, "parallelism", 2, "subtasks per operator (wcfast: output shards)")
	cmd.Flags().IntVar(&runs, "runs", 3, "runs of each configuration; the best counts")
	cmd.Flags().StringVar(&wcfast, "wcfast", "../shared/baselines/wcfast", "directory of wcfast's source (skipped when absent)")
	return cmd
}

type wcResult struct {
	name      string
	cpu, wall time.Duration
	// worst is the most CPU time a run took, for the spread between runs.
	worst       time.Duration
	allocs      float64 // per word; -1: not measured
	checkpoints int
}

func benchWordCount(ctx context.Context, w io.Writer, files, lines, parallelism, runs int, wcfastDir string) error {
	dir, err := os.MkdirTemp("", "weir-bench-wordcount-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	want, err := wordcount.WriteBenchCorpus(dir, files, lines)
	if err != nil {
		return err
	}
	words := int64(files) * int64(lines) * 8
	input := filepath.Join(dir, "in-*.txt")
	fmt.Fprintf(w, "weir bench wordcount: %d words (%d files, 2,000 distinct), parallelism %d, %d CPUs, best of %d runs\n\n",
		words, files, parallelism, goruntime.NumCPU(), runs)

	var results []wcResult
	for _, c := range []struct {
		name     string
		mode     weir.Mode
		interval time.Duration
	}{
		{"weir, checkpoints off", weir.NoCheckpoints, 0},
		{"weir, checkpoints every 1s", weir.ExactlyOnce, time.Second},
		{"weir, checkpoints every 100ms", weir.ExactlyOnce, 100 * time.Millisecond},
	} {
		var best wcResult
		for r := range runs {
			res, err := runWeirWordCount(ctx, input, filepath.Join(dir, fmt.Sprintf("out-%s-%d", c.mode, r)), parallelism, c.mode, c.interval, want)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			worst := max(best.worst, res.cpu)
			if r == 0 || res.cpu < best.cpu {
				best = res
			}
			best.worst = worst
		}
		best.name = c.name
		results = append(results, best)
	}
	fast, why := runWCFast(ctx, wcfastDir, dir, input, parallelism, runs, want)
	if why == "" {
		results = append(results, fast)
	}

	const row = "%-30s %12s %14s %8s %11s %12s %12s\n"
	fmt.Fprintf(w, row, "", "words/cpu-s", "all runs", "ns/word", "cores used", "allocs/word", "checkpoints")
	for _, r := range results {
		perCPU := float64(words) / r.cpu.Seconds()
		allocs, ckpts := "-", "-"
		if r.allocs >= 0 {
			allocs = fmt.Sprintf("%.4f", r.allocs)
			ckpts = fmt.Sprint(r.checkpoints)
		}
		spread := si(float64(words)/r.worst.Seconds()) + "–" + si(perCPU)
		fmt.Fprintf(w, row, r.name, si(perCPU), spread, fmt.Sprintf("%.1f", 1e9/perCPU), fmt.Sprintf("%.2f", r.cpu.Seconds()/r.wall.Seconds()), allocs, ckpts)
	}
	if why != "" {
		fmt.Fprintf(w, "\nwcfast: %s\n", why)
		return nil
	}
	fmt.Fprintf(w, "\nweir (checkpoints every 1s) / wcfast, per CPU-second: %.3f\n", fast.cpu.Seconds()/results[1].cpu.Seconds())
	return nil
}

func runWeirWordCount(ctx context.Context, input, output string, parallelism int, mode weir.Mode, interval time.Duration, want map[string]int64) (wcResult, error) {
	defer os.RemoveAll(output)
	ckpt, err := os.MkdirTemp("", "weir-bench-ckpt-")
	if err != nil {
		return wcResult{}, err
	}
	defer os.RemoveAll(ckpt)
	env, err := wordcount.Build(wordcount.Options{
		Input: input, Output: output, Parallelism: parallelism,
		Checkpoint: weir.CheckpointConfig{Mode: mode, Interval: interval, Dir: ckpt},
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return wcResult{}, err
	}
	goruntime.GC()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	m0 := ms.Mallocs
	cpu0, err := cpuTime()
	if err != nil {
		return wcResult{}, err
	}
	start := time.Now()
	res, err := env.Execute(ctx)
	wall := time.Since(start)
	cpu1, _ := cpuTime()
	goruntime.ReadMemStats(&ms)
	if err != nil {
		return wcResult{}, err
	}
	if err := verifyOutput(output, want); err != nil {
		return wcResult{}, err
	}
	var words int64
	for _, n := range want {
		words += n
	}
	return wcResult{cpu: cpu1 - cpu0, wall: wall, allocs: float64(ms.Mallocs-m0) / float64(words), checkpoints: res.Checkpoints}, nil
}

// runWCFast builds wcfast from dir and runs it; why says why it did not.
func runWCFast(ctx context.Context, src, work, input string, parallelism, runs int, want map[string]int64) (wcResult, string) {
	if _, err := os.Stat(filepath.Join(src, "main.go")); err != nil {
		return wcResult{}, fmt.Sprintf("skipped: no source at %s (--wcfast)", src)
	}
	bin := filepath.Join(work, "wcfast")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return wcResult{}, fmt.Sprintf("skipped: go build in %s: %v\n%s", src, err, out)
	}
	best := wcResult{name: "wcfast", allocs: -1}
	for r := range runs {
		out := filepath.Join(work, fmt.Sprint("wcfast-out-", r))
		run := exec.CommandContext(ctx, bin, "-input", input, "-output", out, "-parallelism", fmt.Sprint(parallelism))
		var stderr bytes.Buffer
		run.Stderr = &stderr
		start := time.Now()
		if err := run.Run(); err != nil {
			return wcResult{}, fmt.Sprintf("failed: %v\n%s", err, stderr.String())
		}
		wall := time.Since(start)
		cpu := run.ProcessState.UserTime() + run.ProcessState.SystemTime()
		err := verifyOutput(out, want)
		os.RemoveAll(out)
		if err != nil {
			return wcResult{}, err.Error()
		}
		if r == 0 || cpu < best.cpu {
			best.cpu, best.wall = cpu, wall
		}
		best.worst = max(best.worst, cpu)
	}
	return best, ""
}

// verifyOutput checks that the output in dir holds every word's counts
// 1..n exactly once.
func verifyOutput(dir string, want map[string]int64) error {
	rep, err := wordcount.Verify(vfs.Default, dir, want, false)
	if err == nil && !rep.OK() {
		err = errors.New(rep.String())
	}
	if err != nil {
		return fmt.Errorf("output %s: %w", dir, err)
	}
	return nil
}
