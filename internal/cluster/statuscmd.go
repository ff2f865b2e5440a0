package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/weirstream/weir/internal/ha"
	"github.com/weirstream/weir/internal/transport"
)

// StatusCommand is the status command of weir and of job programs
// (weir.Main).
func StatusCommand() *cobra.Command {
	var coord, certs, name, haURL, job, haCA, haCert, haKey string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use: "status", Short: "Show a cluster's job: its coordinators, workers, slots, tasks, attempt and last checkpoints", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if coord == "" && haURL == "" || certs == "" {
				return errors.New("--certs and --coordinator (or --ha and --job: the leader etcd names) are required")
			}
			if haURL != "" && job == "" {
				return errors.New("--ha needs --job: the job whose coordinators to show")
			}
			tc, err := transport.LoadTLS(certs, name)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			if haURL != "" {
				leader, err := printCandidates(ctx, cmd.OutOrStdout(), haURL, job, haCA, haCert, haKey)
				if err != nil || leader == "" && coord == "" {
					return err // NB: nil: the job ended, and no coordinator is left
				}
				coord = cmp.Or(coord, leader)
			}
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
	fl.StringVar(&haURL, "ha", "", "the coordinators' --ha (etcd://host:port[,…][/prefix]): show the leader, its epoch and the standbys, and the leader's status")
	fl.StringVar(&job, "job", "", "with --ha: the job's name")
	fl.StringVar(&haCA, "ha-cacert", "", "TLS to etcd: the CA that signed etcd's certificate (PEM)")
	fl.StringVar(&haCert, "ha-cert", "", "TLS to etcd: a client certificate (PEM)")
	fl.StringVar(&haKey, "ha-key", "", "TLS to etcd: the client certificate's key (PEM)")
	fl.DurationVar(&timeout, "timeout", 10*time.Second, "give up after this long")
	return cmd
}

// printCandidates prints how job ended, if it did, and its coordinators
// as etcd lists them, and returns the leader's address ("": none, and the
// job ended).
func printCandidates(ctx context.Context, w io.Writer, haURL, job, ca, cert, key string) (string, error) {
	cfg, err := ha.ParseURL(haURL)
	if err != nil {
		return "", err
	}
	if cfg.TLS, err = ha.LoadTLS(ca, cert, key); err != nil {
		return "", err
	}
	c, err := ha.Dial(cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	end, err := c.Ended(ctx, job)
	if err != nil {
		return "", err
	}
	cs, err := c.Candidates(ctx, job)
	if err != nil {
		return "", err
	}
	switch {
	case end.Revision != 0 && end.Outcome == ha.Finished:
		fmt.Fprintf(w, "job %s ended: %s\n", job, end.Outcome)
	case end.Revision != 0:
		fmt.Fprintf(w, "job %s ended: %s (to run it on from its latest checkpoint, start its coordinators with --restore latest, and its workers)\n", job, end.Outcome)
	case len(cs) == 0:
		return "", fmt.Errorf("no coordinator of job %s campaigns in etcd at %s (is the job's name right? its coordinators' --ha?)", job, haURL)
	}
	if len(cs) == 0 {
		return "", nil
	}
	fmt.Fprintf(w, "leader %s, epoch %d\n", cs[0].Name, cs[0].Epoch)
	for _, s := range cs[1:] {
		fmt.Fprintf(w, "standby %s\n", s.Name)
	}
	return cs[0].Name, nil
}
