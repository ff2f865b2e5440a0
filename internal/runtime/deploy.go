package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/checkpoint/barrier"
	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/internal/profiling"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state/local"
)

// Executor starts the tasks of an attempt: in this process (the default,
// Local), or on a cluster's workers.
type Executor interface {
	// Start deploys the attempt p describes. Its tasks send their reports
	// (failures too) to reports until the execution stops.
	Start(ctx context.Context, spec Spec, p Part, reports chan<- Report) (Execution, error)
}

// Execution is a started attempt.
type Execution interface {
	// Send delivers m to task id; the messages to one task arrive in the
	// order sent. It gives up when ctx ends.
	Send(ctx context.Context, id checkpoint.TaskID, m Control)
	// Stop stops the attempt's tasks and returns when they have stopped.
	Stop()
}

// Part is what one process runs of an attempt.
type Part struct {
	// RunID and Attempt name the run and its attempt
	// (operator.Context.RunID, Attempt).
	RunID   string
	Attempt int
	// Point is the checkpoint the attempt restores; nil: none.
	Point *RestorePoint
	// StartOver: operators that restore no state start over
	// (operator.Context.StartOver).
	StartOver bool
	// Here reports whether this process runs task id; nil: every task.
	Here func(id checkpoint.TaskID) bool
	// Remote opens the channels between a task here and one elsewhere;
	// required when Here is set.
	Remote Remote
	// Acquire holds run-wide resources (operator.Context.Acquire).
	Acquire func(key string, open func() (io.Closer, error)) error
}

// Remote opens this process's end of a channel whose other end is in
// another process. Every process numbers the plan's channels alike.
type Remote interface {
	Output(ch uint64, e graph.Edge, to checkpoint.TaskID) (OutputChannel, error)
	Input(ch uint64, e graph.Edge, from checkpoint.TaskID, capacity int, ready chan<- struct{}) (InputChannel, error)
}

// Local is the Executor that runs every task in this process.
type Local struct{}

func (Local) Start(ctx context.Context, spec Spec, p Part, reports chan<- Report) (Execution, error) {
	return StartTasks(ctx, spec, p, reports)
}

// Tasks are the running tasks of one Part; an Execution.
type Tasks struct {
	tasks  []*task
	byID   map[checkpoint.TaskID]*task
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	pool   *pool
}

// StartTasks builds the tasks of p, restoring p.Point, and runs each in
// its goroutine until it ends, fails (reported as ReportFailed) or Stop.
func StartTasks(parent context.Context, spec Spec, p Part, reports chan<- Report) (*Tasks, error) {
	spec = spec.WithDefaults()
	ctx, cancel := context.WithCancelCause(parent)
	ts := &Tasks{byID: map[checkpoint.TaskID]*task{}, cancel: cancel, pool: newPool(spec.SnapshotWorkers)}
	if err := ts.build(ctx, spec, p, reports); err != nil {
		cancel(ErrStopped)
		return nil, err
	}
	for _, t := range ts.tasks {
		ts.wg.Go(func() {
			// The task's goroutine and those it starts carry its vertex
			// and subtask: a CPU profile of the process splits by them
			// (internal/profiling). Set once here, never per record.
			var err error
			pprof.Do(ctx, pprof.Labels(profiling.LabelVertex, t.id.Vertex, profiling.LabelSubtask, strconv.Itoa(t.id.Subtask)), func(ctx context.Context) {
				err = t.run(ctx)
			})
			failed := err != nil && !errors.Is(err, ErrStopped) && parent.Err() == nil
			switch {
			case err == nil:
				t.stats.end(StateFinished, spec.Now())
			case failed:
				t.stats.end(StateFailed, spec.Now())
			default:
				t.stats.end(StateCancelled, spec.Now())
			}
			if failed {
				t.send(ctx, Report{Kind: ReportFailed, Err: err})
			}
		})
	}
	return ts, nil
}

// Len is how many tasks there are.
func (ts *Tasks) Len() int { return len(ts.tasks) }

// Send delivers m to task id, if it is one of these.
func (ts *Tasks) Send(ctx context.Context, id checkpoint.TaskID, m Control) {
	t := ts.byID[id]
	if t == nil {
		return
	}
	select {
	case t.mailbox <- m:
	case <-ctx.Done():
	}
}

