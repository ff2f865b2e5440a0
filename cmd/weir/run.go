package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/examples/wordcount"
	"github.com/weirstream/weir/internal/flagcheck"
	"github.com/weirstream/weir/storage"
)

// checkpointFlags are the checkpoint, start and restart settings every job
// command takes.
type checkpointFlags struct {
	dir               string
	interval          time.Duration
	mode              string
	minPause, timeout time.Duration
	alignment         string
	alignedTimeout    time.Duration
	maxConcurrent     int
	tolerable         int
	retained          int
	retainOnCancel    bool
	restore           string
	fresh             bool
	allowNonRestored  bool
	restartStrategy   string
	restartAttempts   int
	restartDelay      time.Duration
	restartMaxDelay   time.Duration
	restartInterval   time.Duration
	stateBackend      string
	stateDir          string
	incremental       bool
	localRecovery     bool
	localRecoveryDir  string
}

func (f *checkpointFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.dir, "checkpoint-dir", "", "where checkpoints go (required unless --mode none): a directory, or s3://bucket/prefix?endpoint=…&region=… (credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or the AWS configuration)")
	fl.DurationVar(&f.interval, "checkpoint-interval", weir.DefaultCheckpointInterval, "time between checkpoints")
	fl.StringVar(&f.mode, "mode", "exactly-once", "checkpoint mode: exactly-once, at-least-once or none")
	fl.DurationVar(&f.minPause, "checkpoint-min-pause", 0, "least time from one checkpoint's completion to the next trigger")
	fl.StringVar(&f.alignment, "checkpoint-alignment", "aligned", "exactly-once checkpoints: aligned (barriers wait for each other; nothing in flight is stored) or unaligned (barriers overtake data in flight, which is stored: checkpoints complete under back-pressure, and are larger)")
	fl.DurationVar(&f.alignedTimeout, "aligned-checkpoint-timeout", 0, "with --checkpoint-alignment aligned: switch a task's checkpoint to unaligned when its alignment lasts longer than this (0: never)")
	fl.DurationVar(&f.timeout, "checkpoint-timeout", checkpoint.DefaultTimeout, "abort a checkpoint not complete after this long")
	fl.IntVar(&f.maxConcurrent, "checkpoint-max-concurrent", checkpoint.DefaultMaxConcurrent, "checkpoints in flight at once")
	fl.IntVar(&f.tolerable, "checkpoint-tolerable-failures", 0, "consecutive checkpoint failures before the job fails over")
	fl.IntVar(&f.retained, "checkpoints-retained", checkpoint.DefaultRetained, "completed checkpoints kept")
	fl.BoolVar(&f.retainOnCancel, "retain-on-cancel", true, "keep checkpoints when the job is cancelled (Ctrl-C), to resume with --restore latest")
	fl.StringVar(&f.restore, "restore", "", `start from a checkpoint: "latest" (in --checkpoint-dir) or the path of a chk-<id> directory`)
	fl.BoolVar(&f.fresh, "fresh", false, "start over: delete the job's checkpoints and the output of earlier runs")
	fl.BoolVar(&f.allowNonRestored, "allow-non-restored-state", false, "let a restore drop the state of operators the job no longer has")
	fl.StringVar(&f.restartStrategy, "restart-strategy", "fixed-delay", "after a failure inside the process: fixed-delay, exponential-backoff, failure-rate or none")
	fl.IntVar(&f.restartAttempts, "restart-attempts", 10, "fixed-delay, exponential-backoff: restarts in a row before giving up (a completed checkpoint resets the count); failure-rate: failures allowed per --restart-interval")
	fl.DurationVar(&f.restartDelay, "restart-delay", time.Second, "delay before a restart (the first one, with exponential-backoff)")
	fl.DurationVar(&f.restartMaxDelay, "restart-max-delay", time.Minute, "longest delay of exponential-backoff")
	fl.DurationVar(&f.restartInterval, "restart-interval", 5*time.Minute, "failure-rate: the interval --restart-attempts failures are counted in")
	addStateFlags(cmd, &f.stateBackend, &f.stateDir, &f.incremental)
	fl.BoolVar(&f.localRecovery, "local-recovery", false, "keep a local copy of each subtask's snapshots and restore from it on this machine, checked against the checkpoint's checksums (falls back to the checkpoint storage)")
	fl.StringVar(&f.localRecoveryDir, "local-recovery-dir", "", "with --local-recovery: where the local copies live (default: weir-local-recovery/<a hash of --checkpoint-dir> in the temporary directory); a process restarted with the same one restores from it")
}

