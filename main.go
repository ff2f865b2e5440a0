package weir

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/weirstream/weir/internal/cluster"
	"github.com/weirstream/weir/internal/flagcheck"
	"github.com/weirstream/weir/internal/web"
)

// Main makes a job program a complete Weir command line for its job, the
// same in one process and on many machines:
//
//	myjob run --checkpoint-dir /data/ckpt
//	myjob coordinator --listen 10.0.0.1:7700 --checkpoint-dir s3://bucket/ckpt --certs /etc/weir
//	myjob worker --join 10.0.0.1:7700 --name worker-1 --slots 4 --checkpoint-dir s3://bucket/ckpt --certs /etc/weir
//	myjob status --coordinator 10.0.0.1:7700 --certs /etc/weir
//
// cfg holds the program's defaults; flags override them. build adds the
// job's sources, operators and sinks to env. Every process of a cluster
// calls it and must build the same graph: the coordinator refuses a worker
// that built another. The program's own flags (its input, its output)
// come with the Flags option. Main exits the process: 0 when the job
// finished (or a worker was stopped), 130 when interrupted, 1 on an error.
func Main(cfg Config, build func(env *Environment) error, opts ...MainOption) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := runMain(ctx, os.Args[1:], cfg, build, opts...)
	WaitForWeb(ctx, func(d time.Duration) {
		fmt.Fprintf(os.Stderr, "the web UI shows how the job ended for %v more (Ctrl-C ends it now; --web-linger sets it)\n", d)
	})
	stop()
	switch {
	case err == nil:
		os.Exit(0)
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		fmt.Fprintln(os.Stderr, "interrupted")
		os.Exit(130)
	}
	fmt.Fprintln(os.Stderr, filepath.Base(os.Args[0])+":", err)
	var nv notVerified
	if errors.As(err, &nv) {
		os.Exit(2)
	}
	os.Exit(1)
}

// MainOption adds to the command line Main makes.
type MainOption func(*mainOptions)

type mainOptions struct {
	flags []func(*flag.FlagSet)
}

// Flags lets a job program define flags of its own, as with the standard
// flag package, beside Weir's:
//
//	var input string
//	weir.Main(cfg, build, weir.Flags(func(fs *flag.FlagSet) {
//		fs.StringVar(&input, "input", "in.txt", "the file to read")
//	}))
//
// define is called for each job command (run, coordinator, worker), so
// every process of a cluster takes them; their values are set before
// build is called. A name Weir uses already fails at start.
func Flags(define func(fs *flag.FlagSet)) MainOption {
	return func(o *mainOptions) { o.flags = append(o.flags, define) }
}

// runMain is Main's command line on args.
func runMain(ctx context.Context, args []string, cfg Config, build func(*Environment) error, opts ...MainOption) error {
	var o mainOptions
	for _, opt := range opts {
		opt(&o)
	}
	root := &cobra.Command{Use: filepath.Base(os.Args[0]), Short: "Run the " + cfg.Job + " job with Weir", SilenceUsage: true, SilenceErrors: true}
	var level string
	root.PersistentFlags().StringVar(&level, "log-level", "info", "log level: debug, info, warn or error")
	logger := func() (*slog.Logger, error) {
		var l slog.Level
		if err := l.UnmarshalText([]byte(level)); err != nil {
			return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
		}
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
	}
	cmds := []*cobra.Command{}
	for _, role := range []Role{Local, Coordinator, Worker} {
		cmds = append(cmds, jobCommand(ctx, role, cfg, build, logger))
	}
	cmds = append(cmds, verifyCommand(ctx, cfg, build, logger))
	for _, cmd := range cmds {
		for _, define := range o.flags {
			fs := flag.NewFlagSet(cmd.Name(), flag.ContinueOnError)
			define(fs)
			var taken []string
			fs.VisitAll(func(f *flag.Flag) {
				if cmd.Flags().Lookup(f.Name) != nil || root.PersistentFlags().Lookup(f.Name) != nil {
					taken = append(taken, "--"+f.Name)
				}
			})
			if len(taken) > 0 {
				return fmt.Errorf("weir.Flags: %s %s Weir's own: give the program's flags other names", strings.Join(taken, ", "), map[bool]string{true: "is", false: "are"}[len(taken) == 1])
			}
			cmd.Flags().AddGoFlagSet(fs)
		}
		root.AddCommand(cmd)
	}
	root.AddCommand(cluster.StatusCommand())
	root.AddCommand(web.Commands()...)
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}

