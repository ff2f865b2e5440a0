package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

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
			if err := demoSize(files, lines); err != nil {
				return err
			}
			return interruptedDemo(cmd.Context(), demoFiles(cmd.Context(), cmd.OutOrStdout(), files, lines, keep))
		},
	}
	cmd.PersistentFlags().IntVar(&files, "files", 4, "input files to generate")
	cmd.PersistentFlags().IntVar(&lines, "lines", 300_000, "lines per input file")
	cmd.PersistentFlags().BoolVar(&keep, "keep", false, "keep the demo's directory (input, checkpoints, output)")

	cmd.AddCommand(&cobra.Command{
		Use:   "kafka",
		Short: "The same from Kafka to Kafka, exactly-once with transactions, on an in-process development broker",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := demoSize(files, lines); err != nil {
				return err
			}
			return interruptedDemo(cmd.Context(), demoKafka(cmd.Context(), cmd.OutOrStdout(), files, lines, keep))
		},
	})
	return cmd
}

// interruptedDemo makes a demo that Ctrl-C (or SIGTERM) ended exit 130,
// as an interrupted run does, not 1 as a failed one.
func interruptedDemo(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return exitError{code: 130, msg: fmt.Sprintf("demo interrupted (%v)", context.Cause(ctx))}
	}
	return err
}

// demoSize refuses an input the demo cannot generate.
func demoSize(files, lines int) error {
	switch {
	case files < 1:
		return fmt.Errorf("--files %d: must be at least 1", files)
	case lines < 1:
		return fmt.Errorf("--lines %d: must be at least 1", lines)
	}
	return nil
}

// demoFiles counts the words of generated files into a directory.
func demoFiles(ctx context.Context, w io.Writer, files, lines int, keep bool) error {
	dir, err := os.MkdirTemp("", "weir-demo-")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(dir)
	}
	fmt.Fprintf(w, "Weir demo: exactly-once word count with a crash and a recovery\n  working in %s\n\n", dir)
	_, want, err := demoCorpus(w, dir, files, lines)
	if err != nil {
		return err
	}
	out := filepath.Join(dir, "output")
	return demo(ctx, w, dir, filepath.Join(dir, "input", "*.txt"), out, want, func() (wordcount.Report, error) {
		return wordcount.Verify(vfs.Default, out, want, false)
	})
}

// demoKafka starts a development broker in the process, produces the
// corpus into a topic, and counts its words into another topic with
// transactions; the output is read read_committed.
func demoKafka(ctx context.Context, w io.Writer, files, lines int, keep bool) error {
	dir, err := os.MkdirTemp("", "weir-demo-")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(dir)
	}
	fmt.Fprintf(w, "Weir demo: exactly-once word count from Kafka to Kafka (transactions), with a crash and a recovery\n  working in %s\n\n", dir)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "lines", "counts"))
	if err != nil {
		return err
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	fmt.Fprintf(w, "0. started a development Kafka broker (franz-go's kfake, in memory) on %s\n", brokers[0])
	paths, want, err := demoCorpus(w, dir, files, lines)
	if err != nil {
		return err
	}
	n, err := produceLines(ctx, brokers, "lines", paths)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "   produced %d records into topic lines (4 partitions)\n", n)
	in := "kafka://" + brokers[0] + "/lines?bounded=true"
	out := "kafka://" + brokers[0] + "/counts"
	return demo(ctx, w, dir, in, out, want, func() (wordcount.Report, error) {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		lines, err := wordcount.KafkaLines(rctx, brokers, "counts")
		if err != nil {
			return wordcount.Report{}, err
		}
		return wordcount.Check(want, slices.Values(lines), false)
	})
}

// demoCorpus generates the corpus and counts its words.
func demoCorpus(w io.Writer, dir string, files, lines int) ([]string, map[string]int64, error) {
	paths, err := writeCorpus(dir, files, lines)
	if err != nil {
		return nil, nil, err
	}
	want, err := wordcount.Expected(vfs.Default, paths)
	if err != nil {
		return nil, nil, err
	}
	var total int64
	for _, n := range want {
		total += n
	}
	fmt.Fprintf(w, "1. generated %d files, %d lines, %d words (%d distinct)\n", files, files*lines, total, len(want))
	return paths, want, nil
}

// produceLines produces every line of the files as a record of topic.
func produceLines(ctx context.Context, brokers []string, topic string, paths []string) (int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	n := 0
	var failed atomic.Pointer[error]
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return n, err
		}
		for line := range strings.SplitSeq(strings.TrimSuffix(string(data), "\n"), "\n") {
			cl.Produce(ctx, &kgo.Record{Value: []byte(line)}, func(_ *kgo.Record, err error) {
				if err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			})
			n++
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return n, err
	}
	if err := failed.Load(); err != nil {
		return n, *err
	}
	return n, nil
}

// demo counts the words of input into output with checkpoints every
// 200ms, fails the counting operator once midway, lets Weir recover from
// the latest checkpoint, and verifies the committed output by counting.
func demo(ctx context.Context, w io.Writer, dir, input, output string, want map[string]int64, verify func() (wordcount.Report, error)) error {
	var total int64
	for _, n := range want {
		total += n
	}
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
		Input: input, Output: output, Parallelism: 2,
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

	rep, err := verify()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "3. verifying the committed output against the input: %v\n\n", rep)
	switch {
	case !rep.OK():
		return exitError{code: 1, msg: "VERDICT: FAILED — the output is not exactly-once"}
	case restarts.Load() == 0:
		return exitError{code: 1, msg: fmt.Sprintf("VERDICT: FAILED — the injected crash did not happen, so recovery was not shown (it comes after checkpoint %d: the input must last longer than that; the default --files and --lines do)", crashAfterCheckpoints)}
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
