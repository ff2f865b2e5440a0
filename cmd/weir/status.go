package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/weirstream/weir/internal/cluster"
	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/transport"
)

func newStatus() *cobra.Command {
	var coord, certs, name string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show a cluster's job: its workers, slots, tasks, attempt and last checkpoints",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if coord == "" || certs == "" {
				return errors.New("--coordinator and --certs are required")
			}
			tc, err := transport.LoadTLS(certs, name)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			st, err := cluster.FetchStatus(ctx, coord, tc)
			if err != nil {
				return err
			}
			printStatus(cmd.OutOrStdout(), st)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&coord, "coordinator", "", "the coordinator's host:port")
	fl.StringVar(&certs, "certs", "", "directory of the cluster's CA and certificates")
	fl.StringVar(&name, "name", "admin", "whose certificate to present (<certs>/<name>.pem)")
	fl.DurationVar(&timeout, "timeout", 10*time.Second, "give up after this long")
	return cmd
}

func printStatus(w io.Writer, st *clusterpb.StatusResponse) {
	fmt.Fprintf(w, "job %s: %s, attempt %d", st.GetJob(), st.GetState(), st.GetAttempt())
	if id := st.GetRestoredFrom(); id != 0 {
		fmt.Fprintf(w, " (restored from checkpoint %d)", id)
	}
	fmt.Fprintln(w)
	if f := st.GetLastFailure(); f != "" {
		fmt.Fprintf(w, "last failure: %s\n", f)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tSLOTS\tADDRESS\tSESSION\tHEARTBEAT\tTASKS")
	for _, ws := range st.GetWorkers() {
		hb := fmt.Sprintf("%.1fs ago", float64(ws.GetSinceHeartbeatMs())/1000)
		if ws.GetSuspect() {
			hb += " (suspect)"
		}
		tasks := strings.Join(ws.GetTasks(), " ")
		if tasks == "" {
			tasks = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\n", ws.GetWorker(), ws.GetSlots(), ws.GetDataAddress(), ws.GetSession(), hb, tasks)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECKPOINT\tSTATE\tAT\tDURATION\tBYTES\tSLOWEST TASK / REASON")
	for _, c := range st.GetCheckpoints() {
		at := time.UnixMilli(c.GetAtUnixMs()).Format("15:04:05.000")
		what := c.GetSlowest()
		if c.GetState() != "completed" {
			what = c.GetReason()
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%dms\t%d\t%s\n", c.GetId(), c.GetState(), at, c.GetDurationMs(), c.GetBytes(), what)
	}
	tw.Flush()
}