// errMismatch is what the verify command fails with when the committed
// output differs from the rerun's (exit status 1).
var errMismatch = errors.New("the committed output differs from a rerun's (see the report)")

// notVerified is what stopped the verify command from verifying (a
// refusal, an error): Main exits 2, so that a script tells "the output is
// wrong" from "it was not checked".
type notVerified struct{ err error }

func (e notVerified) Error() string { return "not verified: " + e.err.Error() }
func (e notVerified) Unwrap() error { return e.err }

// verifyCommand checks the job's committed output against a rerun over
// the input its latest checkpoint consumed (Environment.Verify).
func verifyCommand(ctx context.Context, cfg Config, build func(*Environment) error, logger func() (*slog.Logger, error)) *cobra.Command {
	c := cfg
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check the job's committed output against a failure-free rerun over the input its latest checkpoint consumed",
		Long: `Check the job's committed output: read the latest completed checkpoint in --checkpoint-dir,
rerun the job in this process over exactly the input that checkpoint consumed (its sources
rewound; no checkpoints, no faults, nothing written), and compare what each sink would write
with what it committed up to that checkpoint, as multisets. Prints a summary and the records
missing, duplicated or unexpected; exits 0 on a match, 1 on a mismatch, 2 when it could not
verify. Give the job's own flags. Refuses a job a rerun cannot reproduce: a source that cannot
be read again, a sink whose output cannot be read back (standard output, Kafka at least
once, PostgreSQL in upsert mode or while the job writes the table), an operator marked
weir.NonDeterministic, processing-time timers, watermarks with idleness, unaligned or
at-least-once checkpoints, another run's output, two reruns that disagree.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if c.Logger, err = logger(); err != nil {
				return notVerified{err}
			}
			env := New(c)
			if err := build(env); err != nil {
				return notVerified{fmt.Errorf("build the job: %w", err)}
			}
			rep, err := env.Verify(ctx, VerifyConfig{Progress: func(read int64) {
				fmt.Fprintf(cmd.ErrOrStderr(), "verify: rerun: %d records read\n", read)
			}})
			if err != nil {
				return notVerified{err}
			}
			fmt.Fprint(cmd.OutOrStdout(), rep)
			if !rep.OK() {
				return errMismatch
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&c.Parallelism, "parallelism", max(c.Parallelism, 1), "subtasks per operator of the rerun")
	fl.StringVar(&c.Checkpoint.Dir, "checkpoint-dir", c.Checkpoint.Dir, "the job's checkpoints: a directory, or s3://bucket/prefix?endpoint=…&region=…")
	return cmd
}

// idleFlags refuses a flag given on the command line that the settings
// (the flags over the program's Config) make do nothing.
func idleFlags(cmd *cobra.Command, role Role, c Config) error {
	rules := []flagcheck.Rule{
		{Flags: []string{"checkpoint-interval", "checkpoint-timeout", "checkpoint-alignment", "aligned-checkpoint-timeout", "checkpoints-retained", "incremental"},
			Used: c.Checkpoint.Mode != NoCheckpoints, Needs: "checkpoints (--mode exactly-once or at-least-once, not none)"},
	}
	rules = append(rules, flagcheck.Serving(c.Web, c.Cluster.HA, role == Coordinator)...)
	return flagcheck.Idle(cmd.Flags(), rules...)
}

// jobCommand runs the job in role; its flags override cfg.
func jobCommand(ctx context.Context, role Role, cfg Config, build func(*Environment) error, logger func() (*slog.Logger, error)) *cobra.Command {
	use := map[Role]string{Local: "run", Coordinator: "coordinator", Worker: "worker"}[role]
	short := map[Role]string{
		Local:       "Run the whole job in this process",
		Coordinator: "Coordinate the job on workers: place its tasks, take its checkpoints, restart it when a worker is lost",
		Worker:      "Run the job's tasks for its coordinator",
	}[role]
	c := cfg
	var mode, backend, alignment string
	var incremental bool
	if c.Checkpoint.Mode == 0 {
		c.Checkpoint.Mode = ExactlyOnce
	}
	if c.Checkpoint.Interval == 0 {
		c.Checkpoint.Interval = DefaultCheckpointInterval
	}
	cmd := &cobra.Command{
		Use: use, Short: short, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if c.Checkpoint.Mode, err = ParseMode(mode); err != nil {
				return fmt.Errorf("--mode: %w", err)
			}
			if c.Checkpoint.Alignment, err = ParseAlignment(alignment); err != nil {
				return fmt.Errorf("--checkpoint-alignment: %w", err)
			}
			switch backend {
			case "heap":
				c.StateBackend.Kind = HeapState
			case "pebble":
				c.StateBackend.Kind = PebbleState
			default:
				return fmt.Errorf("--state-backend %q: want heap or pebble", backend)
			}
			c.StateBackend.Full = !incremental
			if err = idleFlags(cmd, role, c); err != nil {
				return err
			}
			if c.Logger, err = logger(); err != nil {
				return err
			}
			c.Cluster.Role = role
			onWeb := c.OnWeb
			c.OnWeb = func(addr string) {
				fmt.Fprintf(cmd.ErrOrStderr(), "web UI at http://%s/ (metrics at /metrics, the API under /api/v1/)\n", addr)
				if onWeb != nil {
					onWeb(addr)
				}
			}
			env := New(c)
			if err := build(env); err != nil {
				return fmt.Errorf("build the job: %w", err)
			}
			res, err := env.Execute(ctx)
			if err != nil {
				return err
			}
			switch {
			case role == Worker:
			case res.StoppedWith != 0:
				c.Logger.Info("job stopped with a savepoint; resume it with --restore latest", "job", c.Job, "savepoint", res.StoppedWith)
			default:
				c.Logger.Info("job finished", "job", c.Job, "checkpoints", res.Checkpoints, "attempts", res.Attempts)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&c.Parallelism, "parallelism", max(c.Parallelism, 1), "subtasks per operator")
	fl.StringVar(&c.Checkpoint.Dir, "checkpoint-dir", c.Checkpoint.Dir, "where checkpoints go: a directory, or s3://bucket/prefix?endpoint=…&region=…; in a cluster, one every process reaches")
	fl.DurationVar(&c.Checkpoint.Interval, "checkpoint-interval", c.Checkpoint.Interval, "time between checkpoints")
	fl.StringVar(&mode, "mode", c.Checkpoint.Mode.String(), "checkpoint mode: exactly-once, at-least-once or none")
	fl.DurationVar(&c.Checkpoint.Timeout, "checkpoint-timeout", c.Checkpoint.Timeout, "abort a checkpoint not complete after this long (0: 5m)")
	fl.StringVar(&alignment, "checkpoint-alignment", c.Checkpoint.Alignment.String(), "exactly-once checkpoints: aligned, or unaligned (barriers overtake data in flight, which the checkpoint stores)")
	fl.DurationVar(&c.Checkpoint.AlignedTimeout, "aligned-checkpoint-timeout", c.Checkpoint.AlignedTimeout, "switch an aligned checkpoint to unaligned at a task whose alignment lasts longer than this (0: never)")
	fl.DurationVar(&c.BufferDebloat, "buffer-debloat", c.BufferDebloat, "size each subtask's input channels so that what they hold drains in about this long at its throughput, e.g. 1s (0: off)")
	fl.IntVar(&c.Checkpoint.Retained, "checkpoints-retained", c.Checkpoint.Retained, "completed checkpoints kept (0: 1)")
	fl.StringVar(&c.Restore, "restore", c.Restore, `start from a checkpoint: "latest" (in --checkpoint-dir), or in one process the path of a chk-<id> directory`)
	fl.BoolVar(&c.Fresh, "fresh", c.Fresh, "start over: delete the job's checkpoints and the output of earlier runs")
	fl.BoolVar(&c.AllowNonRestoredState, "allow-non-restored-state", c.AllowNonRestoredState, "let a restore drop the state of operators the job no longer has")
	backendName := "heap"
	if c.StateBackend.Kind == PebbleState {
		backendName = "pebble"
	}
	fl.StringVar(&backend, "state-backend", backendName, "where keyed state lives: heap or pebble")
	fl.StringVar(&c.StateBackend.Dir, "state-dir", c.StateBackend.Dir, "pebble: local working directory of its databases")
	fl.BoolVar(&incremental, "incremental", !c.StateBackend.Full, "incremental checkpoints: write only the state changed since the last completed one (false: every checkpoint writes all the state)")
	if role != Coordinator {
		fl.BoolVar(&c.LocalRecovery, "local-recovery", c.LocalRecovery, "keep a local copy of each subtask's snapshots and restore from it on this machine, checked against the checkpoint's checksums (falls back to the checkpoint storage)")
		fl.StringVar(&c.LocalRecoveryDir, "local-recovery-dir", c.LocalRecoveryDir, "with --local-recovery: where the local copies live (default <temp dir>/weir-local-recovery/<a hash of --checkpoint-dir>); a process restarted with the same one restores from it")
	}
	cl := &c.Cluster
	switch role {
	case Coordinator:
		fl.StringVar(&cl.Listen, "listen", cl.Listen, "address to accept workers on (default 127.0.0.1:7700: loopback)")
		fl.DurationVar(&cl.HeartbeatInterval, "heartbeat-interval", cl.HeartbeatInterval, "how often workers send heartbeats (0: 1s)")
		fl.DurationVar(&cl.HeartbeatTimeout, "heartbeat-timeout", cl.HeartbeatTimeout, "a worker silent this long is lost (0: 5s)")
		fl.StringVar(&cl.Advertise, "advertise", cl.Advertise, "with --ha: the address workers reach this coordinator at, which etcd and weir status name, if not --listen's")
	case Worker:
		fl.StringVar(&cl.Join, "join", cl.Join, "the coordinator's host:port (with --ha coordinators, each one's, separated by commas)")
		fl.StringVar(&cl.Name, "name", cl.Name, "this worker's name, which its certificate holds")
		fl.IntVar(&cl.Slots, "slots", max(cl.Slots, 1), "task slots offered: a slot runs one subtask of every operator")
		fl.StringVar(&cl.Listen, "listen", cl.Listen, "address to accept the coordinator's calls and other workers' data on (default 127.0.0.1, any port)")
		fl.StringVar(&cl.Advertise, "advertise", cl.Advertise, "address others reach this worker at, if not --listen's")
	}
	if role != Worker {
		fl.StringVar(&cl.HA, "ha", cl.HA, "high availability: etcd://host:port[,host:port…][/prefix]; processes of the job campaign there, one leads and runs it, the others stand by")
		fl.DurationVar(&cl.HATTL, "ha-ttl", cl.HATTL, "the leader's lease in etcd, whole seconds: a standby takes over within it (0: 5s)")
		fl.StringVar(&cl.HACACert, "ha-cacert", cl.HACACert, "TLS to etcd: the CA that signed etcd's certificate (PEM; as etcdctl --cacert)")
		fl.StringVar(&cl.HACert, "ha-cert", cl.HACert, "TLS to etcd: this process's client certificate (PEM; as etcdctl --cert)")
		fl.StringVar(&cl.HAKey, "ha-key", cl.HAKey, "TLS to etcd: the client certificate's key (PEM; as etcdctl --key)")
		fl.StringVar(&c.Web, "web", c.Web, "serve the web UI (/), Prometheus metrics (/metrics) and the JSON API (/api/v1/) at this address, e.g. 127.0.0.1:8081 (:8081 is loopback too; 0.0.0.0:8081 every interface)")
		fl.DurationVar(&c.WebLinger, "web-linger", cmp.Or(c.WebLinger, 10*time.Second), "with --web: after the job ended, keep the web UI up this long to show how (Ctrl-C ends it sooner; 0: exit at once)")
		fl.StringVar(&c.WebToken, "web-token", cmp.Or(c.WebToken, os.Getenv("WEIR_WEB_TOKEN")), "the token the API's savepoint, cancel and profiling requests (flame graphs, /debug/pprof) must carry (default $WEIR_WEB_TOKEN; none: refused)")
	}
	if role != Local {
		fl.StringVar(&cl.Certs, "certs", cl.Certs, "directory of the cluster's CA and certificates (weir cluster certs --out DIR)")
	}
	return cmd
}