// Stop cancels the tasks and waits for them and their snapshot writers.
func (ts *Tasks) Stop() {
	ts.cancel(ErrStopped)
	ts.wg.Wait()
	ts.pool.wait()
}

// build builds the part's tasks with fresh channels: local ones between
// two tasks here, remote ones to a task elsewhere.
func (ts *Tasks) build(ctx context.Context, spec Spec, p Part, reports chan<- Report) error {
	plan := spec.Plan
	here := p.Here
	if here == nil {
		here = func(checkpoint.TaskID) bool { return true }
	}
	id := func(v, s int) checkpoint.TaskID { return checkpoint.TaskID{Vertex: plan.Vertices[v].ID, Subtask: s} }
	gates := make([][]*Gate, len(plan.Vertices))
	inputOf := make([][][]int, len(plan.Vertices))
	channels := make([][][]channelInfo, len(plan.Vertices))
	// outs[v][s][k] are the channels of output edge k of subtask s of v.
	outs := make([][][][]OutputChannel, len(plan.Vertices))
	// The channels that cross to another process, by task: their bytes
	// are the task's (TaskStats).
	netIn, netOut := map[checkpoint.TaskID][]ByteCounter{}, map[checkpoint.TaskID][]ByteCounter{}
	for v, vx := range plan.Vertices {
		gates[v] = make([]*Gate, vx.Parallelism)
		inputOf[v] = make([][]int, vx.Parallelism)
		channels[v] = make([][]channelInfo, vx.Parallelism)
		outs[v] = make([][][]OutputChannel, vx.Parallelism)
		for s := range vx.Parallelism {
			gates[v][s] = NewGate()
			outs[v][s] = make([][]OutputChannel, len(vx.Outputs))
		}
	}
	// A gate adds its channels in the order of plan.InputChannels. Every
	// channel of the plan gets the next number, here as in every
	// other process, whether or not it touches this one.
	var ch uint64
	for v, vx := range plan.Vertices {
		for _, ei := range vx.Inputs {
			e := plan.Edges[ei]
			up := plan.Vertices[e.From]
			k := slices.Index(up.Outputs, ei)
			for j := range vx.Parallelism {
				for i := range up.Parallelism {
					if !plan.Connects(e, i, j) {
						continue
					}
					ch++
					from, to := id(e.From, i), id(v, j)
					sends, receives := here(from), here(to)
					var out OutputChannel
					switch {
					case sends && receives:
						g := gates[v][j]
						lc := NewLocalChannel(spec.ChannelCapacity, g.Ready())
						g.Add(lc)
						out = lc
					case receives:
						g := gates[v][j]
						in, err := p.Remote.Input(ch, e, from, spec.ChannelCapacity, g.Ready())
						if err != nil {
							return fmt.Errorf("channel %s → %s: %w", from, to, err)
						}
						g.Add(in)
						if bc, ok := in.(ByteCounter); ok {
							netIn[to] = append(netIn[to], bc)
						}
					case sends:
						var err error
						if out, err = p.Remote.Output(ch, e, to); err != nil {
							return fmt.Errorf("channel %s → %s: %w", from, to, err)
						}
						if bc, ok := out.(ByteCounter); ok {
							netOut[from] = append(netOut[from], bc)
						}
					}
					if receives {
						inputOf[v][j] = append(inputOf[v][j], e.Input)
						info := channelInfo{input: e.Input, partition: e.Partition, upstream: i}
						if spec.Codec != nil {
							info.codec = spec.Codec(e)
						}
						channels[v][j] = append(channels[v][j], info)
					}
					if !sends {
						continue
					}
					if e.Partition == graph.Forward {
						outs[e.From][i][k] = []OutputChannel{out}
					} else {
						if outs[e.From][i][k] == nil {
							outs[e.From][i][k] = make([]OutputChannel, vx.Parallelism)
						}
						outs[e.From][i][k][j] = out
					}
				}
			}
		}
	}
	cc := spec.Checkpoint
	mode, opts := barrier.AtLeastOnce, []barrier.Option(nil)
	switch {
	case spec.Mode != ExactlyOnce:
	case cc.Unaligned:
		mode = barrier.Unaligned
	case cc.AlignedTimeout > 0:
		mode, opts = barrier.ExactlyOnce, []barrier.Option{barrier.AlignedTimeout(cc.AlignedTimeout)}
	default:
		mode = barrier.ExactlyOnce
	}
	if spec.Local != nil && spec.Mode != None {
		shape := make(map[string]int, len(plan.Vertices))
		for _, vx := range plan.Vertices {
			shape[vx.ID] = vx.Parallelism
		}
		spec.Local.Deployed(spec.Name, shape)
	}
	for v := range plan.Vertices {
		vx := &plan.Vertices[v]
		for s := range vx.Parallelism {
			if !here(id(v, s)) {
				continue
			}
			stats := spec.Stats.start(id(v, s), p.Attempt, spec.Now(), netIn[id(v, s)], netOut[id(v, s)])
			parts, err := spec.Build(&TaskBuild{Ctx: ctx, Vertex: vx, Subtask: s, Outputs: outs[v][s], BatchSize: spec.BatchSize, Stats: stats,
				Elastic: mode == barrier.Unaligned || len(opts) > 0})
			if err != nil {
				return operator.Permanent(fmt.Errorf("build %s subtask %d: %w", vx.ID, s, err))
			}
			var lt *local.Task
			if spec.Local != nil && spec.Mode != None {
				lt = spec.Local.Task(spec.Name, vx.ID, s)
			}
			t := &task{
				id: id(v, s), local: lt,
				ops: parts.Ops, outputs: parts.Outputs, mailbox: make(chan Control, 1024),
				reports: reports, pool: ts.pool, store: spec.Storage,
				checkpointing: spec.Mode != None, now: spec.Now,
				wmInterval: spec.WatermarkInterval, stats: stats,
				overtakes: mode == barrier.Unaligned, alignedTO: len(opts) > 0, alignTimeout: cc.AlignedTimeout,
				triggered: map[checkpoint.ID]int64{},
			}
			for _, node := range vx.Nodes {
				t.contexts = append(t.contexts, operatorContext(spec, p, vx.ID, plan.Graph.Nodes[node], s, lt))
				t.sink = t.sink || plan.Graph.Nodes[node].Kind == graph.KindSink
			}
			switch h := parts.Head.(type) {
			case operator.Source:
				t.source = h
			case operator.Input:
				t.input, t.gate, t.inputOf = h, gates[v][s], inputOf[v][s]
				t.aligner = barrier.New(mode, t.gate.Len(), opts...)
				if spec.BufferDebloat > 0 && t.gate.Len() > 0 {
					t.debloat = &debloat{Debloater: NewDebloater(spec.BufferDebloat, spec.ChannelCapacity)}
				}
				t.ended = make([]bool, t.gate.Len())
				t.channels, t.persisting = channels[v][s], make([][]checkpoint.ID, t.gate.Len())
			default:
				return fmt.Errorf("build %s: head is neither a source nor an input", vx.ID)
			}
			if t.restores, err = channelRestoresOf(spec, p, vx, s, parts); err != nil {
				return err
			}
			ts.tasks = append(ts.tasks, t)
			ts.byID[t.id] = t
		}
	}
	return nil
}

