package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/spf13/cobra"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/examples/wordcount"
)

func newDemo() *cobra.Command {
	var lines, files int
	var keep bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the word count with a crash in the middle, recover, and verify exactly-once output",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return demo(cmd.Context(), cmd.OutOrStdout(), files, lines, keep)
		},
	}
	cmd.Flags().IntVar(&files, "files", 4, "input files to generate")
	cmd.Flags().IntVar(&lines, "lines", 300_000, "lines per input file")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the demo's directory (input, checkpoints, output)")
	return cmd
}

// demo generates a corpus, counts its words with checkpoints every 200ms,
// fails the counting operator once midway, lets Weir recover from the
// latest checkpoint, and verifies the committed output by counting.
func demo(ctx context.Context, w io.Writer, files, lines int, keep bool) error {
	dir, err := os.MkdirTemp("", "weir-demo-")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(dir)
	}
	fmt.Fprintf(w, "Weir demo: exactly-once word count with a crash and a recovery\n  working in %s\n\n", dir)
	paths, err := writeCorpus(dir, files, lines)
	if err != nil {
		return err
	}
	want, err := wordcount.Expected(vfs.Default, paths)
	if err != nil {
		return err
	}
	var total int64
	for _, n := range want {
		total += n
	}
	fmt.Fprintf(w, "1. generated %d files, %d lines, %d words (%d distinct)\n", files, files*lines, total, len(want))

	// The crash is armed once two checkpoints have completed, so the
	// recovery restores real state and rewinds the sources mid-file.
	const crashAfterCheckpoints = 2
	var armed atomic.Bool
	var counted, crashed atomic.Int64
	var checkpoints, restarts atomic.Int64
	events := make(chan string, 64)
	say := func(s string) {
		select {
		case events <- s:
		default:
		}
	}
	env, err := wordcount.Build(wordcount.Options{
		Input: filepath.Join(dir, "input", "*.txt"), Output: filepath.Join(dir, "output"), Parallelism: 2,
		Checkpoint: weir.CheckpointConfig{Interval: 200 * time.Millisecond, Dir: filepath.Join(dir, "checkpoints"), Retained: 2},
		Restart:    weir.FixedDelay{Delay: 300 * time.Millisecond, MaxAttempts: 3},
		// The demo tells the story itself, from the job's events.
		Logger: slog.New(slog.DiscardHandler),
		BeforeCount: func(string) {
			if n := counted.Add(1); armed.Load() && crashed.Add(1) == 1 {
				panic(fmt.Sprintf("demo: injected crash in the counting operator after %d counted words", n))
			}
		},
		OnEvent: func(e weir.JobEvent) {
			switch e.Kind {
			case weir.EventCheckpointCompleted:
				if checkpoints.Add(1) == crashAfterCheckpoints {
					armed.Store(true)
				}
				say(fmt.Sprintf("checkpoint %d completed in %v (%d bytes of state)", e.ID, e.Duration.Round(time.Millisecond), e.Size))
			case weir.EventRestarting:
				restarts.Add(1)
				first, _, _ := strings.Cut(e.Err.Error(), "\n")
				say(fmt.Sprintf("FAILURE: %s", first))
				say(fmt.Sprintf("recovering in %v from checkpoint %d: state restored, sources rewound", e.Duration, e.RestoredFrom))
			case weir.EventRunning:
				if e.Attempt > 1 {
					say(fmt.Sprintf("attempt %d running again from checkpoint %d", e.Attempt, e.RestoredFrom))
				}
			}
		},
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "2. counting with 2 subtasks, checkpoints every 200ms, a crash injected after checkpoint %d\n", crashAfterCheckpoints)
	start := time.Now()
	done := make(chan error, 1)
	var res weir.Result
	go func() {
		var err error
		res, err = env.Execute(ctx)
		done <- err
	}()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	progress := func() {
		fmt.Fprintf(w, "   … %5.1fs  %d words counted (with replay), %d checkpoints, %d recoveries\n",
			time.Since(start).Seconds(), counted.Load(), checkpoints.Load(), restarts.Load())
	}
	var runErr error
loop:
	for {
		select {
		case s := <-events:
			fmt.Fprintf(w, "   %s\n", s)
		case <-tick.C:
			progress()
		case runErr = <-done:
			break loop
		}
	}
	for len(events) > 0 {
		fmt.Fprintf(w, "   %s\n", <-events)
	}
	if runErr != nil {
		return runErr
	}
	progress()
	fmt.Fprintf(w, "   job finished in %v: %d checkpoints, %d attempts\n", time.Since(start).Round(time.Millisecond), res.Checkpoints, res.Attempts)

	rep, err := wordcount.Verify(vfs.Default, filepath.Join(dir, "output"), want, false)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "3. verifying the committed output against the input: %v\n\n", rep)
	switch {
	case !rep.OK():
		return exitError{code: 1, msg: "VERDICT: FAILED — the output is not exactly-once"}
	case restarts.Load() == 0:
		return exitError{code: 1, msg: "VERDICT: FAILED — the injected crash did not happen, so recovery was not shown"}
	}
	fmt.Fprintf(w, "VERDICT: exactly-once holds across the crash: every word's counts are exactly 1..n, %d counts, none lost, none duplicated\n", total)
	return nil
}

// writeCorpus writes files of lines drawn from a Zipf-like vocabulary.
func writeCorpus(dir string, files, lines int) ([]string, error) {
	in := filepath.Join(dir, "input")
	if err := os.MkdirAll(in, 0o755); err != nil {
		return nil, err
	}
	words := strings.Fields(`the a stream of records flows through the weir and every barrier marks a cut
		checkpoint state key group operator task channel sink source window join watermark exactly once
		river water dam gate flow current bank reservoir spillway lock canal mill wheel salmon ladder`)
	rng := rand.New(rand.NewPCG(42, 7))
	zipf := rand.NewZipf(rng, 1.1, 1, uint64(len(words)-1))
	var paths []string
	for f := range files {
		var b strings.Builder
		for range lines {
			for i := range 3 + rng.IntN(10) {
				if i > 0 {
					b.WriteByte(' ')
				}
				word := words[zipf.Uint64()]
				if rng.IntN(4) == 0 {
					word = strings.ToUpper(word[:1]) + word[1:]
				}
				b.WriteString(word)
			}
			b.WriteString(".\n")
		}
		p := filepath.Join(in, fmt.Sprintf("part-%d.txt", f))
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}
