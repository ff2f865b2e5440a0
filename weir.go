// Package weir is Weir's typed dataflow API: a job is an ordinary Go program
// that builds a graph of sources, transformations and sinks on an
// Environment and executes it (from the package's word count example,
// which compiles and runs):
//
//	env := weir.New(weir.Config{Job: "wordcount", Checkpoint: weir.CheckpointConfig{Dir: filepath.Join(dir, "ckpt")}})
//	words := weir.FlatMap(weir.Source(env, "lines", lines), "split", split)
//	ones := weir.Map(words, "one", func(w string) count { return count{w, 1} })
//	counts := weir.Reduce(weir.KeyBy(ones, func(c count) string { return c.Word }), "count",
//		func(acc, c count) count { return count{acc.Word, acc.N + c.N} })
//	weir.Sink(weir.Map(counts, "format", format), "output", out)
//	_, err := env.Execute(ctx)
//
// Functions that build the graph record the first mistake and Execute
// returns it, so a job reads top to bottom without error checks.
//
// Every operator has a UID, by default its name: a restore matches state to
// operators by UID. Renaming an operator therefore changes its identity,
// and a restore refuses state that no operator claims; pin the old identity
// with UID when renaming.
package weir

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/internal/cacheline"
	"github.com/weirstream/weir/internal/cluster"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state/backend"
	"github.com/weirstream/weir/state/local"
	"github.com/weirstream/weir/storage"
)

// Mode is a job's checkpointing mode.
type Mode = runtime.Mode

const (
	// ExactlyOnce aligns barriers: after a restore, state reflects every
	// record exactly once. The default.
	ExactlyOnce = runtime.ExactlyOnce
	// AtLeastOnce does not align: after a restore, records may count twice,
	// never zero times.
	AtLeastOnce = runtime.AtLeastOnce
	// NoCheckpoints takes no checkpoints: a failure restarts the job from
	// the beginning.
	NoCheckpoints = runtime.None
)

// ParseMode parses "exactly-once", "at-least-once" or "none".
func ParseMode(s string) (Mode, error) { return runtime.ParseMode(s) }

// Alignment is how exactly-once checkpoints treat barriers
// (CheckpointConfig.Alignment).
type Alignment int

const (
	// Aligned checkpoints (the default) wait, at a task with several
	// inputs, until every input delivered the barrier: nothing in flight
	// is stored, but under back-pressure a checkpoint waits for the
	// backlog ahead of its barriers.
	Aligned Alignment = iota
	// Unaligned checkpoints (Flink's FLIP-76) let barriers overtake the
	// data in flight, which is stored with the checkpoint as channel
	// state and replayed first on restore: checkpoints complete under
	// back-pressure, at the cost of larger checkpoints. Savepoints and
	// the final checkpoint still align.
	Unaligned
)

func (a Alignment) String() string {
	if a == Unaligned {
		return "unaligned"
	}
	return "aligned"
}

// ParseAlignment parses "aligned" or "unaligned".
func ParseAlignment(s string) (Alignment, error) {
	switch s {
	case "aligned":
		return Aligned, nil
	case "unaligned":
		return Unaligned, nil
	}
	return Aligned, fmt.Errorf("checkpoint alignment %q: want aligned or unaligned", s)
}

// Restart strategies decide whether and when a job that failed restarts
// from its latest checkpoint.
type (
	RestartStrategy    = runtime.RestartStrategy
	NoRestart          = runtime.NoRestart
	FixedDelay         = runtime.FixedDelay
	ExponentialBackoff = runtime.ExponentialBackoff
	FailureRate        = runtime.FailureRate
)

// StateBackend says where keyed state lives: Kind HeapState (the default)
// or PebbleState, with its settings.
type StateBackend = backend.Config

// State backends.
const (
	HeapState   = backend.Heap
	PebbleState = backend.Pebble
)

// Events tell of a running job's progress (Config.OnEvent).
type (
	JobEvent  = runtime.JobEvent
	EventKind = runtime.EventKind
)

const (
	EventRunning             = runtime.EventRunning
	EventCheckpointCompleted = runtime.EventCheckpointCompleted
	EventCheckpointAborted   = runtime.EventCheckpointAborted
	EventRestarting          = runtime.EventRestarting
	EventFinished            = runtime.EventFinished
)

