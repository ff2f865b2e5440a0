package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/weirstream/weir/internal/transport"
)

func newCluster() *cobra.Command {
	cluster := &cobra.Command{
		Use:   "cluster",
		Short: "Tools for running Weir on many machines",
	}
	var (
		out          string
		names, hosts []string
		validFor     time.Duration
	)
	certs := &cobra.Command{
		Use:   "certs",
		Short: "Create a CA and a certificate per process for a test cluster's mutual TLS",
		Long: `Create, in --out, a CA (ca.pem, ca-key.pem) and for every process name a
certificate and key (<name>.pem, <name>-key.pem) signed by it, valid for the
name and --hosts. Every process of the cluster gets ca.pem and its own pair;
keep ca-key.pem away from them. For production, use your own PKI.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return errors.New("--out: say where the certificates go")
			}
			if validFor <= 0 {
				return fmt.Errorf("--valid-for %v: want a positive duration", validFor)
			}
			if err := transport.WriteCerts(out, names, hosts, validFor); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote a CA and certificates for %v (hosts %v) to %s\n", names, hosts, out)
			return nil
		},
	}
	certs.Flags().StringVar(&out, "out", "", "directory to write the certificates to (must not hold a CA yet)")
	certs.Flags().StringSliceVar(&names, "names", []string{"coordinator", "worker-1", "worker-2", "worker-3"}, "process names, one certificate each")
	certs.Flags().StringSliceVar(&hosts, "hosts", []string{"localhost", "127.0.0.1", "::1"}, "host names and IP addresses the processes are reached at")
	certs.Flags().DurationVar(&validFor, "valid-for", 365*24*time.Hour, "how long the certificates are valid")
	cluster.AddCommand(certs)
	return cluster
}
