// Package weir is Weir's typed dataflow API: a job is an ordinary Go program
// that builds a graph of sources, transformations and sinks on an
// Environment and executes it.
//
//	env := weir.New(weir.Config{Job: "wordcount", Checkpoint: weir.CheckpointConfig{Interval: time.Second, Dir: "/tmp/ckpt"}})
//	lines := weir.Source(env, "lines", file.Lines(...))
//	words := weir.FlatMap(lines, "split", split)
//	counts := weir.Process(weir.KeyBy(words, func(w string) string { return w }), "count", newCounter)
//	weir.Sink(counts, "out", file.Sink(...))
//	_, err := env.Execute(ctx)
//
// Functions that build the graph record the first mistake and Execute
// returns it, so a job reads top to bottom without error checks. Every
// operator has a stable UID (by default its name): state is matched to
// operators by UID across restarts.
package weir

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/runtime"
	"github.com/weirstream/weir/storage"
)

// Config configures a job. The zero value of a field means its default.
type Config struct {
	// Job names the job; checkpoints live under <Checkpoint.Dir>/<Job>.
	// Default "weir-job".
	Job string
	// Parallelism is the default parallelism of operators. Default 1.
	Parallelism int
	// MaxParallelism is the number of key groups: the upper bound of any
	// keyed operator's parallelism, fixed for the life of the job's state.
	// Default 128.
	MaxParallelism int
	Checkpoint     CheckpointConfig
	// Restore: "" starts afresh; "latest" restores the latest completed
	// checkpoint in Checkpoint.Dir (or starts afresh, saying so, when there
	// is none); anything else is the path of a checkpoint directory
	// (chk-<id>) or its _metadata file.
	Restore string
	// Restart is the restart strategy after a failure inside the process.
	// Default: fixed delay of 1s, at most 10 consecutive attempts.
	Restart runtime.RestartStrategy
	// BatchSize is the number of records per batch. Default 512.
	BatchSize int
	Logger    *slog.Logger
	// OnEvent hears of checkpoints and restarts; it must not block.
	OnEvent func(runtime.JobEvent)
}

// CheckpointConfig holds the checkpoint settings.
type CheckpointConfig struct {
	// Mode: exactly-once (default), at-least-once or none.
	Mode runtime.Mode
	// Interval between periodic checkpoints; required unless Mode is none.
	Interval time.Duration
	// MinPause, Timeout, MaxConcurrent, TolerableFailures, Retained and
	// RetainOnCancel are as in checkpoint.Config.
	MinPause          time.Duration
	Timeout           time.Duration
	MaxConcurrent     int
	TolerableFailures int
	Retained          int
	RetainOnCancel    bool
	// Dir is the checkpoint directory; empty keeps checkpoints in memory,
	// which survive failures inside the process but not the process.
	Dir string
	// FS is the file system of Dir; default the real one.
	FS vfs.FS
}

// Environment is a job being built. It is not safe for concurrent use.
type Environment struct {
	cfg   Config
	nodes []*node
	err   error
}