// Result summarises a finished job.
type Result = runtime.Result

// Permanent marks an error a restart cannot fix, such as a record that can
// never be processed: returned from a function, it fails the job at once
// instead of restarting it. Other errors are retried.
func Permanent(err error) error { return operator.Permanent(err) }

// ErrEarlierRun matches (errors.Is) the error of a job that would start from
// the beginning over checkpoints an earlier run left: resume it with
// Restore "latest", or start over with Fresh.
var ErrEarlierRun = runtime.ErrEarlierRun

// ErrStartedOver matches (errors.Is) the error of a restore of a checkpoint
// or savepoint taken before a run that started over (Fresh): that run
// deleted or wrote the output the checkpoint's output builds on. Restore a
// checkpoint of that run, or start over again.
var ErrStartedOver = operator.ErrStartedOver

// ErrRolledBack matches (errors.Is) the error of a restore of a checkpoint
// or savepoint that a later start rolled back: that start restored an
// older checkpoint, and its sinks rolled back the output committed after
// it, which this one's output builds on. Restore a checkpoint taken since
// (Restore "latest"), or the older one.
var ErrRolledBack = runtime.ErrRolledBack

// DefaultCheckpointInterval is the time between checkpoints when
// CheckpointConfig.Interval is zero, in the API and the CLI alike.
const DefaultCheckpointInterval = time.Second

// DefaultRestart is the restart strategy when Config.Restart is nil, in the
// API and the CLI alike.
var DefaultRestart RestartStrategy = FixedDelay{Delay: time.Second, MaxAttempts: 10}

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
	// Restore: "" starts from the beginning, and refuses to when
	// Checkpoint.Dir holds checkpoints of an earlier run (see Fresh);
	// "latest" restores the latest completed checkpoint in Checkpoint.Dir
	// (or starts from the beginning when there is none); anything else is
	// the path of a checkpoint directory (chk-<id>) or its _metadata file.
	// A restore is checked against the job first: see the README's
	// "Restoring safely".
	Restore string
	// Fresh starts over: the job's checkpoints in Checkpoint.Dir are
	// deleted, and so is what its sinks committed in earlier runs.
	Fresh bool
	// AllowNonRestoredState lets a restore drop the state of operators the
	// job no longer has (matched by UID) instead of refusing.
	AllowNonRestoredState bool
	// Restart is the restart strategy after a failure inside the process.
	// Default DefaultRestart.
	Restart RestartStrategy
	// BatchSize is the number of records per batch. Default 512.
	BatchSize int
	// StateBackend is where keyed state lives: on the heap (default), or
	// in Pebble on local disk with incremental checkpoints.
	StateBackend StateBackend
	// LocalRecovery keeps a local copy of the snapshots of the subtasks
	// this process runs, in LocalRecoveryDir, and makes their restores on
	// this machine read from it what the restored checkpoint's checksums
	// vouch for, instead of downloading it (Flink's task-local recovery;
	// see the README's "Local recovery"). It costs a second, local write of
	// what each checkpoint uploads and the disk space of a checkpoint's
	// state. Default false, as Flink's. It needs checkpoints.
	LocalRecovery bool
	// LocalRecoveryDir is where the local copies live; default
	// <os.TempDir()>/weir-local-recovery/<a hash of Checkpoint.Dir> (runs
	// with other checkpoint storage keep apart). A process restarted on the same
	// machine with the same directory restores from what its previous
	// incarnation left there.
	LocalRecoveryDir string
	// BufferDebloat, when above 0, turns buffer debloating on, as Flink's
	// (FLIP-183): each subtask sizes its input channels to its measured
	// throughput so that what they hold takes about this long to drain
	// (Flink's target is 1s). Less in flight makes aligned checkpoints
	// faster under back-pressure and unaligned ones smaller. Default 0:
	// off, every channel holds 16 batches.
	BufferDebloat time.Duration
	// WatermarkInterval is the least time between two watermarks of a
	// source or AssignWatermarks (Flink's auto-watermark interval): event
	// time moves on in steps of about this. Default 200ms.
	WatermarkInterval time.Duration
	// Logger logs the job's life: restores, failures, checkpoints (at
	// info). Default slog.Default().
	Logger *slog.Logger
	// OnEvent hears of checkpoints and restarts; it must not block.
	OnEvent func(JobEvent)
	// Cluster makes this process a cluster's coordinator or worker; by
	// default it runs the whole job.
	Cluster ClusterConfig
	// Web, if set, is the address (host:port; 127.0.0.1:0 for any free
	// port; no host is loopback) where the process that runs the job's
	// driver (this one, or a cluster's coordinator) serves the web UI at
	// /, Prometheus metrics at /metrics and a JSON API under /api/v1/
	// (job, graph, subtasks, checkpoints and their timelines, failures,
	// operators, config), and takes savepoint and cancel requests and
	// serves CPU profiles (flame graphs, /debug/pprof) to requests that
	// carry WebToken (none without it). OnWeb, if set, hears the address
	// it listens on.
	Web      string
	WebToken string
	OnWeb    func(addr string)
	// WebLinger keeps the web server answering for this long after the job
	// ended (Execute returned), with its final state and cause, so that an
	// open page shows how it ended; WaitForWeb waits for it. Default 0: it
	// stops when Execute returns. The weir command and Main linger 10s.
	WebLinger time.Duration
}