func operatorContext(spec Spec, p Part, vertex string, n graph.Node, subtask int, lt *local.Task) *operator.Context {
	c := &operator.Context{
		Job: spec.Name, UID: n.UID, Subtask: subtask, Parallelism: n.Parallelism,
		MaxParallelism: n.MaxParallelism, KeyGroups: keygroup.ForSubtask(n.MaxParallelism, n.Parallelism, subtask),
		CheckpointingEnabled: spec.Mode != None, Logger: spec.Logger.With("job", spec.Name, "vertex", vertex, "operator", n.UID, "subtask", subtask, "attempt", p.Attempt), Now: spec.Now,
		RunID: p.RunID, Attempt: p.Attempt, Lineage: lineage(p.RunID, p.Point), Acquire: p.Acquire,
	}
	if spec.Mode != None {
		cc, _ := spec.Checkpoint.Normalize() // validated by the driver
		c.CommitWait = operator.CommitWait{Interval: cc.Interval, MinPause: cc.MinPause, Timeout: cc.Timeout, TolerableFailures: cc.TolerableFailures, RestartDelay: spec.Restart.MaxDelay()}
	}
	if p.Point != nil {
		c.Resumed = p.Point.Metadata.ID
		r := &operator.Restore{Checkpoint: p.Point.Metadata.ID, Read: p.Point.Read, Open: p.Point.Open, Owned: p.Point.Owned}
		if lt != nil {
			r.Read, r.Open = lt.Reads(r.Read, r.Open)
		}
		for _, ts := range p.Point.Metadata.Tasks {
			for _, h := range ts.Handles {
				if h.Operator == n.UID && h.Kind != KindChannelState {
					r.Handles = append(r.Handles, h)
				}
			}
		}
		if len(r.Handles) > 0 {
			c.Restore = r
		}
	}
	c.StartOver = c.Restore == nil && p.StartOver
	return c
}

