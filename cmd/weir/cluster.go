package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/transport"
)

func newCoordinator() *cobra.Command {
	c := &cobra.Command{
		Use:   "coordinator",
		Short: "Coordinate a built-in job on workers: place its tasks and take its checkpoints",
		Long: `Run a built-in job's coordinator: workers join it (weir worker <job> --join),
it places the job's tasks on their slots, triggers checkpoints and restarts the
job from the latest one when a worker is lost. Every process takes the same job
flags (they build the same graph; a worker that built another is refused) and
reaches the same checkpoint storage.`,
	}
	c.AddCommand(newWordCount(weir.Coordinator), newNexmarkJob(weir.Coordinator))
	return c
}

func newWorker() *cobra.Command {
	c := &cobra.Command{
		Use:   "worker",
		Short: "Run a built-in job's tasks for its coordinator",
		Long: `Run a worker of a built-in job: it joins the coordinator (--join), offers
--slots slots and runs the tasks the coordinator places on it. When the job
finishes, the coordinator tells its workers, and they exit 0 ("the job
finished; this worker exits"); a coordinator that is gone without saying so
(killed, interrupted, the job failed or cancelled) may be started again with
--restore latest, so until it is stopped the worker keeps looking for it.
Take the same job flags as the coordinator.`,
	}
	c.AddCommand(newWordCount(weir.Worker), newNexmarkJob(weir.Worker))
	return c
}

// clusterFlags are a cluster process's settings.
type clusterFlags struct {
	listen, advertise, join, name, certs string
	ha, haCA, haCert, haKey              string
	slots                                int
	heartbeat, timeout, haTTL            time.Duration
}

func (f *clusterFlags) add(cmd *cobra.Command, role weir.Role) {
	fl := cmd.Flags()
	switch role {
	case weir.Coordinator:
		fl.StringVar(&f.listen, "listen", "127.0.0.1:7700", "address to accept workers on (loopback unless told otherwise: :7700 is loopback too, 0.0.0.0:7700 every interface)")
		fl.DurationVar(&f.heartbeat, "heartbeat-interval", time.Second, "how often workers send heartbeats")
		fl.DurationVar(&f.timeout, "heartbeat-timeout", 5*time.Second, "a worker silent this long is lost, and the job restarts from its latest checkpoint")
		fl.StringVar(&f.advertise, "advertise", "", "with --ha: the address workers reach this coordinator at, which etcd and weir status name, if not --listen's")
		f.addHA(fl)
	case weir.Worker:
		fl.StringVar(&f.join, "join", "", "the coordinator's host:port (with --ha coordinators, each one's, separated by commas)")
		fl.StringVar(&f.name, "name", "", "this worker's name, which its certificate holds (<certs>/<name>.pem)")
		fl.IntVar(&f.slots, "slots", 1, "task slots offered: a slot runs one subtask of every operator")
		fl.StringVar(&f.listen, "listen", "127.0.0.1:0", "address to accept the coordinator's calls and other workers' data on (loopback unless told otherwise: :7800 is loopback too, 0.0.0.0:7800 every interface)")
		fl.StringVar(&f.advertise, "advertise", "", "address others reach this worker at, if not --listen's")
	default:
		f.addHA(fl)
		return
	}
	fl.StringVar(&f.certs, "certs", "", "directory of the cluster's CA and certificates (weir cluster certs --out DIR)")
}

func (f *clusterFlags) addHA(fl *pflag.FlagSet) {
	fl.StringVar(&f.ha, "ha", "", "high availability: etcd://host:port[,host:port…][/prefix]; processes of the job campaign there, one leads and runs it, the others stand by")
	fl.DurationVar(&f.haTTL, "ha-ttl", 0, "the leader's lease in etcd, whole seconds: a standby takes over within it (0: 5s)")
	fl.StringVar(&f.haCA, "ha-cacert", "", "TLS to etcd: the CA that signed etcd's certificate (PEM; as etcdctl --cacert)")
	fl.StringVar(&f.haCert, "ha-cert", "", "TLS to etcd: this process's client certificate (PEM; as etcdctl --cert)")
	fl.StringVar(&f.haKey, "ha-key", "", "TLS to etcd: the client certificate's key (PEM; as etcdctl --key)")
}

func (f *clusterFlags) config(role weir.Role) (weir.ClusterConfig, error) {
	if role == weir.Local {
		return weir.ClusterConfig{HA: f.ha, HATTL: f.haTTL, HACACert: f.haCA, HACert: f.haCert, HAKey: f.haKey}, nil
	}
	if f.certs == "" {
		return weir.ClusterConfig{}, errors.New("--certs is required: control and data traffic use mutual TLS (weir cluster certs --out DIR creates a test cluster's)")
	}
	if role == weir.Worker && (f.join == "" || f.name == "") {
		return weir.ClusterConfig{}, errors.New("--join and --name are required")
	}
	if f.slots < 1 && role == weir.Worker {
		return weir.ClusterConfig{}, fmt.Errorf("--slots %d: must be at least 1", f.slots)
	}
	return weir.ClusterConfig{
		Role: role, Listen: f.listen, Advertise: f.advertise, Join: f.join, Name: f.name, Slots: f.slots, Certs: f.certs,
		HeartbeatInterval: f.heartbeat, HeartbeatTimeout: f.timeout, HA: f.ha, HATTL: f.haTTL, HACACert: f.haCA, HACert: f.haCert, HAKey: f.haKey,
	}, nil
}

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
keep ca-key.pem away from them. For production, use your own PKI.

Each certificate holds a role (a URI SAN weir://role/<role>), which the
cluster enforces: "coordinator" gets the coordinator's (only it commands
workers), "admin" an admin's (it reads weir status, and cannot join as a
worker), every other name a worker's. Write name=role to choose, e.g.
--names coordinator,worker-1,ops=admin.`,
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
	certs.Flags().StringSliceVar(&names, "names", []string{"coordinator", "worker-1", "worker-2", "worker-3", "admin"}, "process names, one certificate each, as name or name=role (coordinator, worker or admin; by default coordinator and admin are theirs, any other name a worker)")
	certs.Flags().StringSliceVar(&hosts, "hosts", []string{"localhost", "127.0.0.1", "::1"}, "host names and IP addresses the processes are reached at")
	certs.Flags().DurationVar(&validFor, "valid-for", 365*24*time.Hour, "how long the certificates are valid")
	cluster.AddCommand(certs)
	return cluster
}
