// Command weir runs Weir jobs: the built-in word count, and a demo that
// shows exactly-once recovery from a crash.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/cluster"
	"github.com/weirstream/weir/internal/web"
)

func main() {
	setHeapFloor(os.Getenv)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRoot().ExecuteContext(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "weir:", err)
	}
	weir.WaitForWeb(ctx, func(d time.Duration) {
		fmt.Fprintf(os.Stderr, "weir: the web UI shows how the job ended for %v more (Ctrl-C ends it now; --web-linger sets it)\n", d)
	})
	stop()
	if err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
	}
}

// exitError is an error that asks for a particular exit status.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "weir",
		Short:         "Weir is a stateful stream processor with exactly-once checkpoints",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	var level string
	root.PersistentFlags().StringVar(&level, "log-level", "warn", "log level: debug, info, warn or error")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		var l slog.Level
		if err := l.UnmarshalText([]byte(level)); err != nil {
			return fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
		}
		slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})))
		warmHeapFloor(cmd)
		return nil
	}
	root.AddCommand(newRun(), newVerify(), newDemo(), newKafka(), newBench(), newNexmark(), newCluster(), newCoordinator(), newWorker(), cluster.StatusCommand())
	root.AddCommand(web.Commands()...)
	return root
}
