package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/spf13/cobra"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/examples/wordcount"
	"github.com/weirstream/weir/runtime"
	"github.com/weirstream/weir/storage"
)

// checkpointFlags are the checkpoint settings every job command takes.
type checkpointFlags struct {
	dir               string
	interval          time.Duration
	mode              string
	minPause, timeout time.Duration
	maxConcurrent     int
	tolerable         int
	retained          int
	retainOnCancel    bool
	restore           string
	restartStrategy   string
	restartAttempts   int
	restartDelay      time.Duration
	restartMaxDelay   time.Duration
}

func (f *checkpointFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.dir, "checkpoint-dir", "", "directory for checkpoints (required unless --mode none)")
	fl.DurationVar(&f.interval, "checkpoint-interval", wordcount.DefaultInterval, "time between checkpoints")
	fl.StringVar(&f.mode, "mode", "exactly-once", "checkpoint mode: exactly-once, at-least-once or none")
	fl.DurationVar(&f.minPause, "checkpoint-min-pause", 0, "least time from one checkpoint's completion to the next trigger")
	fl.DurationVar(&f.timeout, "checkpoint-timeout", 10*time.Minute, "abort a checkpoint not complete after this long")
	fl.IntVar(&f.maxConcurrent, "checkpoint-max-concurrent", 1, "checkpoints in flight at once")
	fl.IntVar(&f.tolerable, "checkpoint-tolerable-failures", 0, "consecutive checkpoint failures before the job fails over")
	fl.IntVar(&f.retained, "checkpoints-retained", 1, "completed checkpoints kept")
	fl.BoolVar(&f.retainOnCancel, "retain-on-cancel", true, "keep checkpoints when the job is cancelled (Ctrl-C), to resume with --restore latest")
	fl.StringVar(&f.restore, "restore", "", `start from a checkpoint: "latest" (in --checkpoint-dir) or the path of a chk-<id> directory`)
	fl.StringVar(&f.restartStrategy, "restart-strategy", "fixed-delay", "after a failure inside the process: fixed-delay, exponential-backoff or none")
	fl.IntVar(&f.restartAttempts, "restart-attempts", 10, "consecutive restarts before giving up (a completed checkpoint resets the count)")
	fl.DurationVar(&f.restartDelay, "restart-delay", time.Second, "delay before a restart (the first one, with exponential-backoff)")
	fl.DurationVar(&f.restartMaxDelay, "restart-max-delay", time.Minute, "longest delay of exponential-backoff")
}

func (f *checkpointFlags) config() (weir.CheckpointConfig, runtime.RestartStrategy, error) {
	mode, err := runtime.ParseMode(f.mode)
	if err != nil {
		return weir.CheckpointConfig{}, nil, fmt.Errorf("--mode: %w", err)
	}
	if mode != runtime.None && f.dir == "" {
		return weir.CheckpointConfig{}, nil, fmt.Errorf("--checkpoint-dir is required in mode %s (or use --mode none)", mode)
	}
	if f.restore != "" && f.dir == "" && f.restore == "latest" {
		return weir.CheckpointConfig{}, nil, fmt.Errorf("--restore latest needs --checkpoint-dir")
	}
	if f.restartAttempts < 0 || f.restartDelay < 0 {
		return weir.CheckpointConfig{}, nil, fmt.Errorf("--restart-attempts and --restart-delay must not be negative")
	}
	var restart runtime.RestartStrategy
	switch f.restartStrategy {
	case "fixed-delay":
		restart = runtime.FixedDelay{Delay: f.restartDelay, MaxAttempts: f.restartAttempts}
	case "exponential-backoff":
		if f.restartDelay <= 0 || f.restartMaxDelay < f.restartDelay {
			return weir.CheckpointConfig{}, nil, fmt.Errorf("--restart-strategy exponential-backoff needs 0 < --restart-delay (%v) ≤ --restart-max-delay (%v)", f.restartDelay, f.restartMaxDelay)
		}
		restart = runtime.ExponentialBackoff{Initial: f.restartDelay, Max: f.restartMaxDelay, MaxAttempts: f.restartAttempts}
	case "none":
		restart = runtime.NoRestart{}
	default:
		return weir.CheckpointConfig{}, nil, fmt.Errorf("--restart-strategy %q: want fixed-delay, exponential-backoff or none", f.restartStrategy)
	}
	return weir.CheckpointConfig{
		Mode: mode, Interval: f.interval, MinPause: f.minPause, Timeout: f.timeout, MaxConcurrent: f.maxConcurrent,
		TolerableFailures: f.tolerable, Retained: f.retained, RetainOnCancel: f.retainOnCancel, Dir: f.dir,
	}, restart, nil
}