// channelRestoresOf returns the channel state subtask s of vx replays at
// start, in order, none if the restored checkpoint has none for its nodes.
// Channel state is stored for a task's head; a node that a restore chains
// to the one before it (its parallelism changed to its upstream's) replays
// the state stored for it into itself, through parts.Chained. Its records
// were in flight to it, behind whatever its upstream emits from its own
// channel state: so the chain replays tail first.
func channelRestoresOf(spec Spec, p Part, vx *graph.Vertex, s int, parts *TaskParts) ([]*channelRestore, error) {
	if p.Point == nil {
		return nil, nil
	}
	var out []*channelRestore
	for i := len(vx.Nodes) - 1; i >= 0; i-- {
		n := spec.Plan.Graph.Nodes[vx.Nodes[i]]
		hs := channelStateOf(p.Point.Metadata, n.UID)
		if len(hs) == 0 {
			continue
		}
		if spec.Codec == nil || spec.ChainCodec == nil {
			return nil, fmt.Errorf("restore %s: checkpoint %d holds channel state, and the job gave no codec to read it", vx.ID, p.Point.Metadata.ID)
		}
		r := &channelRestore{read: p.Point.Read, subtask: s, parallelism: vx.Parallelism,
			keyGroups: keygroup.ForSubtask(n.MaxParallelism, vx.Parallelism, s),
			handles:   hs, codecs: map[int]BatchCodec{}}
		if i == 0 {
			in, ok := parts.Head.(operator.Input)
			if !ok {
				return nil, fmt.Errorf("restore %s: checkpoint %d holds channel state of %s, which is now a source", vx.ID, p.Point.Metadata.ID, n.UID)
			}
			r.into = in
			for _, ei := range vx.Inputs {
				e := spec.Plan.Edges[ei]
				r.codecs[e.Input] = spec.Codec(e)
			}
		} else {
			var in operator.Input
			if i < len(parts.Chained) {
				in, _ = parts.Chained[i].(operator.Input)
			}
			if in == nil {
				return nil, fmt.Errorf("restore %s: checkpoint %d holds records in flight into %s, which this job chains to %s and cannot replay them into: restore at the parallelism the checkpoint was taken at, or from a savepoint (aligned)",
					vx.ID, p.Point.Metadata.ID, n.UID, spec.Plan.Graph.Nodes[vx.Nodes[i-1]].UID)
			}
			r.into = in
			r.codecs[0] = spec.ChainCodec(vx.Nodes[i-1])
		}
		out = append(out, r)
	}
	return out, nil
}

// channelStateOf returns the channel state handles of operator uid in m.
func channelStateOf(m *checkpoint.Metadata, uid string) []checkpoint.Handle {
	var hs []checkpoint.Handle
	for _, ts := range m.Tasks {
		for _, h := range ts.Handles {
			if h.Operator == uid && h.Kind == KindChannelState {
				hs = append(hs, h)
			}
		}
	}
	return hs
}

// ChannelStateReplays lists the tasks of plan that replay channel state
// when they restore m (every subtask of a vertex one of whose nodes has
// some), and report ReportReplayed when they have.
func ChannelStateReplays(plan *graph.Plan, m *checkpoint.Metadata) map[checkpoint.TaskID]bool {
	out := map[checkpoint.TaskID]bool{}
	for _, vx := range plan.Vertices {
		if !slices.ContainsFunc(vx.Nodes, func(n int) bool { return len(channelStateOf(m, plan.Graph.Nodes[n].UID)) > 0 }) {
			continue
		}
		for s := range vx.Parallelism {
			out[checkpoint.TaskID{Vertex: vx.ID, Subtask: s}] = true
		}
	}
	return out
}
