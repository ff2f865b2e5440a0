package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/connector/kafka"
	"github.com/weirstream/weir/examples/nexmark"
	"github.com/weirstream/weir/examples/wordcount"
	"github.com/weirstream/weir/storage"
)

// errMismatch is the exit of a verification that found a difference
// (status 1): the report says which. A verification that could not run
// (a refusal, an error) exits 2, so that a script tells "the output is
// wrong" from "it was not checked".
var errMismatch = exitError{code: 1, msg: "the committed output differs from the rerun's (see the report)"}

// notVerified makes err, which stopped a verification, exit 2.
func notVerified(err error) error {
	if err == nil {
		return nil
	}
	return exitError{code: 2, msg: "not verified: " + err.Error()}
}

// readable checks, before the job is built (which creates its output
// directory), that what verify reads exists: the output directory (a Kafka
// topic or a PostgreSQL table the sink checks) and the job's checkpoints,
// dir/job.
func readable(output, dir, job string) error {
	scheme, ok := file.URLScheme(output)
	switch {
	case scheme == "kafka" || scheme == "postgres" || scheme == "postgresql":
		if err := outputExists(output, scheme); err != nil {
			return err
		}
	case ok || output == "-":
		what := "standard output"
		if ok {
			what = "a " + scheme + ": URL"
		}
		return fmt.Errorf("--output %s: verify reads back output directories, Kafka topics and PostgreSQL tables only, not %s", map[bool]string{true: scheme + ":…", false: output}[ok], what)
	default:
		if st, err := os.Stat(output); err != nil || !st.IsDir() {
			return fmt.Errorf("--output %s is not a directory the job wrote: %v", output, err)
		}
	}
	if !storage.IsURL(dir) {
		if _, err := os.Stat(filepath.Join(strings.TrimPrefix(dir, "file://"), job)); err != nil {
			return fmt.Errorf("--checkpoint-dir %s holds no checkpoints of job %s: %v", dir, job, err)
		}
	}
	return nil
}

// outputExists checks that the Kafka topic or PostgreSQL table verify
// reads back exists, with the Kafka sinks' ownership topic: building the
// sink would create them (create=true, the word count's CREATE TABLE IF NOT
// EXISTS, the ownership topic always), and verify only reads.
func outputExists(output, scheme string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if scheme == "kafka" {
		u, err := kafka.ParseURL(output)
		if err != nil {
			return err
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(u.Brokers...))
		if err != nil {
			return err
		}
		defer cl.Close()
		topics, err := kadm.NewClient(cl).ListTopics(ctx, append(slices.Clone(u.Topics), kafka.OwnersTopic)...)
		if err != nil {
			return fmt.Errorf("--output %s: %w", output, err)
		}
		for _, t := range append(slices.Clone(u.Topics), kafka.OwnersTopic) {
			if d, ok := topics[t]; !ok || d.Err != nil {
				return fmt.Errorf("--output %s: topic %s does not exist: no job wrote output there", output, t)
			}
		}
		return nil
	}
	connURL, table, _, err := wordcount.PostgresOutput(output)
	if err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	conn, err := pgx.Connect(ctx, connURL)
	if err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier(strings.Split(table, ".")).Sanitize()).Scan(&exists); err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	if !exists {
		return fmt.Errorf("--output: table %s does not exist: no job wrote output there", table)
	}
	return nil
}

func newVerify() *cobra.Command {
	v := &cobra.Command{
		Use:   "verify",
		Short: "Check a built-in job's committed output against a failure-free rerun over the input its latest checkpoint consumed",
		Long: `Check a job's committed output: read the latest completed checkpoint in --checkpoint-dir,
rerun the job in this process over exactly the input that checkpoint consumed (its
sources rewound to their recorded positions; no checkpoints, no faults, nothing
written), and compare what its sinks would write with what they committed up to that
checkpoint, as multisets. Prints a summary and the records missing, duplicated,
unexpected or changed (by key); exits 0 only on a match. Give the flags the job ran
with. Refuses jobs a rerun cannot reproduce: sources that cannot be read again, sinks
whose output cannot be read back (standard output, Kafka at least once, PostgreSQL in
upsert mode, or while the job writes it), processing-time timers, unaligned
checkpoints holding records in flight.`,
	}
	v.AddCommand(newVerifyWordCount(), newVerifyNexmark())
	return v
}

