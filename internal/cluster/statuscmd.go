package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/weirstream/weir/internal/transport"
)

// StatusCommand is the status command of weir and of job programs
// (weir.Main).
func StatusCommand() *cobra.Command {
	var coord, certs, name string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use: "status", Short: "Show a cluster's job: its workers, slots, tasks, attempt and last checkpoints", Args: cobra.NoArgs,
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
			st, err := FetchStatus(ctx, coord, tc)
			if err != nil {
				return err
			}
			PrintStatus(cmd.OutOrStdout(), st)
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