// addStateFlags adds the state backend flags.
func addStateFlags(cmd *cobra.Command, backend, dir *string, incremental *bool) {
	fl := cmd.Flags()
	fl.StringVar(backend, "state-backend", "heap", "where keyed state lives: heap (memory) or pebble (local disk); checkpoints of either write what changed")
	fl.StringVar(dir, "state-dir", "", "pebble: local working directory of its databases (default: weir-state in the temporary directory)")
	fl.BoolVar(incremental, "incremental", true, "incremental checkpoints: write only the state changed since the last completed one (false: every checkpoint writes all the state)")
}

// stateBackend validates the state backend flags.
func stateBackend(cmd *cobra.Command, backend, dir string, incremental bool) (weir.StateBackend, error) {
	sb := weir.StateBackend{Kind: weir.HeapState, Full: !incremental}
	switch backend {
	case "heap":
		if dir != "" {
			return sb, errors.New("--state-dir is a setting of --state-backend pebble")
		}
	case "pebble":
		sb = weir.StateBackend{Kind: weir.PebbleState, Dir: dir, Full: !incremental}
	default:
		return sb, fmt.Errorf("--state-backend %q: want heap or pebble", backend)
	}
	return sb, nil
}

// config validates the flags once, at start; every error names the flag.
func (f *checkpointFlags) config() (weir.CheckpointConfig, weir.RestartStrategy, error) {
	var none weir.CheckpointConfig
	mode, err := weir.ParseMode(f.mode)
	if err != nil {
		return none, nil, fmt.Errorf("--mode: %w", err)
	}
	alignment, err := weir.ParseAlignment(f.alignment)
	if err != nil {
		return none, nil, fmt.Errorf("--checkpoint-alignment: %w", err)
	}
	switch {
	case f.alignedTimeout < 0:
		return none, nil, fmt.Errorf("--aligned-checkpoint-timeout %v: must not be negative (0: never switch)", f.alignedTimeout)
	case f.alignedTimeout > 0 && alignment == weir.Unaligned:
		return none, nil, fmt.Errorf("--aligned-checkpoint-timeout %v switches aligned checkpoints to unaligned: it goes with --checkpoint-alignment aligned, not unaligned", f.alignedTimeout)
	case mode != weir.ExactlyOnce && (alignment == weir.Unaligned || f.alignedTimeout > 0):
		return none, nil, fmt.Errorf("--checkpoint-alignment unaligned and --aligned-checkpoint-timeout are settings of --mode exactly-once, not %s", mode)
	}
	if mode != weir.NoCheckpoints {
		switch {
		case f.dir == "":
			return none, nil, fmt.Errorf("--checkpoint-dir is required in mode %s (or use --mode none)", mode)
		case f.interval <= 0:
			return none, nil, fmt.Errorf("--checkpoint-interval %v: checkpoint interval is %v: must be above 0", f.interval, f.interval)
		case f.timeout < weir.MinCheckpointTimeout:
			return none, nil, fmt.Errorf("--checkpoint-timeout %v: must be at least %v", f.timeout, weir.MinCheckpointTimeout)
		case f.maxConcurrent < 1 || f.maxConcurrent > checkpoint.MaxConcurrentLimit:
			return none, nil, fmt.Errorf("--checkpoint-max-concurrent %d: want 1 to %d", f.maxConcurrent, checkpoint.MaxConcurrentLimit)
		case f.retained < 1 || f.retained > checkpoint.MaxRetained:
			return none, nil, fmt.Errorf("--checkpoints-retained %d: want 1 to %d (the latest checkpoint is what a restore needs)", f.retained, checkpoint.MaxRetained)
		case f.minPause < 0:
			return none, nil, fmt.Errorf("--checkpoint-min-pause %v: must not be negative", f.minPause)
		case f.minPause > 0 && f.maxConcurrent > 1:
			return none, nil, fmt.Errorf("--checkpoint-min-pause %v needs --checkpoint-max-concurrent 1, not %d: a pause between checkpoints cannot hold while several run at once", f.minPause, f.maxConcurrent)
		case f.tolerable < 0:
			return none, nil, fmt.Errorf("--checkpoint-tolerable-failures %d: must not be negative (0: the first failed checkpoint fails the job over)", f.tolerable)
		}
	}
	switch {
	case f.restore == "latest" && f.dir == "":
		return none, nil, errors.New("--restore latest needs --checkpoint-dir")
	case f.fresh && f.restore != "":
		return none, nil, fmt.Errorf("--fresh and --restore %s exclude each other: restore a checkpoint, or start over", f.restore)
	case f.restartAttempts < 0 || f.restartDelay < 0:
		return none, nil, errors.New("--restart-attempts and --restart-delay must not be negative")
	}
	var restart weir.RestartStrategy
	switch f.restartStrategy {
	case "fixed-delay":
		restart = weir.FixedDelay{Delay: f.restartDelay, MaxAttempts: f.restartAttempts}
	case "exponential-backoff":
		if f.restartDelay <= 0 || f.restartMaxDelay < f.restartDelay {
			return none, nil, fmt.Errorf("--restart-strategy exponential-backoff needs 0 < --restart-delay (%v) ≤ --restart-max-delay (%v)", f.restartDelay, f.restartMaxDelay)
		}
		restart = weir.ExponentialBackoff{Initial: f.restartDelay, Max: f.restartMaxDelay, MaxAttempts: f.restartAttempts}
	case "failure-rate":
		if f.restartAttempts < 1 || f.restartInterval <= 0 {
			return none, nil, fmt.Errorf("--restart-strategy failure-rate needs --restart-attempts (%d) of at least 1 and a --restart-interval (%v) above 0", f.restartAttempts, f.restartInterval)
		}
		restart = weir.FailureRate{MaxFailures: f.restartAttempts, Interval: f.restartInterval, Delay: f.restartDelay}
	case "none":
		restart = weir.NoRestart{}
	default:
		return none, nil, fmt.Errorf("--restart-strategy %q: want fixed-delay, exponential-backoff, failure-rate or none", f.restartStrategy)
	}
	return weir.CheckpointConfig{
		Mode: mode, Interval: f.interval, MinPause: f.minPause, Timeout: f.timeout, MaxConcurrent: f.maxConcurrent,
		TolerableFailures: f.tolerable, Retained: f.retained, DiscardOnCancel: !f.retainOnCancel, Dir: f.dir,
		Alignment: alignment, AlignedTimeout: f.alignedTimeout,
	}, restart, nil
}