func newVerifyWordCount() *cobra.Command {
	var input, output, dir string
	var parallelism, maxLineBytes int
	cmd := &cobra.Command{
		Use:   "wordcount",
		Short: "Verify the word count's committed output (file input and output)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if input == "" || output == "" || dir == "" {
				return notVerified(errors.New("--input, --output and --checkpoint-dir are required: those the job ran with"))
			}
			if parallelism < 1 {
				return notVerified(fmt.Errorf("--parallelism %d: must be at least 1", parallelism))
			}
			if err := readable(output, dir, "wordcount"); err != nil {
				return notVerified(err)
			}
			stopProfile, err := startProfile()
			if err != nil {
				return err
			}
			defer stopProfile()
			env, err := wordcount.Build(wordcount.Options{Input: input, Output: output, MaxLineBytes: maxLineBytes, Parallelism: parallelism,
				Checkpoint: weir.CheckpointConfig{Dir: dir}, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			if err != nil {
				return notVerified(err)
			}
			// A changed count pairs by its word: a file's line is
			// word<TAB>count, a row word="…" count="…"; a Kafka record's
			// key is the word.
			sep := []byte("\t")
			switch scheme, _ := file.URLScheme(output); scheme {
			case "kafka":
				sep = nil
			case "postgres", "postgresql":
				sep = []byte(" count=")
			}
			var vc weir.VerifyConfig
			if sep != nil {
				vc.Key = func(_ string, rec []byte) string {
					word, _, _ := bytes.Cut(rec, sep)
					return string(word)
				}
			}
			return verifyEnv(cmd, env, vc, "lines")
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&input, "input", "", "the input files the job read (a path or glob)")
	fl.StringVar(&output, "output", "", "the job's output directory")
	fl.StringVar(&dir, "checkpoint-dir", "", "the job's checkpoint directory")
	fl.IntVar(&parallelism, "parallelism", 1, "subtasks per operator of the rerun (any: the result does not depend on it)")
	fl.IntVar(&maxLineBytes, "max-line-bytes", file.DefaultMaxLineBytes, "the longest line of the input, as the job ran")
	fl.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of this process to this file (go tool pprof)")
	return cmd
}

func newVerifyNexmark() *cobra.Command {
	var query, output, dir string
	var parallelism int
	events := int64(1_000_000)
	var rate float64
	cmd := &cobra.Command{
		Use:   "nexmark",
		Short: "Verify a Nexmark query's committed results",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			qs, err := nexmark.Lookup(query)
			if err != nil {
				return notVerified(err)
			}
			switch {
			case len(qs) != 1:
				return notVerified(errors.New("--query: name one query"))
			case output == "" || dir == "":
				return notVerified(errors.New("--output and --checkpoint-dir are required: those the job ran with"))
			case parallelism < 1:
				return notVerified(fmt.Errorf("--parallelism %d: must be at least 1", parallelism))
			}
			if err := readable(output, dir, "nexmark-"+qs[0].Name); err != nil {
				return notVerified(err)
			}
			env := weir.New(weir.Config{Job: "nexmark-" + qs[0].Name, Parallelism: parallelism, Checkpoint: weir.CheckpointConfig{Dir: dir},
				Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			if err := nexmark.Add(env, nexmark.Config{Events: events, Rate: rate}, qs[0], nexmark.Output{Dir: output}); err != nil {
				return notVerified(err)
			}
			return verifyEnv(cmd, env, weir.VerifyConfig{}, "events")
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&query, "query", "q5", "the query the job ran")
	fl.Var((*count)(&events), "events", "the events the job's generator made")
	fl.Float64Var(&rate, "rate", nexmark.DefaultRate, "the job's event-time rate")
	fl.StringVar(&output, "output", "", "the job's results directory")
	fl.StringVar(&dir, "checkpoint-dir", "", "the job's checkpoint directory")
	fl.IntVar(&parallelism, "parallelism", 1, "subtasks per operator of the rerun (any: the result does not depend on it)")
	return cmd
}

// verifyEnv verifies env's committed output, printing progress (in unit)
// to standard error and the report to standard output.
func verifyEnv(cmd *cobra.Command, env *weir.Environment, vc weir.VerifyConfig, unit string) error {
	vc.Progress = func(read int64) { fmt.Fprintf(os.Stderr, "weir verify: rerun: %d %s read\n", read, unit) }
	rep, err := env.Verify(cmd.Context(), vc)
	if err != nil {
		return notVerified(err)
	}
	fmt.Fprint(cmd.OutOrStdout(), rep)
	if !rep.OK() {
		return errMismatch
	}
	return nil
}