// MinCheckpointTimeout is the least CheckpointConfig.Timeout, as Flink's
// (10 ms).
const MinCheckpointTimeout = 10 * time.Millisecond

// CheckpointConfig holds the checkpoint settings.
type CheckpointConfig struct {
	// Mode: ExactlyOnce (default), AtLeastOnce or NoCheckpoints.
	Mode Mode
	// Interval between periodic checkpoints. Default
	// DefaultCheckpointInterval.
	Interval time.Duration
	// MinPause is the least time from one checkpoint's completion to the
	// next trigger (it needs MaxConcurrent 1). Default 0.
	MinPause time.Duration
	// Timeout aborts a checkpoint not complete by then: at least
	// MinCheckpointTimeout. Default 5 minutes.
	Timeout time.Duration
	// MaxConcurrent is how many checkpoints may be in flight. Default 1.
	MaxConcurrent int
	// TolerableFailures is how many checkpoint failures in a row the job
	// survives; one more fails it over. Default 0.
	TolerableFailures int
	// Retained is how many completed checkpoints are kept. Default 1.
	Retained int
	// DiscardOnCancel deletes the checkpoints when the job is cancelled;
	// by default they are kept, to resume with Restore "latest".
	DiscardOnCancel bool
	// Alignment is how exactly-once checkpoints treat barriers: Aligned
	// (default) or Unaligned; see Alignment.
	Alignment Alignment
	// AlignedTimeout, with Alignment Aligned, switches a task's checkpoint
	// to unaligned when its alignment lasts longer than this (Flink's
	// aligned-checkpoint timeout). Default 0: never.
	AlignedTimeout time.Duration
	// Dir is where checkpoints go: a directory (a path or file://path),
	// or object storage (s3://bucket/prefix?endpoint=…&region=…, with
	// credentials from the environment as AWS tools read them; mem://name
	// for tests). Empty keeps checkpoints in memory, which survive
	// failures inside the process but not the process.
	Dir string
	// FS is the file system of Dir; default the real one.
	FS vfs.FS
}