// jobFlags are the flags every job command takes: checkpoints, restarts,
// state, and its cluster role's.
type jobFlags struct {
	checkpointFlags
	cluster clusterFlags
	role    weir.Role
	web     string
	token   string
	// debloat is the buffer debloating target (0: off); linger, how long
	// the web UI stays up after the job ended.
	debloat, linger time.Duration
}

func (f *jobFlags) add(cmd *cobra.Command) {
	f.checkpointFlags.add(cmd)
	f.cluster.add(cmd, f.role)
	cmd.Flags().DurationVar(&f.debloat, "buffer-debloat", 0, "size each subtask's input channels so that what they hold drains in about this long at its throughput, as Flink's buffer debloating, e.g. 1s (0: off)")
	if f.role != weir.Worker {
		cmd.Flags().StringVar(&f.web, "web", "", "serve the web UI (/), Prometheus metrics (/metrics) and the JSON API (/api/v1/) at this address, e.g. 127.0.0.1:8081 (:8081 is loopback too; 0.0.0.0:8081 every interface)")
		cmd.Flags().StringVar(&f.token, "web-token", os.Getenv("WEIR_WEB_TOKEN"), "the token the API's savepoint, cancel and profiling requests (flame graphs, /debug/pprof) must carry (default $WEIR_WEB_TOKEN; none: refused)")
		cmd.Flags().DurationVar(&f.linger, "web-linger", 10*time.Second, "with --web: after the job ended, keep the web UI up this long to show how (Ctrl-C ends it sooner; 0: exit at once)")
	}
}

// jobSettings are jobFlags validated.
type jobSettings struct {
	cc      weir.CheckpointConfig
	restart weir.RestartStrategy
	sb      weir.StateBackend
	cl      weir.ClusterConfig
}

// settings validates the flags once, at start; every error names the flag.
func (f *jobFlags) settings(cmd *cobra.Command) (js jobSettings, err error) {
	if js.cc, js.restart, err = f.config(); err != nil {
		return js, err
	}
	if js.sb, err = stateBackend(cmd, f.stateBackend, f.stateDir, f.incremental); err != nil {
		return js, err
	}
	if f.linger < 0 {
		return js, fmt.Errorf("--web-linger %v: must not be negative (0 exits at once)", f.linger)
	}
	if f.debloat < 0 {
		return js, fmt.Errorf("--buffer-debloat %v: must not be negative (0 turns debloating off)", f.debloat)
	}
	if err = f.idle(cmd); err != nil {
		return js, err
	}
	js.cl, err = f.cluster.config(f.role)
	return js, err
}

