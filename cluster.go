package weir

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/internal/cluster"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/internal/transport"
)

// Role is what a process of a job does.
type Role string

const (
	// Local runs the whole job in this process (the default).
	Local Role = ""
	// Coordinator runs the job's checkpoint coordinator and places its
	// tasks on the workers that join it.
	Coordinator Role = "coordinator"
	// Worker runs the tasks the coordinator deploys on it.
	Worker Role = "worker"
)

// ClusterConfig makes a process one of a cluster's: every process runs the
// same job binary and builds the same graph; the coordinator refuses a
// worker that built another.
type ClusterConfig struct {
	Role Role
	// Listen is where the process accepts connections: the coordinator,
	// its workers'; a worker, the coordinator's calls and other workers'
	// data. Default loopback: 127.0.0.1:7700 for the coordinator, any port
	// for a worker.
	Listen string
	// Advertise is the address others reach a worker at, when it differs
	// from Listen's (default: Listen's address).
	Advertise string
	// Join is the coordinator's host:port (workers).
	Join string
	// Name is the process's name, which its certificate holds; the
	// coordinator's is "coordinator". Workers need one each.
	Name string
	// Slots is how many slots a worker offers (default 1). The job needs as
	// many slots in all as its largest parallelism.
	Slots int
	// Certs is the directory of the cluster's CA and certificates (weir
	// cluster certs --out DIR creates a test cluster's). Required: control
	// and data traffic use mutual TLS.
	Certs string
	// HeartbeatInterval (default 1s) and HeartbeatTimeout (default 5s): a
	// worker silent for the timeout is lost, and the job restarts from its
	// latest checkpoint on the slots left.
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
	// OnListen, if set, hears the coordinator's address once it listens.
	OnListen func(addr string)
}

func (c ClusterConfig) validate(cfg Config) error {
	switch c.Role {
	case Local:
		return nil
	case Coordinator, Worker:
	default:
		return fmt.Errorf("cluster role %q: want coordinator or worker", c.Role)
	}
	if c.Certs == "" {
		return errors.New("a cluster needs certificates (--certs DIR): control and data traffic use mutual TLS; weir cluster certs --out DIR creates a test cluster's")
	}
	if cfg.Checkpoint.Mode != NoCheckpoints && cfg.Checkpoint.Dir == "" {
		return errors.New("a cluster needs checkpoint storage that every process reaches (--checkpoint-dir a shared directory or s3://bucket/prefix): memory checkpoints live in one process")
	}
	if r := cfg.Restore; r != "" && r != "latest" {
		return fmt.Errorf("restore %q: a cluster restores checkpoints of its own storage (--restore latest); restore a checkpoint elsewhere in local mode", r)
	}
	if c.Role == Worker {
		if c.Join == "" {
			return errors.New("a worker needs the coordinator's address (--join host:port)")
		}
		if c.Name == "" || c.Name == cluster.CoordinatorName {
			return fmt.Errorf("a worker needs a name of its own (--name), which its certificate holds; not %q", c.Name)
		}
		if c.Slots < 0 {
			return fmt.Errorf("a worker offers %d slots; it needs at least 1", c.Slots)
		}
	}
	return cluster.Liveness{HeartbeatInterval: c.HeartbeatInterval, Timeout: c.HeartbeatTimeout}.Validate()
}

// executeClustered runs this process's role of the job.
func (e *Environment) executeClustered(ctx context.Context, plan *graph.Plan, spec runtime.Spec) (Result, error) {
	cc := e.cfg.Cluster
	live := cluster.Liveness{HeartbeatInterval: cc.HeartbeatInterval, Timeout: cc.HeartbeatTimeout}
	if cc.Role == Worker {
		tc, err := transport.LoadTLS(cc.Certs, cc.Name)
		if err != nil {
			return Result{}, err
		}
		err = cluster.RunNode(ctx, cluster.NodeConfig{
			Coordinator: cc.Join, Name: cc.Name, Slots: max(cc.Slots, 1), Listen: cc.Listen, Advertise: cc.Advertise,
			TLS: tc, Spec: spec, Codec: e.wireCodec(plan), Logger: spec.Logger,
		})
		return Result{}, err
	}
	tc, err := transport.LoadTLS(cc.Certs, cluster.CoordinatorName)
	if err != nil {
		return Result{}, err
	}
	listen := cc.Listen
	if listen == "" {
		listen = "127.0.0.1:7700"
	}
	c, err := cluster.StartCoordinator(cluster.CoordinatorConfig{Graph: cluster.GraphOf(spec), Listen: listen, TLS: tc, Liveness: live, Logger: spec.Logger, Stats: spec.Stats})
	if err != nil {
		return Result{}, err
	}
	defer c.Close()
	spec.Logger.Info("coordinator listening", "job", spec.Name, "addr", c.Addr())
	if cc.OnListen != nil {
		cc.OnListen(c.Addr())
	}
	x := cluster.NewExecutor(c)
	defer x.Close()
	spec.Executor = x
	onEvent := spec.OnEvent
	spec.OnEvent = func(ev runtime.JobEvent) {
		c.Observe(ev)
		if onEvent != nil {
			onEvent(ev)
		}
	}
	return runtime.Run(ctx, spec)
}

// wireCodec returns the codec of the batches on an edge of plan: the
// records of its upstream node's output port.
func (e *Environment) wireCodec(plan *graph.Plan) func(graph.Edge) transport.BatchCodec {
	return func(edge graph.Edge) transport.BatchCodec {
		from := plan.Vertices[edge.From]
		return e.nodes[from.Nodes[len(from.Nodes)-1]].wire[edge.Port]
	}
}