// Environment is a job being built. It is not safe for concurrent use.
type Environment struct {
	cfg   Config
	nodes []*node
	err   error
	// clusterOps sums the operators' counters of a coordinator's workers
	// (nil in other roles): the coordinator runs no operator.
	clusterOps *cluster.OperatorCounts
	// running is the executor of the cluster coordinator this process
	// runs now, if any (one per term of leadership with --ha): the web
	// server reads the workers and their profiles through it.
	running atomic.Pointer[cluster.Executor]
	// leading is set while this process holds the job's leadership
	// (--ha): a standby's API refuses what only the leader can do.
	leading atomic.Bool
	// incarnation numbers the operators' counters of a worker (nodes):
	// they count over every Execute, and so does its number.
	incarnation uint64
	// verify is set while Verify reruns the job (verify.go).
	verify *verifyRun
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
		cfg.Checkpoint.Mode = ExactlyOnce
	}
	if cfg.Checkpoint.Interval == 0 {
		cfg.Checkpoint.Interval = DefaultCheckpointInterval
	}
	if cfg.Checkpoint.FS == nil {
		cfg.Checkpoint.FS = vfs.Default
	}
	if cfg.Restart == nil {
		cfg.Restart = DefaultRestart
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	e := &Environment{cfg: cfg, incarnation: rand.Uint64() | 1}
	if cfg.Cluster.Role == Coordinator {
		e.clusterOps = cluster.NewOperatorCounts()
	}
	return e
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
	// emitter builds the collector over the node's outgoing edges; c is
	// the chain, whose current event time the batches carry when the node
	// has event time.
	emitter emitterFunc
	// counting wraps the Collector of an operator chained after this node
	// (of this node's records) so that it counts them in *count.
	counting func(next any, count *int64) any
	// sides build the collectors of the node's side outputs, by port.
	sides map[int]emitterFunc
	// wire encodes the batches of each output port: on the network, and in
	// channel state.
	wire map[int]wire
	// timed: the node's records carry event time (a watermark strategy at
	// or before it).
	timed bool
	// watermarks is a Source's WatermarkStrategy[T] (Watermarks option).
	watermarks any
	// records counts records entering the node, or leaving it as a
	// source. A head adds its batches; a chained node's count is kept in a
	// plain counter of its chain and added once per batch (chain.publish).
	records atomic.Int64
	// late counts the records its windows or joins dropped as late.
	late atomic.Int64
	// A source whose reader reports progress stores, per subtask, what it
	// has left to read (-1: not known yet), and the total.
	remaining []atomic.Int64
	total     atomic.Int64
	// verify is a source's or a sink's part in Verify; nondeterministic,
	// the NonDeterministic option.
	verify           *verifyPart
	nondeterministic bool
	// idleTimeout is its watermark strategy's (WithIdleness), which
	// follows the clock.
	idleTimeout time.Duration
}

// emitterFunc builds the collector over the edges of a node's output port
// (0: its records), and their outputs.
type emitterFunc func(e *Environment, b *runtime.TaskBuild, plan *graph.Plan, c *chain, port int) (any, []runtime.Output)

type inputSpec struct {
	partition graph.Partition
	// hashRoute, for a hash edge, is a func(p, maxParallelism int)
	// runtime.KeyRoute[T] over the upstream's record type T.
	hashRoute any
}

// chain is what the operators of one subtask's chain share.
type chain struct {
	subtask int
	// err is the first error of a user function in the chain; the head
	// returns it after the record that caused it.
	err error
	// now is the event time of the record being handled (MinTime: none):
	// the head sets it for each record, a timer or window for what it
	// emits, and emitters put it in the batches.
	now int64
	// group is the key group the sender carried for the record being
	// handled by the head, -1 when none: a keyed head need not hash its
	// key again.
	group int
	// sides holds the collectors of the tail's side outputs, by port.
	sides map[int]any
	// state configures the keyed operators' state backends.
	state backend.Config
	// stats are the subtask's counters; the head counts what it takes.
	stats *runtime.TaskStats
	// counted are the chained operators (all but the head), and counts
	// the records that entered each since the last publish: a plain
	// counter per operator, which only the task's goroutine touches, so
	// that counting costs no atomic per record.
	counted []*node
	counts  []int64
	// verify is set when the chain runs in a verification rerun, which
	// refuses processing-time timers and stops event time where the
	// checkpoint had it.
	verify *verifyRun
}

// publish adds the records counted since the last call to the chained
// operators' counters (node.records). The head calls it after each batch
// (or poll), and the runtime, through the chain's publisher output, after
// timers, watermarks and the end of input, which emit outside a batch.
func (c *chain) publish() {
	for i, n := range c.counted {
		if c.counts[i] != 0 {
			n.records.Add(c.counts[i])
			c.counts[i] = 0
		}
	}
}

// publisher is a task's output that publishes its chain's counts
// (chain.publish) whenever the runtime checks, flushes or broadcasts on
// the task's outputs: after every batch, poll, timer, watermark and the
// end of input, and before the task waits. It sends nothing.
type publisher struct{ c *chain }

func (p publisher) Flush() error                  { p.c.publish(); return nil }
func (p publisher) Broadcast(runtime.Event) error { p.c.publish(); return nil }
func (p publisher) Overtake(runtime.Event) error  { p.c.publish(); return nil }
func (p publisher) Congested() <-chan struct{}    { return nil }
func (p publisher) FlushChannels()                {}
func (p publisher) Err() error                    { p.c.publish(); return nil }