func newRun() *cobra.Command {
	run := &cobra.Command{Use: "run", Short: "Run a built-in job"}
	var input, output string
	var parallelism int
	var progressEvery time.Duration
	var cf checkpointFlags
	wc := &cobra.Command{
		Use:   "wordcount",
		Short: "Count words exactly-once: every occurrence writes word<TAB>count to the output directory",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if input == "" || output == "" {
				return fmt.Errorf("--input and --output are required")
			}
			if parallelism < 1 {
				return fmt.Errorf("--parallelism %d: must be at least 1", parallelism)
			}
			cc, restart, err := cf.config()
			if err != nil {
				return err
			}
			log := slog.Default()
			var lastCheckpoint atomic.Uint64
			env, err := wordcount.Build(wordcount.Options{
				Input: input, Output: output, Checkpoint: cc, Parallelism: parallelism,
				Restore: cf.restore, Restart: restart, Logger: log,
				OnEvent: func(e runtime.JobEvent) {
					switch e.Kind {
					case runtime.EventCheckpointCompleted:
						lastCheckpoint.Store(uint64(e.ID))
					case runtime.EventRunning:
						if e.RestoredFrom != 0 {
							fmt.Fprintf(os.Stderr, "weir: restored from checkpoint %d\n", e.RestoredFrom)
						}
					case runtime.EventRestarting:
						fmt.Fprintf(os.Stderr, "weir: job failed, restarting in %v from checkpoint %d: %v\n", e.Duration, e.RestoredFrom, e.Err)
					}
				},
			})
			if err != nil {
				return err
			}
			if cf.restore == "latest" {
				// Say plainly when there is nothing to restore.
				store, err := storage.NewDir(vfs.Default, cc.Dir, "wordcount", 0)
				if err != nil {
					return err
				}
				if _, err := runtime.LatestRestorePoint(store); errors.Is(err, runtime.ErrNoCheckpoint) {
					fmt.Fprintf(os.Stderr, "weir: no completed checkpoint in %s; starting from the beginning\n", store.JobDir())
				}
			}
			if progressEvery > 0 {
				stop := reportProgress(env, progressEvery, &lastCheckpoint)
				defer stop()
			}
			res, err := env.Execute(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "weir: wordcount finished: %d checkpoints, %d attempts; output in %s\n", res.Checkpoints, res.Attempts, output)
			return nil
		},
	}
	fl := wc.Flags()
	fl.StringVar(&input, "input", "", "input file or glob (for example 'books/*.txt')")
	fl.StringVar(&output, "output", "", "output directory; committed files are those not beginning with '.'")
	fl.IntVar(&parallelism, "parallelism", 1, "subtasks per operator")
	fl.DurationVar(&progressEvery, "progress", 5*time.Second, "print progress this often (0: never)")
	cf.add(wc)
	run.AddCommand(wc)
	return run
}

// reportProgress prints the records each operator has taken in and the
// latest completed checkpoint, every period, until stop is called.
func reportProgress(env *weir.Environment, period time.Duration, lastCheckpoint *atomic.Uint64) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				line := fmt.Sprintf("weir: %5.0fs", time.Since(start).Seconds())
				// Records are counted where they enter a task (or leave a
				// source); operators chained behind others have no count.
				for _, m := range env.Metrics() {
					if m.Records > 0 {
						line += fmt.Sprintf("  %s %d", m.UID, m.Records)
					}
				}
				fmt.Fprintf(os.Stderr, "%s records; latest checkpoint %d\n", line, lastCheckpoint.Load())
			case <-done:
				return
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}
