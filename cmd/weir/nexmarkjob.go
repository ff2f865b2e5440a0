package main

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"

	"github.com/spf13/cobra"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/examples/nexmark"
)

// newNexmarkJob is a Nexmark query as a job in a role: run (local),
// coordinator or worker. Its results go to --output, exactly-once.
func newNexmarkJob(role weir.Role) *cobra.Command {
	var query, output string
	var parallelism int
	events := int64(1_000_000)
	var throttle, rate float64
	jf := jobFlags{role: role}
	cmd := &cobra.Command{
		Use:   "nexmark",
		Short: "Run a Nexmark query over the built-in generator; its results go to --output as JSON lines, exactly-once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			qs, err := nexmark.Lookup(query)
			if err != nil {
				return err
			}
			if len(qs) != 1 {
				return errors.New("--query: name one query")
			}
			scheme, isURL := file.URLScheme(output)
			switch {
			case output == "":
				return errors.New("--output is required: the directory the results go to")
			case isURL:
				// NB: not output itself, which may hold a password.
				return fmt.Errorf("--output %s:…: nexmark writes its results to a local directory only, not to a %s: URL (a directory whose name begins like a URL is written with ./ before it)", scheme, scheme)
			case parallelism < 1:
				return fmt.Errorf("--parallelism %d: must be at least 1", parallelism)
			case events < 1:
				return fmt.Errorf("--events %d: must be at least 1", events)
			case !(rate > 0) || math.IsInf(rate, 0):
				return fmt.Errorf("--rate %v: must be a positive, finite number of events per second of event time", rate)
			case !(throttle >= 0) || math.IsInf(throttle, 0):
				return fmt.Errorf("--throttle %v: must be a finite number of events per second of wall time (0: as fast as it can)", throttle)
			}
			js, err := jf.settings(cmd)
			if err != nil {
				return err
			}
			env := weir.New(weir.Config{
				Job: "nexmark-" + qs[0].Name, Parallelism: parallelism, Checkpoint: js.cc, Restore: jf.restore, Fresh: jf.fresh,
				AllowNonRestoredState: jf.allowNonRestored, Restart: js.restart, Logger: slog.Default(), StateBackend: js.sb, LocalRecovery: jf.localRecovery, LocalRecoveryDir: jf.localRecoveryDir, Cluster: js.cl, BufferDebloat: jf.debloat, Web: jf.web, WebLinger: jf.linger, WebToken: jf.token, OnWeb: announceWeb,
			})
			if err := nexmark.Add(env, nexmark.Config{Events: events, Rate: rate, Throttle: throttle}, qs[0], nexmark.Output{Dir: output}); err != nil {
				return err
			}
			res, err := env.Execute(cmd.Context())
			if err != nil && cancelled(err, cmd) {
				return interrupted(jf.checkpointFlags, err, cmd, res.Checkpoints > 0)
			}
			if err != nil || role == weir.Worker {
				return err
			}
			if res.StoppedWith != 0 {
				fmt.Fprintf(os.Stderr, "weir: nexmark %s stopped with savepoint %d. Resume with:\n  %s --restore %s\n",
					qs[0].Name, res.StoppedWith, resumeCommand(), resumeFrom(js.cl, js.cc.Dir, "nexmark-"+qs[0].Name, res.StoppedWith))
				return nil
			}
			fmt.Fprintf(os.Stderr, "weir: nexmark %s finished: %d checkpoints, %d attempts; results in %s\n", qs[0].Name, res.Checkpoints, res.Attempts, output)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&query, "query", "q5", "the query: q0, q1, q2, q3, q4, q5, q7 or q8")
	fl.Var((*count)(&events), "events", "events the generator makes (1000000, 1M, 500k)")
	fl.Float64Var(&rate, "rate", nexmark.DefaultRate, "event-time rate: events per second of event time")
	fl.Float64Var(&throttle, "throttle", 0, "generate at most this many events per second of wall time (0: as fast as it can)")
	fl.StringVar(&output, "output", "", "the directory the results go to (committed files are those not beginning with '.')")
	fl.IntVar(&parallelism, "parallelism", 1, "subtasks per operator")
	jf.add(cmd)
	return cmd
}