func (c *chain) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// Option sets a property of an operator.
type Option func(*node)

// UID sets the operator's stable identity (default: its name). State is
// matched to operators by UID when a job restores a checkpoint, so a
// renamed operator keeps its state only if UID pins its old identity.
func UID(uid string) Option { return func(n *node) { n.UID = uid } }

// Parallelism sets the operator's parallelism.
func Parallelism(p int) Option { return func(n *node) { n.Parallelism = p } }

// NoChain keeps the operator out of its predecessor's task.
func NoChain() Option { return func(n *node) { n.NoChain = true } }

// Operator kinds, recorded with UIDs in checkpoints: state of one kind
// cannot be restored into an operator of another.
const (
	kindSource         = "source"
	kindFlatMap        = "flatmap"
	kindUnion          = "union"
	kindCoProcess      = "coprocess"
	kindKeyedProcess   = "keyed-process"
	kindKeyedCoProcess = "keyed-coprocess"
	kindSink           = graph.KindSink
	kindAssigner       = "watermarks"
	kindWindow         = "window"
	kindWindowJoin     = "window-join"
	kindIntervalJoin   = "interval-join"
	kindJoin           = "join"
)

// upstream is a stream an operator reads: a Stream or a KeyedStream.
type upstream interface {
	environment() *Environment
	// input is the edge into a consumer of parallelism p.
	input(p int) (graph.Input, inputSpec)
}

// add adds node n, of the given kind, reading ups, to the graph. A nil
// function (fn) or an input from another Environment is recorded as the
// environment's error.
func (e *Environment) add(name, kind string, fn any, opts []Option, n *node, ups ...upstream) int {
	n.Name, n.UID, n.Kind, n.Parallelism, n.MaxParallelism = name, name, kind, e.cfg.Parallelism, e.cfg.MaxParallelism
	for _, o := range opts {
		o(n)
	}
	if isNil(fn) {
		e.fail(fmt.Errorf("operator %q: its function is nil", name))
	}
	n.timed = len(ups) > 0 // event time needs it on every input
	for _, up := range ups {
		if isNil(up) {
			e.fail(fmt.Errorf("operator %q reads a nil stream", name))
			continue
		}
		if up.environment() != e {
			e.fail(fmt.Errorf("operator %q reads a stream of another Environment: every stream of a job must come from the Environment it runs in", name))
			continue
		}
		gi, spec := up.input(n.Parallelism)
		n.Node.Inputs = append(n.Node.Inputs, gi)
		n.inputs = append(n.inputs, spec)
		n.timed = n.timed && e.nodes[gi.From].timed
	}
	e.nodes = append(e.nodes, n)
	return len(e.nodes) - 1
}

// isNil reports whether v is nil, or a nil func or pointer in an interface.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Func, reflect.Pointer:
		return rv.IsNil()
	}
	return false
}

// Metrics are live counts of one operator.
type Metrics struct {
	UID string
	// Records entering the operator (chained after another in a task or
	// not), or leaving it when it is a source. Counts of a chained
	// operator are added once per batch, and after timers, watermarks and
	// the end of input: they lag by at most the batch being handled.
	Records int64
	// Remaining and Total measure a bounded source's input (in its unit:
	// bytes for files) when its reader reports progress (ProgressReporter);
	// Total is 0 when that is not known.
	Remaining, Total int64
	// Late counts the records a window or join dropped for coming behind
	// the watermark (windows with LateTo send them on instead).
	Late int64
}