// New starts building a job.
func New(cfg Config) *Environment {
	if cfg.Job == "" {
		cfg.Job = "weir-job"
	}
	if cfg.Parallelism == 0 {
		cfg.Parallelism = 1
	}
	if cfg.MaxParallelism == 0 {
		cfg.MaxParallelism = keygroup.DefaultMaxParallelism
	}
	if cfg.Checkpoint.Mode == 0 {
		cfg.Checkpoint.Mode = runtime.ExactlyOnce
	}
	if cfg.Checkpoint.FS == nil {
		cfg.Checkpoint.FS = vfs.Default
	}
	if cfg.Restart == nil {
		cfg.Restart = runtime.FixedDelay{Delay: time.Second, MaxAttempts: 10}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Environment{cfg: cfg}
}

// Config is the environment's configuration, defaults filled in.
func (e *Environment) Config() Config { return e.cfg }

func (e *Environment) fail(err error) {
	if e.err == nil {
		e.err = err
	}
}

// node is one operator of the graph being built, with what it takes to
// build its instances.
type node struct {
	graph.Node
	inputs []inputSpec
	// instance builds one subtask's operator; next is the downstream
	// Collector[Out] (nil for a sink). It returns the operator and its own
	// Collector[In] (nil for a source or a multi-input operator).
	instance func(c *chain, next any) (operator.Operator, any)
	// head adapts the instance for use at the head of a task.
	head func(op operator.Operator, in any, c *chain) any
	// emitter builds the collector over the node's outgoing edges.
	emitter func(e *Environment, b *runtime.TaskBuild, plan *graph.Plan) (any, []runtime.Output)
	// records counts records entering the node as a task head, or leaving
	// it as a source.
	records atomic.Int64
}

type inputSpec struct {
	partition graph.Partition
	// hashRoute, for a hash edge, is a func(p, maxParallelism int)
	// runtime.Route[T] over the upstream's record type T.
	hashRoute any
}

// chain is what the operators of one subtask's chain share.
type chain struct {
	subtask int
	// err is the first error of a user function in the chain; the head
	// returns it after the record that caused it.
	err error
}

func (c *chain) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// Option sets a property of an operator.
type Option func(*graph.Node)

// UID sets the operator's stable id (default: its name).
func UID(uid string) Option { return func(n *graph.Node) { n.UID = uid } }

// Parallelism sets the operator's parallelism.
func Parallelism(p int) Option { return func(n *graph.Node) { n.Parallelism = p } }

// NoChain keeps the operator out of its predecessor's task.
func NoChain() Option { return func(n *graph.Node) { n.NoChain = true } }

func (e *Environment) add(name string, opts []Option, n *node) int {
	n.Name, n.UID, n.Parallelism, n.MaxParallelism = name, name, e.cfg.Parallelism, e.cfg.MaxParallelism
	for _, o := range opts {
		o(&n.Node)
	}
	e.nodes = append(e.nodes, n)
	return len(e.nodes) - 1
}

// Metrics are live counts of one operator.
type Metrics struct {
	UID string
	// Records entering the operator when it heads a task, or leaving it
	// when it is a source.
	Records int64
}

// Metrics reads every operator's counters; safe while the job runs.
func (e *Environment) Metrics() []Metrics {
	out := make([]Metrics, len(e.nodes))
	for i, n := range e.nodes {
		out[i] = Metrics{UID: n.UID, Records: n.records.Load()}
	}
	return out
}

// Plan validates the graph and returns its execution plan.
func (e *Environment) Plan() (*graph.Plan, error) {
	if e.err != nil {
		return nil, e.err
	}
	var g graph.Graph
	for _, n := range e.nodes {
		gn := n.Node
		gn.Inputs = nil
		g.Nodes = append(g.Nodes, gn)
	}
	for i, n := range e.nodes {
		g.Nodes[i].Inputs = n.Node.Inputs
	}
	return graph.NewPlan(g)
}

// Execute validates the configuration and the graph, then runs the job
// until its input ends, it fails beyond its restart strategy, or ctx ends.
func (e *Environment) Execute(ctx context.Context) (runtime.Result, error) {
	plan, err := e.Plan()
	if err != nil {
		return runtime.Result{}, fmt.Errorf("job %s: %w", e.cfg.Job, err)
	}
	spec, err := e.spec(plan)
	if err != nil {
		return runtime.Result{}, fmt.Errorf("job %s: %w", e.cfg.Job, err)
	}
	return runtime.Run(ctx, spec)
}

func (e *Environment) spec(plan *graph.Plan) (runtime.Spec, error) {
	cc := e.cfg.Checkpoint
	spec := runtime.Spec{
		Name: e.cfg.Job, Plan: plan, Build: e.build(plan), Mode: cc.Mode, Restart: e.cfg.Restart,
		BatchSize: e.cfg.BatchSize, Logger: e.cfg.Logger, OnEvent: e.cfg.OnEvent,
		Checkpoint: checkpoint.Config{
			Interval: cc.Interval, MinPause: cc.MinPause, Timeout: cc.Timeout, MaxConcurrent: cc.MaxConcurrent,
			TolerableFailures: cc.TolerableFailures, Retained: cc.Retained, RetainOnCancel: cc.RetainOnCancel,
		},
	}
	if e.cfg.BatchSize < 0 {
		return spec, fmt.Errorf("batch size %d is negative", e.cfg.BatchSize)
	}
	if cc.Mode != runtime.None {
		if cc.Interval <= 0 {
			return spec, fmt.Errorf("checkpoint interval is %v in mode %v: set an interval (for example 10s) or use mode none", cc.Interval, cc.Mode)
		}
		if _, err := spec.Checkpoint.Normalize(); err != nil {
			return spec, err
		}
	}
	if cc.Dir == "" {
		spec.Storage = storage.NewMemory(0)
	} else {
		d, err := storage.NewDir(cc.FS, cc.Dir, e.cfg.Job, 0)
		if err != nil {
			return spec, err
		}
		spec.Storage = d
	}
	switch r := e.cfg.Restore; r {
	case "":
	case "latest":
		if cc.Dir == "" {
			return spec, errors.New("restore latest needs a checkpoint directory: memory checkpoints do not outlive the process")
		}
		p, err := runtime.LatestRestorePoint(spec.Storage)
		switch {
		case errors.Is(err, runtime.ErrNoCheckpoint):
			e.cfg.Logger.Info("no completed checkpoint to restore; starting from the beginning", "dir", spec.Storage.Describe())
		case err != nil:
			return spec, err
		default:
			spec.Restore = p
		}
	default:
		m, reader, err := storage.OpenCheckpoint(cc.FS, r)
		if err != nil {
			return spec, err
		}
		spec.Restore = &runtime.RestorePoint{Metadata: m, Read: reader.ReadState}
	}
	return spec, nil
}

// build returns the runtime's builder of one subtask: the chain of the
// vertex's operators, tail first, each wired to the next.
func (e *Environment) build(plan *graph.Plan) func(*runtime.TaskBuild) (*runtime.TaskParts, error) {
	return func(b *runtime.TaskBuild) (*runtime.TaskParts, error) {
		vx := b.Vertex
		c := &chain{subtask: b.Subtask}
		tail := e.nodes[vx.Nodes[len(vx.Nodes)-1]]
		var next any
		var outputs []runtime.Output
		if len(vx.Outputs) > 0 {
			next, outputs = tail.emitter(e, b, plan)
		}
		ops := make([]operator.Operator, len(vx.Nodes))
		for i := len(vx.Nodes) - 1; i >= 0; i-- {
			var op operator.Operator
			op, next = e.nodes[vx.Nodes[i]].instance(c, next)
			ops[i] = op
		}
		head := e.nodes[vx.Nodes[0]].head(ops[0], next, c)
		return &runtime.TaskParts{Ops: ops, Head: head, Outputs: outputs}, nil
	}
}
