package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
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
skipped when that directory is absent). --runs rounds each run every
configuration once, in turn, so that a slow spell of a shared machine does
not fall on one of them only; a row gives the best run, the median, and the
range of all runs. CPU time is user plus system time of the process (of
wcfast's process for wcfast).`,
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
	cmd.Flags().IntVar(&runs, "runs", 3, "rounds: runs of each configuration, taken in turn")
	cmd.Flags().StringVar(&wcfast, "wcfast", "../shared/baselines/wcfast", "directory of wcfast's source (skipped when absent)")
	return cmd
}

type wcResult struct {
	cpu, wall   time.Duration
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
	fmt.Fprintf(w, "weir bench wordcount: %d words (%d files, 2,000 distinct), parallelism %d, %d CPUs, %d rounds\n\n",
		words, files, parallelism, goruntime.NumCPU(), runs)

	type config struct {
		name string
		run  func(round int) (wcResult, error)
	}
	var configs []config
	for _, c := range []struct {
		name      string
		mode      weir.Mode
		interval  time.Duration
		alignment weir.Alignment
		debloat   time.Duration
	}{
		{"weir, checkpoints off", weir.NoCheckpoints, 0, weir.Aligned, 0},
		{"weir, checkpoints every 1s", weir.ExactlyOnce, time.Second, weir.Aligned, 0},
		{"weir, checkpoints every 100ms", weir.ExactlyOnce, 100 * time.Millisecond, weir.Aligned, 0},
		{"weir, unaligned every 100ms", weir.ExactlyOnce, 100 * time.Millisecond, weir.Unaligned, 0},
		{"weir, 100ms, debloat to 1s", weir.ExactlyOnce, 100 * time.Millisecond, weir.Aligned, time.Second},
	} {
		configs = append(configs, config{c.name, func(r int) (wcResult, error) {
			out := filepath.Join(dir, fmt.Sprintf("out-%s-%v-%v-%d", c.mode, c.alignment, c.debloat, r))
			return runWeirWordCount(ctx, input, out, parallelism, weir.CheckpointConfig{Mode: c.mode, Interval: c.interval, Alignment: c.alignment}, c.debloat, want)
		}})
	}
	bin, why := buildWCFast(ctx, wcfastDir, dir)
	if why == "" {
		configs = append(configs, config{"wcfast", func(r int) (wcResult, error) {
			return runWCFast(ctx, bin, filepath.Join(dir, fmt.Sprint("wcfast-out-", r)), input, parallelism, want)
		}})
	}
	// Rounds take every configuration in turn, so that a slow spell of a
	// shared machine does not fall on one configuration only.
	results := make([][]wcResult, len(configs))
	for r := range runs {
		for i, c := range configs {
			res, err := c.run(r)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			results[i] = append(results[i], res)
		}
	}

	const row = "%-30s %12s %8s %14s %8s %11s %12s %12s\n"
	fmt.Fprintf(w, row, "", "words/cpu-s", "median", "all runs", "ns/word", "cores used", "allocs/word", "checkpoints")
	perCPU := func(r wcResult) float64 { return float64(words) / r.cpu.Seconds() }
	best := make([]wcResult, len(configs))
	median := make([]wcResult, len(configs))
	for i, c := range configs {
		rs := slices.SortedFunc(slices.Values(results[i]), func(a, b wcResult) int { return cmp.Compare(a.cpu, b.cpu) })
		best[i], median[i] = rs[0], rs[len(rs)/2]
		allocs, ckpts := "-", "-"
		if best[i].allocs >= 0 {
			allocs = fmt.Sprintf("%.4f", best[i].allocs)
			ckpts = fmt.Sprint(best[i].checkpoints)
		}
		fmt.Fprintf(w, row, c.name, si(perCPU(best[i])), si(perCPU(median[i])), si(perCPU(rs[len(rs)-1]))+"–"+si(perCPU(best[i])),
			fmt.Sprintf("%.1f", 1e9/perCPU(best[i])), fmt.Sprintf("%.2f", best[i].cpu.Seconds()/best[i].wall.Seconds()), allocs, ckpts)
	}
	if why != "" {
		fmt.Fprintf(w, "\nwcfast: %s\n", why)
		return nil
	}
	fast := len(configs) - 1
	fmt.Fprintf(w, "\nweir (checkpoints every 1s) / wcfast, per CPU-second: %.3f (medians: %.3f)\n",
		best[fast].cpu.Seconds()/best[1].cpu.Seconds(), median[fast].cpu.Seconds()/median[1].cpu.Seconds())
	return nil
}

func runWeirWordCount(ctx context.Context, input, output string, parallelism int, cc weir.CheckpointConfig, debloat time.Duration, want map[string]int64) (wcResult, error) {
	defer os.RemoveAll(output)
	ckpt, err := os.MkdirTemp("", "weir-bench-ckpt-")
	if err != nil {
		return wcResult{}, err
	}
	defer os.RemoveAll(ckpt)
	env, err := wordcount.Build(wordcount.Options{
		Input: input, Output: output, Parallelism: parallelism,
		Checkpoint: weir.CheckpointConfig{Mode: cc.Mode, Interval: cc.Interval, Alignment: cc.Alignment, Dir: ckpt},
		Logger:     slog.New(slog.DiscardHandler), BufferDebloat: debloat,
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

// buildWCFast builds wcfast from src into work; why says why it did not.
func buildWCFast(ctx context.Context, src, work string) (bin, why string) {
	if _, err := os.Stat(filepath.Join(src, "main.go")); err != nil {
		return "", fmt.Sprintf("skipped: no source at %s (--wcfast)", src)
	}
	bin = filepath.Join(work, "wcfast")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Sprintf("skipped: go build in %s: %v\n%s", src, err, out)
	}
	return bin, ""
}

// runWCFast runs wcfast once and checks its output.
func runWCFast(ctx context.Context, bin, out, input string, parallelism int, want map[string]int64) (wcResult, error) {
	defer os.RemoveAll(out)
	run := exec.CommandContext(ctx, bin, "-input", input, "-output", out, "-parallelism", fmt.Sprint(parallelism))
	var stderr bytes.Buffer
	run.Stderr = &stderr
	start := time.Now()
	if err := run.Run(); err != nil {
		return wcResult{}, fmt.Errorf("%v\n%s", err, stderr.String())
	}
	wall := time.Since(start)
	if err := verifyOutput(out, want); err != nil {
		return wcResult{}, err
	}
	return wcResult{cpu: run.ProcessState.UserTime() + run.ProcessState.SystemTime(), wall: wall, allocs: -1}, nil
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