// Metrics reads every operator's counters; safe while the job runs. On a
// cluster's coordinator they are the sums of the workers' counters, as of
// their last heartbeats, over every worker process that ran the job.
func (e *Environment) Metrics() []Metrics {
	out := make([]Metrics, len(e.nodes))
	var workers map[string]cluster.OperatorCount
	if e.clusterOps != nil {
		workers = map[string]cluster.OperatorCount{}
		for _, c := range e.clusterOps.Sum() {
			workers[c.UID] = c
		}
	}
	for i, n := range e.nodes {
		w := workers[n.UID]
		out[i] = Metrics{UID: n.UID, Records: n.records.Load() + w.Records, Late: n.late.Load() + w.Late}
		if len(n.remaining) == 0 {
			continue
		}
		out[i].Total = n.total.Load()
		for j := range n.remaining {
			r := n.remaining[j].Load()
			if r < 0 {
				out[i].Remaining, out[i].Total = 0, 0
				break
			}
			out[i].Remaining += r
		}
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
	read := map[graph.Input]bool{} // the outputs some node reads, partition aside
	for i, n := range e.nodes {
		g.Nodes[i].Inputs = n.Node.Inputs
		for _, in := range n.Node.Inputs {
			read[graph.Input{From: in.From, Port: in.Port}] = true
		}
	}
	for i, n := range e.nodes {
		for port := range n.sides {
			if !read[graph.Input{From: i, Port: port}] {
				return nil, fmt.Errorf("operator %q: the stream of its late records (weir.LateTo) has no consumer: read it (weir.Sink, weir.Map, ...), or drop weir.LateTo to drop late records and count them (Metrics.Late)", n.UID)
			}
		}
	}
	return graph.NewPlan(g)
}

// Execute validates the configuration and the graph, checks where the job
// starts (see Config.Restore), then runs the job until its input ends, it
// fails beyond its restart strategy, or ctx ends. An error that ends it
// after ctx ended wraps both ctx's cause and the last failure.
func (e *Environment) Execute(ctx context.Context) (res Result, err error) {
	plan, err := e.Plan()
	if err != nil {
		return Result{}, fmt.Errorf("job %s: %w", e.cfg.Job, err)
	}
	spec, err := e.spec(plan)
	if err != nil {
		return Result{}, fmt.Errorf("job %s: %w", e.cfg.Job, err)
	}
	if e.cfg.Web != "" && e.cfg.Cluster.Role != Worker {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		srv, stop, werr := e.serveWeb(&spec, cancel)
		if werr != nil {
			return Result{}, fmt.Errorf("job %s: %w", e.cfg.Job, werr)
		}
		defer func() { e.endWeb(srv, stop, res, err) }() // NB: the results Execute returns
	}
	if e.cfg.Cluster.Role != Local {
		return e.executeClustered(ctx, plan, spec)
	}
	if e.cfg.Cluster.HA != "" {
		host, _ := os.Hostname()
		return e.lead(ctx, spec, fmt.Sprintf("pid %d on %s", os.Getpid(), host), func(ctx context.Context, spec runtime.Spec, _ uint64) (Result, error) {
			return runtime.Run(ctx, spec)
		})
	}
	return runtime.Run(ctx, spec)
}

func (e *Environment) spec(plan *graph.Plan) (runtime.Spec, error) {
	cc := e.cfg.Checkpoint
	spec := runtime.Spec{
		Name: e.cfg.Job, Plan: plan, Build: e.build(plan), Mode: cc.Mode, Restart: e.cfg.Restart,
		BatchSize: e.cfg.BatchSize, BufferDebloat: e.cfg.BufferDebloat, WatermarkInterval: e.cfg.WatermarkInterval, Logger: e.cfg.Logger, OnEvent: e.cfg.OnEvent,
		Checkpoint: checkpoint.Config{
			Interval: cc.Interval, MinPause: cc.MinPause, Timeout: cc.Timeout, MaxConcurrent: cc.MaxConcurrent,
			TolerableFailures: cc.TolerableFailures, Retained: cc.Retained, RetainOnCancel: !cc.DiscardOnCancel,
			Unaligned: cc.Alignment == Unaligned, AlignedTimeout: cc.AlignedTimeout, AtLeastOnce: cc.Mode == AtLeastOnce,
		},
		Codec: e.wireCodec(plan), ChainCodec: e.chainCodec,
		Start: runtime.Start{Fresh: e.cfg.Fresh, Latest: e.cfg.Restore == "latest", AllowNonRestoredState: e.cfg.AllowNonRestoredState},
	}
	if err := e.cfg.Cluster.validate(e.cfg); err != nil {
		return spec, err
	}
	if e.cfg.BatchSize < 0 {
		return spec, fmt.Errorf("batch size %d is negative", e.cfg.BatchSize)
	}
	if err := e.cfg.StateBackend.Validate(); err != nil {
		return spec, err
	}
	if e.cfg.Cluster.Role != Coordinator {
		if err := e.cfg.StateBackend.CheckDir(); err != nil {
			return spec, err
		}
	}
	if err := e.openLocal(&spec); err != nil {
		return spec, err
	}
	if e.cfg.BufferDebloat < 0 {
		return spec, fmt.Errorf("buffer debloat target %v is negative: use 0 to turn debloating off, or a target such as 1s", e.cfg.BufferDebloat)
	}
	if e.cfg.WebLinger < 0 {
		return spec, fmt.Errorf("web linger %v is negative: use 0 to stop the web server with the job", e.cfg.WebLinger)
	}
	if e.cfg.WatermarkInterval < 0 {
		return spec, fmt.Errorf("watermark interval %v is negative", e.cfg.WatermarkInterval)
	}
	if cc.Mode != NoCheckpoints {
		if cc.Interval < 0 {
			return spec, fmt.Errorf("checkpoint interval is %v in mode %v: set an interval (for example 10s) or use mode none", cc.Interval, cc.Mode)
		}
		if _, err := spec.Checkpoint.Normalize(); err != nil {
			return spec, err
		}
		if cc.Timeout > 0 && cc.Timeout < MinCheckpointTimeout {
			return spec, fmt.Errorf("checkpoint timeout %v is below %v: every checkpoint would expire before its barriers cross the job, and the job would fail over and over; use %v or more (0: the default, 5m)", cc.Timeout, MinCheckpointTimeout, MinCheckpointTimeout)
		}
		if cc.Mode != ExactlyOnce && (cc.Alignment == Unaligned || cc.AlignedTimeout != 0) {
			return spec, fmt.Errorf("unaligned checkpoints and the aligned checkpoint timeout are settings of mode exactly-once, not %v: use mode exactly-once, or drop them", cc.Mode)
		}
	}
	if err := e.checkWire(plan); err != nil {
		return spec, err
	}
	if e.cfg.Fresh && e.cfg.Restore != "" {
		return spec, fmt.Errorf("restore %q and fresh exclude each other: restore a checkpoint, or start over", e.cfg.Restore)
	}
	if cc.Dir == "" {
		if e.cfg.Restore == "latest" {
			return spec, errors.New("restore latest needs a checkpoint directory: memory checkpoints do not outlive the process")
		}
		if cc.Mode != NoCheckpoints {
			spec.Storage = storage.NewMemory(0)
		}
	} else {
		st, err := openStorage(cc, e.cfg.Job, e.cfg.Logger)
		if err != nil {
			return spec, err
		}
		spec.Storage = st
	}
	if r := e.cfg.Restore; r != "" && r != "latest" {
		var m *checkpoint.Metadata
		var reader storage.Storage
		var err error
		if storage.IsURL(r) {
			m, reader, err = storage.OpenCheckpointURL(context.Background(), r)
		} else {
			m, reader, err = storage.OpenCheckpoint(cc.FS, strings.TrimPrefix(r, "file://"))
		}
		if err != nil {
			return spec, fmt.Errorf("restore: %w", err)
		}
		spec.Start.Point = &runtime.RestorePoint{Metadata: m, Read: reader.ReadState, Open: reader.OpenState, Where: r,
			Elsewhere: spec.Storage == nil || !storage.SamePlace(reader, spec.Storage)}
	}
	return spec, nil
}

// openLocal opens the local copies of local recovery in a process that
// runs tasks.
func (e *Environment) openLocal(spec *runtime.Spec) error {
	switch {
	case !e.cfg.LocalRecovery && e.cfg.LocalRecoveryDir != "":
		return fmt.Errorf("local recovery directory %q is set, and local recovery is off: turn it on (--local-recovery), or drop the directory", e.cfg.LocalRecoveryDir)
	case !e.cfg.LocalRecovery || e.cfg.Cluster.Role == Coordinator:
		return nil
	case e.cfg.Checkpoint.Mode == NoCheckpoints:
		return errors.New("local recovery keeps copies of checkpoints, and mode none takes none: use another mode, or turn local recovery off")
	}
	st, err := local.Open(cmp.Or(e.cfg.LocalRecoveryDir, defaultLocalDir(e.cfg.Checkpoint.Dir)))
	spec.Local = st
	return err
}

// defaultLocalDir is where local copies live without a LocalRecoveryDir:
// <temp dir>/weir-local-recovery/<a hash of the checkpoint location>, so
// that two runs of a job with other checkpoint storage (which may run at
// once) do not take each other's copies for their own and sweep them,
// while a restart with the same storage finds its copies (and so do the
// workers of a cluster on one machine).
func defaultLocalDir(checkpoints string) string {
	where := checkpoints
	if !storage.IsURL(where) || strings.HasPrefix(where, "file://") {
		if abs, err := filepath.Abs(strings.TrimPrefix(where, "file://")); err == nil {
			where = abs
		}
	}
	return filepath.Join(os.TempDir(), "weir-local-recovery", fmt.Sprintf("%016x", xxhash.Sum64String(where)))
}

// openStorage opens the checkpoint storage cc.Dir names: a directory (a
// path, or file://path), or object storage (s3://bucket/prefix, mem://).
func openStorage(cc CheckpointConfig, job string, log *slog.Logger) (storage.Storage, error) {
	if storage.IsURL(cc.Dir) {
		b, err := storage.OpenBlob(context.Background(), cc.Dir, job)
		if err != nil {
			return nil, err
		}
		b.SetLogger(log)
		return b, nil
	}
	dir := strings.TrimPrefix(cc.Dir, "file://")
	if filepath.Base(filepath.Clean(dir)) == job {
		// The job's own directory, as `weir savepoint` and the log print
		// it: its checkpoints would be taken for none.
		names, _ := cc.FS.List(dir)
		if i := slices.IndexFunc(names, func(n string) bool { return strings.HasPrefix(n, "chk-") }); i >= 0 {
			return nil, fmt.Errorf("checkpoint directory %s is job %s's own directory (it holds %s): give the directory above it, --checkpoint-dir %s (Config.Checkpoint.Dir)", dir, job, names[i], filepath.Dir(filepath.Clean(dir)))
		}
	}
	return storage.NewDir(cc.FS, dir, job, 0)
}

// build returns the runtime's builder of one subtask: the chain of the
// vertex's operators, tail first, each wired to the next.
func (e *Environment) build(plan *graph.Plan) func(*runtime.TaskBuild) (*runtime.TaskParts, error) {
	return func(b *runtime.TaskBuild) (*runtime.TaskParts, error) {
		vx := b.Vertex
		// A chain, its operators and its emitters are written for every record
		// and built one subtask after another: each gets cache lines of its own
		// (package cacheline).
		c := cacheline.New(chain{subtask: b.Subtask, now: operator.MinTime, group: -1, state: e.cfg.StateBackend, stats: b.Stats, verify: e.verify})
		tail := e.nodes[vx.Nodes[len(vx.Nodes)-1]]
		var next any
		var outputs []runtime.Output
		if len(vx.Outputs) > 0 {
			next, outputs = tail.emitter(e, b, plan, c, 0)
			for port, side := range tail.sides {
				coll, outs := side(e, b, plan, c, port)
				if c.sides == nil {
					c.sides = map[int]any{}
				}
				c.sides[port] = coll
				outputs = append(outputs, outs...)
			}
		}
		ops := make([]operator.Operator, len(vx.Nodes))
		// Every operator after the head counts the records entering it
		// (counts[i-1] is node i's).
		c.counted = make([]*node, len(vx.Nodes)-1)
		c.counts = cacheline.Slice[int64](len(vx.Nodes) - 1)
		// The nodes after the head can take batches too: channel state stored
		// while one was a task's head, replayed once a restore chains it.
		chained := make([]any, len(vx.Nodes))
		for i := len(vx.Nodes) - 1; i >= 0; i-- {
			var op operator.Operator
			n := e.nodes[vx.Nodes[i]]
			op, next = n.instance(c, next)
			ops[i] = op
			if i > 0 {
				chained[i] = n.head(op, next, c)
				c.counted[i-1] = n
				next = e.nodes[vx.Nodes[i-1]].counting(next, &c.counts[i-1])
			}
		}
		if len(c.counted) > 0 {
			outputs = append(outputs, publisher{c})
		}
		head := e.nodes[vx.Nodes[0]].head(ops[0], next, c)
		return &runtime.TaskParts{Ops: ops, Head: head, Outputs: outputs, Chained: chained}, nil
	}
}