// idle refuses a flag given on the command line that the other flags
// make do nothing.
func (f *jobFlags) idle(cmd *cobra.Command) error {
	mode, _ := weir.ParseMode(f.mode) // config checked it
	rules := []flagcheck.Rule{
		{Flags: []string{"checkpoint-interval", "checkpoint-min-pause", "checkpoint-timeout", "checkpoint-max-concurrent",
			"checkpoint-tolerable-failures", "checkpoints-retained", "retain-on-cancel", "incremental"},
			Used: mode != weir.NoCheckpoints, Needs: "checkpoints (--mode exactly-once or at-least-once, not none)"},
		{Flags: []string{"restart-max-delay"}, Used: f.restartStrategy == "exponential-backoff", Needs: "--restart-strategy exponential-backoff"},
		{Flags: []string{"restart-interval"}, Used: f.restartStrategy == "failure-rate", Needs: "--restart-strategy failure-rate"},
		{Flags: []string{"restart-attempts", "restart-delay"}, Used: f.restartStrategy != "none", Needs: "a restart strategy (not --restart-strategy none)"},
	}
	rules = append(rules, flagcheck.Serving(f.web, f.cluster.ha, f.role == weir.Coordinator)...)
	return flagcheck.Idle(cmd.Flags(), rules...)
}

func newRun() *cobra.Command {
	run := &cobra.Command{Use: "run", Short: "Run a built-in job in this process"}
	run.AddCommand(newWordCount(weir.Local), newNexmarkJob(weir.Local))
	return run
}

// newWordCount is the word count's command in a role: run (local),
// coordinator or worker.
func newWordCount(role weir.Role) *cobra.Command {
	var input, output string
	var parallelism, maxLineBytes, pace int
	var progressEvery time.Duration
	jf := jobFlags{role: role}
	wc := &cobra.Command{
		Use:   "wordcount",
		Short: "Count words exactly-once: every occurrence writes word<TAB>count to the output directory",
		Long: `Count words exactly-once: every occurrence of a word writes word<TAB>count (its count
so far) to the output. A word is a run of Unicode letters and digits with their
combining marks, case-folded (Unicode full folding: Straße and STRASSE are strasse)
and in NFC; everything else separates words. Input is files or a Kafka topic (a line per
record); output is files, a Kafka topic (key: the word, value: the count), a
PostgreSQL table (exactly-once: a row per occurrence; upsert: a row per word with
its latest count), or standard output.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if input == "" || output == "" {
				return errors.New("--input and --output are required")
			}
			if parallelism < 1 {
				return fmt.Errorf("--parallelism %d: must be at least 1", parallelism)
			}
			if progressEvery < 0 {
				return fmt.Errorf("--progress %v: must not be negative (0 turns progress off)", progressEvery)
			}
			if maxLineBytes < 1 || maxLineBytes > file.MaxMaxLineBytes {
				return fmt.Errorf("--max-line-bytes %d: want 1 to %d", maxLineBytes, file.MaxMaxLineBytes)
			}
			js, err := jf.settings(cmd)
			if err != nil {
				return err
			}
			cf, cc := jf.checkpointFlags, js.cc
			stopProfile, err := startProfile()
			if err != nil {
				return err
			}
			defer stopProfile()
			var p progress
			var foundNone atomic.Bool // --restore latest found no checkpoint
			var beforeCount func(string)
			if pace > 0 {
				beforeCount = wordcount.Paced(pace)
			}
			env, err := wordcount.Build(wordcount.Options{
				Input: input, Output: output, MaxLineBytes: maxLineBytes, Checkpoint: cc, Parallelism: parallelism,
				Restore: cf.restore, Fresh: cf.fresh, AllowNonRestoredState: cf.allowNonRestored,
				Restart: js.restart, Logger: slog.Default(), StateBackend: js.sb, LocalRecovery: cf.localRecovery, LocalRecoveryDir: cf.localRecoveryDir, Cluster: js.cl, BufferDebloat: jf.debloat, Web: jf.web, WebLinger: jf.linger, WebToken: jf.token, OnWeb: announceWeb,
				BeforeCount: beforeCount,
				OnEvent: func(e weir.JobEvent) {
					switch e.Kind {
					case weir.EventCheckpointCompleted:
						p.checkpoint.Store(uint64(e.ID))
					case weir.EventRunning:
						if e.RestoredFrom != 0 {
							p.checkpoint.Store(uint64(e.RestoredFrom))
						}
						if e.Attempt > 1 {
							return // the driver logged the restart
						}
						switch {
						case e.RestoredFrom != 0:
							fmt.Fprintf(os.Stderr, "weir: restored from checkpoint %d\n", e.RestoredFrom)
						case cf.restore == "latest":
							foundNone.Store(true)
							fmt.Fprintf(os.Stderr, "weir: no completed checkpoint in %s; starting from the beginning\n", cc.Dir)
						}
					}
				},
			})
			if err != nil {
				return err
			}
			if progressEvery > 0 { // a worker has no --progress: the coordinator reports the job's
				stop := p.report(os.Stderr, env, progressEvery)
				defer stop()
			}
			res, err := env.Execute(cmd.Context())
			if err != nil {
				if cancelled(err, cmd) {
					return interrupted(cf, err, cmd, res.Checkpoints > 0)
				}
				if errors.Is(err, file.ErrEarlierOutput) && foundNone.Load() {
					return fmt.Errorf("%w\n--restore latest found no checkpoint of that run in %s: it took none (--mode none), or they were deleted, or they are in another --checkpoint-dir; --fresh starts over", err, cc.Dir)
				}
				return err
			}
			switch {
			case role == weir.Worker:
			case res.StoppedWith != 0:
				fmt.Fprintf(os.Stderr, "weir: wordcount stopped with savepoint %d. Resume with:\n  %s --restore %s\n",
					res.StoppedWith, resumeCommand(), resumeFrom(js.cl, cf.dir, "wordcount", res.StoppedWith))
			default:
				fmt.Fprintf(os.Stderr, "weir: wordcount finished: %d checkpoints, %d attempts; output in %s\n", res.Checkpoints, res.Attempts, output)
			}
			return nil
		},
	}
	fl := wc.Flags()
	fl.StringVar(&input, "input", "", "input files (a path or glob: 'books/*.txt', 'logs/*/part-*'; a * matches names beginning with a dot too, and must not match the output's files), or a Kafka topic: 'kafka://host:port/topic[?bounded=true&start=earliest|latest|committed|<RFC 3339 time>&group=<group>]'")
	fl.StringVar(&output, "output", "", "an output directory (committed files are those not beginning with '.'), a Kafka topic ('kafka://host:port/topic[?delivery=exactly-once|at-least-once|none&txn-timeout=15m&create=true]'), a PostgreSQL table ('postgres://user@host:port/db?table=counts&mode=exactly-once|upsert'), or - (standard output, written when each checkpoint completes)")
	fl.IntVar(&maxLineBytes, "max-line-bytes", file.DefaultMaxLineBytes, "the longest line of a file input, in bytes, not counting its line ending: a longer line fails the job at once")
	fl.IntVar(&parallelism, "parallelism", 1, "subtasks per operator")
	if role != weir.Worker {
		fl.DurationVar(&progressEvery, "progress", 5*time.Second, "print progress this often (0: never)")
	}
	fl.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of this process to this file (go tool pprof)")
	// NB: a test's knob, hidden: tests that kill and pause processes need
	// a run that outlasts their faults on a small input, whatever the
	// machine's speed (wordcount.Paced).
	fl.IntVar(&pace, "pace", 0, "sleep a millisecond every this many words the process counts (0: never)")
	fl.MarkHidden("pace")
	jf.add(wc)
	return wc
}

// cancelled says whether err, a job's end, is its cancellation: by a
// signal to this process or through the API.
func cancelled(err error, cmd *cobra.Command) bool {
	return errors.Is(err, context.Canceled) && cmd.Context().Err() != nil || errors.Is(err, weir.ErrCancelled)
}

// interrupted is the exit of a job cancelled by a signal (Ctrl-C, SIGTERM)
// or through the API: status 130, who stopped it, and how to resume
// (checkpointed: the run completed a checkpoint).
func interrupted(cf checkpointFlags, err error, cmd *cobra.Command, checkpointed bool) error {
	what := "interrupted"
	var byAPI *weir.CancelledError
	switch cause := context.Cause(cmd.Context()); {
	case errors.As(err, &byAPI):
		what = byAPI.Error() // "job cancelled through the API by …"
	case cause != nil && cause != context.Canceled: // NB: a signal's cause Is context.Canceled too
		what = "interrupted (" + cause.Error() + ")" // "interrupt signal received"
	}
	if cf.dir == "" || !cf.retainOnCancel || cf.mode == weir.NoCheckpoints.String() {
		return exitError{code: 130, msg: what}
	}
	restore := "latest"
	if cf.restore != "" && cf.restore != "latest" && !checkpointed {
		// Not latest: the checkpoint restored may be another storage's,
		// which --restore latest refuses until one completes here.
		restore = shellQuote(storage.AbsoluteLocation(cf.restore))
	}
	return exitError{code: 130, msg: fmt.Sprintf("%s; the checkpoints are kept in %s. Resume with:\n  %s --restore %s",
		what, cf.dir, resumeCommand(), restore)}
}

// announceWeb prints where the job serves its UI, whatever the log level.
func announceWeb(addr string) {
	fmt.Fprintf(os.Stderr, "weir: web UI at http://%s/ (metrics at /metrics, the API under /api/v1/)\n", addr)
}

// resumeFrom is the --restore that resumes job, stopped with savepoint id
// by a process of cluster configuration cl: the savepoint's location; for
// a cluster's coordinator, or a process with --ha, which restore only
// their own storage's latest checkpoint, latest (the savepoint is the
// latest: the job stopped with it). It is one word for a POSIX shell.
func resumeFrom(cl weir.ClusterConfig, dir, job string, id checkpoint.ID) string {
	if cl.Role == weir.Coordinator || cl.HA != "" {
		return "latest"
	}
	return shellQuote(storage.AbsoluteLocation(storage.CheckpointLocation(strings.TrimPrefix(dir, "file://"), job, id)))
}

// resumeCommand is this process's command line without its --restore and
// --fresh, and with the value of --web-token hidden (the log may be read
// more widely than the token is): with a --restore, the same job where it
// stopped.
func resumeCommand() string {
	prog := os.Args[0]
	if strings.Contains(prog, "go-build") {
		prog = "go run ./cmd/weir" // a binary go run built and deleted
	}
	args := []string{prog}
	in := os.Args[1:]
	for i := 0; i < len(in); i++ {
		switch a := in[i]; {
		case a == "--restore":
			i++ // and its value
		case strings.HasPrefix(a, "--restore=") || strings.HasPrefix(a, "--fresh"):
		case a == "--web-token" && i+1 < len(in):
			args = append(args, a, `"$WEIR_WEB_TOKEN"`)
			i++
		case strings.HasPrefix(a, "--web-token="):
			args = append(args, `--web-token="$WEIR_WEB_TOKEN"`)
		default:
			args = append(args, shellQuote(a))
		}
	}
	return strings.Join(args, " ")
}

// shellQuote quotes a for a POSIX shell when it holds anything but safe
// characters (a glob, a space).
func shellQuote(a string) string {
	if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:=,+@%") == "" {
		return a
	}
	return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
}

// progress prints what a running job has done.
type progress struct {
	checkpoint atomic.Uint64 // the latest completed or restored
}

// report prints, every period until stop is called, the records each
// operator took in and their rate, the share of bounded input read, and
// the latest checkpoint.
func (p *progress) report(w io.Writer, env *weir.Environment, period time.Duration) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		t := time.NewTicker(period)
		defer t.Stop()
		last := map[string]int64{}
		for {
			select {
			case <-t.C:
				fmt.Fprintln(w, p.line(env.Metrics(), last, time.Since(start), period))
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

// line formats one progress line; last holds the previous counts, for
// rates.
func (p *progress) line(ms []weir.Metrics, last map[string]int64, elapsed, period time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "weir: %6.1fs", elapsed.Seconds())
	// Records are counted where they enter an operator (or leave a
	// source); an operator that took none yet is left out.
	for _, m := range ms {
		if m.Records == 0 {
			continue
		}
		rate := float64(m.Records-last[m.UID]) / period.Seconds()
		last[m.UID] = m.Records
		fmt.Fprintf(&b, "  %s %d (%s/s)", m.UID, m.Records, si(rate))
		if m.Total > 0 {
			fmt.Fprintf(&b, " %.1f%% read", 100*float64(m.Total-m.Remaining)/float64(m.Total))
		}
		if m.Late > 0 {
			fmt.Fprintf(&b, " %d late dropped", m.Late)
		}
	}
	if id := p.checkpoint.Load(); id != 0 {
		fmt.Fprintf(&b, "; latest checkpoint %d", id)
	} else {
		b.WriteString("; no checkpoint yet")
	}
	return b.String()
}

// si formats v with a k or M suffix.
func si(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}
