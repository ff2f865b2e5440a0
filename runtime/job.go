package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/checkpoint/barrier"
	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/storage"
)

// Mode is the checkpointing mode of a job.
type Mode int

const (
	// ExactlyOnce aligns barriers: state is exactly-once.
	ExactlyOnce Mode = iota + 1
	// AtLeastOnce does not align: after a restore, records may count twice.
	AtLeastOnce
	// None takes no checkpoints; a failure restarts from the beginning.
	None
)

func (m Mode) String() string {
	switch m {
	case ExactlyOnce:
		return "exactly-once"
	case AtLeastOnce:
		return "at-least-once"
	case None:
		return "none"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// ParseMode parses "exactly-once", "at-least-once" or "none".
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{ExactlyOnce, AtLeastOnce, None} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("checkpoint mode %q: want exactly-once, at-least-once or none", s)
}

// RestorePoint is a completed checkpoint to start from.
type RestorePoint struct {
	Metadata *checkpoint.Metadata
	// Read reads the state the metadata's handles point at.
	Read func(checkpoint.Handle) ([]byte, error)
}

// TaskBuild is what Spec.Build gets to build one subtask.
type TaskBuild struct {
	// Ctx ends when the attempt stops; emitters push with it.
	Ctx     context.Context
	Vertex  *graph.Vertex
	Subtask int
	// Outputs holds, per output edge of the vertex (Vertex.Outputs order),
	// the channels to the downstream subtasks it reaches: one for a forward
	// edge, else one per downstream subtask, by index.
	Outputs   [][]OutputChannel
	BatchSize int
}

// TaskParts is one built subtask.
type TaskParts struct {
	// Ops has one operator per node of the vertex, head first.
	Ops []operator.Operator
	// Head is Ops[0] as an operator.Source (source vertex) or operator.Input.
	Head any
	// Outputs are the tail's outputs, one per output edge.
	Outputs []Output
}

// Spec is a job for Run.
type Spec struct {
	Name  string
	Plan  *graph.Plan
	Build func(*TaskBuild) (*TaskParts, error)

	Mode       Mode
	Checkpoint checkpoint.Config
	Storage    storage.Storage // required unless Mode is None
	// Restore is the checkpoint to start from; nil starts afresh.
	Restore *RestorePoint
	Restart RestartStrategy

	ChannelCapacity int // events per channel; default 16
	BatchSize       int // records per batch; default 512
	SnapshotWorkers int // asynchronous snapshot writers; default 4

	Logger *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
	// OnEvent, if set, hears of checkpoints and restarts, from the driver
	// goroutine; it must not block.
	OnEvent func(JobEvent)
}

// EventKind is the kind of a JobEvent.
type EventKind int

const (
	EventRunning EventKind = iota + 1
	EventCheckpointCompleted
	EventCheckpointAborted
	EventRestarting
	EventFinished
)

// JobEvent tells of progress.
type JobEvent struct {
	Kind     EventKind
	Attempt  int
	ID       checkpoint.ID
	Reason   checkpoint.Reason
	Err      error
	Duration time.Duration // checkpoint: trigger to completion
	Size     int64         // checkpoint: bytes of state
	// RestoredFrom is the checkpoint an attempt started from (0: none).
	RestoredFrom checkpoint.ID
}

// Result summarises a finished job.
type Result struct {
	Attempts    int
	Checkpoints int
	// Durations of completed checkpoints, trigger to completion, the last
	// 10,000.
	Durations       []time.Duration
	MaxSyncSnapshot time.Duration
}

const maxDurations = 10_000

// ErrNoCheckpoint is returned by LatestRestorePoint when storage holds no
// completed checkpoint.
var ErrNoCheckpoint = errors.New("no completed checkpoint")

// Run runs the job until its input ends (bounded sources), it fails beyond
// its restart strategy, or ctx ends.
func Run(ctx context.Context, spec Spec) (Result, error) {
	d, err := newDriver(spec)
	if err != nil {
		return Result{}, err
	}
	return d.run(ctx)
}

type driver struct {
	spec      Spec
	log       *slog.Logger
	coord     *checkpoint.Coordinator
	tasks     checkpoint.Tasks
	point     *RestorePoint
	attempt   int
	failures  int
	triggered map[checkpoint.ID]time.Time
	res       Result
	metrics   []*TaskMetrics
}

func newDriver(spec Spec) (*driver, error) {
	if spec.Name == "" || spec.Plan == nil || spec.Build == nil {
		return nil, errors.New("runtime: a job needs a name, a plan and a builder")
	}
	if spec.Mode == 0 {
		spec.Mode = ExactlyOnce
	}
	if spec.Restart == nil {
		spec.Restart = NoRestart{}
	}
	if err := validateRestart(spec.Restart); err != nil {
		return nil, err
	}
	spec.ChannelCapacity = cmpOr(spec.ChannelCapacity, 16)
	spec.BatchSize = cmpOr(spec.BatchSize, 512)
	spec.SnapshotWorkers = cmpOr(spec.SnapshotWorkers, 4)
	if spec.Logger == nil {
		spec.Logger = slog.New(slog.DiscardHandler)
	}
	if spec.Now == nil {
		spec.Now = time.Now
	}
	d := &driver{spec: spec, log: spec.Logger, tasks: spec.Plan.Tasks(), point: spec.Restore, triggered: map[checkpoint.ID]time.Time{}}
	if spec.Mode == None {
		return d, nil
	}
	if spec.Storage == nil {
		return nil, errors.New("runtime: checkpointing needs checkpoint storage")
	}
	scan, err := spec.Storage.Scan()
	if err != nil {
		return nil, err
	}
	// Checkpoints reserved but never committed were left by a run that was
	// killed or failed; they can never complete.
	for _, id := range scan.Incomplete {
		if err := spec.Storage.Discard(id); err != nil {
			return nil, fmt.Errorf("clean up incomplete checkpoint %d: %w", id, err)
		}
		d.log.Info("deleted an incomplete checkpoint a previous run left", "job", spec.Name, "checkpoint", id)
	}
	for _, dmg := range scan.Damaged {
		d.log.Warn("skipping damaged checkpoint", "path", dmg.Path, "err", dmg.Err)
	}
	restored := scan.Restored()
	if spec.Restore != nil {
		restored.MaxID = max(restored.MaxID, spec.Restore.Metadata.ID)
	}
	d.coord, err = checkpoint.New(spec.Name, spec.Checkpoint, d.tasks, restored)
	if err != nil {
		return nil, err
	}
	return d, nil
}

func cmpOr(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

func (d *driver) emit(e JobEvent) {
	e.Attempt = d.attempt
	if d.spec.OnEvent != nil {
		d.spec.OnEvent(e)
	}
}

func (d *driver) run(ctx context.Context) (Result, error) {
	for {
		d.attempt++
		err := d.runAttempt(ctx)
		if err == nil {
			d.res.Attempts = d.attempt
			for _, m := range d.metrics {
				d.res.MaxSyncSnapshot = max(d.res.MaxSyncSnapshot, m.MaxSyncSnapshot())
			}
			d.emit(JobEvent{Kind: EventFinished})
			return d.res, nil
		}
		if ctx.Err() != nil {
			return d.res, err
		}
		d.failures++
		delay, ok := d.spec.Restart.Next(d.failures)
		if !ok {
			return d.res, fmt.Errorf("job %s failed (%s): %w", d.spec.Name, d.spec.Restart, err)
		}
		if err := d.choosePoint(); err != nil {
			return d.res, err
		}
		d.emit(JobEvent{Kind: EventRestarting, Err: err, Duration: delay, RestoredFrom: d.pointID()})
		d.log.Warn("job failed; restarting", "job", d.spec.Name, "attempt", d.attempt, "delay", delay, "from-checkpoint", d.pointID(), "err", err)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return d.res, context.Cause(ctx)
		}
	}
}

func (d *driver) pointID() checkpoint.ID {
	if d.point == nil {
		return 0
	}
	return d.point.Metadata.ID
}

// choosePoint picks the latest completed checkpoint in storage to restore.
func (d *driver) choosePoint() error {
	if d.spec.Mode == None {
		d.point = nil
		return nil
	}
	p, err := LatestRestorePoint(d.spec.Storage)
	switch {
	case errors.Is(err, ErrNoCheckpoint):
		// Keep the restore point the job was started with, if any.
		return nil
	case err != nil:
		return err
	}
	d.point = p
	return nil
}

// LatestRestorePoint is the latest completed checkpoint in s.
func LatestRestorePoint(s storage.Storage) (*RestorePoint, error) {
	scan, err := s.Scan()
	if err != nil {
		return nil, err
	}
	m := scan.Latest()
	if m == nil {
		return nil, ErrNoCheckpoint
	}
	return &RestorePoint{Metadata: m, Read: s.ReadState}, nil
}

// attempt is one deployment of every task. Its reports channel is its own,
// so nothing an earlier attempt sends reaches a later one.
type attempt struct {
	tasks   []*task
	byID    map[checkpoint.TaskID]*task
	reports chan report
	wg      sync.WaitGroup
	pool    *pool
}

func (d *driver) runAttempt(parent context.Context) error {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(ErrStopped)
	a, err := d.deploy(ctx)
	if err != nil {
		return err
	}
	for _, t := range a.tasks {
		a.wg.Go(func() {
			if err := t.run(ctx); err != nil && !errors.Is(err, ErrStopped) && parent.Err() == nil {
				t.send(ctx, report{kind: repFailed, err: err})
			}
		})
	}
	stop := func() {
		cancel(ErrStopped)
		a.wg.Wait()
		a.pool.wait()
	}
	now := d.spec.Now()
	if d.coord != nil {
		d.coord.Start(now)
	}
	d.emit(JobEvent{Kind: EventRunning, RestoredFrom: d.pointID()})
	tick := time.NewTicker(d.tickInterval())
	defer tick.Stop()
	finished := 0
	for {
		var failure error
		select {
		case <-tick.C:
			if d.coord != nil {
				d.coord.Tick(d.spec.Now())
			}
		case r := <-a.reports:
			switch r.kind {
			case repAck:
				d.coord.Acknowledge(r.task, r.id, r.handles)
			case repDecline:
				d.coord.Decline(r.task, r.id, r.err)
			case repExhausted:
				d.coord.InputExhausted(d.spec.Now(), r.task)
			case repFinished:
				finished++
				if d.coord != nil {
					d.coord.TaskFinished(r.task)
				}
			case repFailed:
				failure = r.err
				if d.coord != nil {
					d.coord.TaskFailed(r.task, r.err)
				}
			}
		case <-parent.Done():
			if d.coord != nil {
				d.coord.Cancel()
				d.carryOut(ctx, a)
			}
			stop()
			return context.Cause(parent)
		}
		if d.coord != nil {
			if err := d.carryOut(ctx, a); err != nil && failure == nil {
				failure = err
			}
		}
		if failure != nil {
			// The coordinator already stopped: TaskFailed or FailJob.
			stop()
			return failure
		}
		if finished == len(a.tasks) {
			stop()
			return nil
		}
	}
}

func (d *driver) tickInterval() time.Duration {
	iv := d.spec.Checkpoint.Interval
	if iv <= 0 {
		return 50 * time.Millisecond
	}
	return min(max(iv/10, time.Millisecond), 100*time.Millisecond)
}

// carryOut executes the coordinator's decisions until it has none; a
// FailJob decision is returned as the failure.
func (d *driver) carryOut(ctx context.Context, a *attempt) error {
	var failure error
	for {
		acts := d.coord.Ready()
		if len(acts) == 0 {
			return failure
		}
		for _, act := range acts {
			switch act := act.(type) {
			case checkpoint.Trigger:
				d.triggered[act.ID] = d.spec.Now()
				if err := d.spec.Storage.Reserve(act.ID); err != nil {
					d.coord.Decline(d.tasks.Sources[0], act.ID, err)
					continue
				}
				for _, s := range d.tasks.Sources {
					d.send(ctx, a.byID[s], ctrl{kind: ctrlTrigger, id: act.ID})
				}
			case checkpoint.Persist:
				err := d.spec.Storage.Commit(act.Metadata)
				if err == nil {
					d.res.Checkpoints++
					dur := d.spec.Now().Sub(d.triggered[act.Metadata.ID])
					if len(d.res.Durations) == maxDurations {
						d.res.Durations = d.res.Durations[1:]
					}
					d.res.Durations = append(d.res.Durations, dur)
					d.emit(JobEvent{Kind: EventCheckpointCompleted, ID: act.Metadata.ID, Duration: dur, Size: act.Metadata.SizeBytes()})
				}
				d.coord.Persisted(d.spec.Now(), act.Metadata.ID, err)
			case checkpoint.NotifyComplete:
				delete(d.triggered, act.ID)
				d.failures = 0 // progress: restart attempts count afresh
				for _, t := range a.tasks {
					d.send(ctx, t, ctrl{kind: ctrlComplete, id: act.ID, endOfInput: act.EndOfInput})
				}
			case checkpoint.Abort:
				delete(d.triggered, act.ID)
				d.emit(JobEvent{Kind: EventCheckpointAborted, ID: act.ID, Reason: act.Reason, Err: act.Cause})
				if act.Reason.Counts() {
					d.log.Warn("checkpoint aborted", "job", d.spec.Name, "checkpoint", act.ID, "reason", act.Reason, "err", act.Cause)
				}
				for _, t := range a.tasks {
					d.send(ctx, t, ctrl{kind: ctrlAbort, id: act.ID})
				}
				if err := d.spec.Storage.Discard(act.ID); err != nil {
					d.log.Warn("could not delete an aborted checkpoint's files", "checkpoint", act.ID, "err", err)
				}
			case checkpoint.Discard:
				if err := d.spec.Storage.Discard(act.ID); err != nil {
					d.log.Warn("could not discard a checkpoint", "checkpoint", act.ID, "err", err)
				}
			case checkpoint.DiscardState:
				if err := d.spec.Storage.DiscardState(act.Handles); err != nil {
					d.log.Warn("could not delete late state", "checkpoint", act.ID, "err", err)
				}
			case checkpoint.FailJob:
				failure = act.Cause
			}
		}
	}
}

func (d *driver) send(ctx context.Context, t *task, m ctrl) {
	if t == nil {
		return
	}
	select {
	case t.mailbox <- m:
	case <-ctx.Done():
	}
}

// deploy builds every task of the plan with fresh channels, restoring from
// d.point.
func (d *driver) deploy(ctx context.Context) (*attempt, error) {
	plan := d.spec.Plan
	a := &attempt{byID: map[checkpoint.TaskID]*task{}, pool: newPool(d.spec.SnapshotWorkers)}
	a.reports = make(chan report, 64*len(d.tasks.All)+64)
	// Gates first, then channels from each upstream subtask.
	gates := make([][]*Gate, len(plan.Vertices))
	inputOf := make([][][]int, len(plan.Vertices))
	for v, vx := range plan.Vertices {
		gates[v] = make([]*Gate, vx.Parallelism)
		inputOf[v] = make([][]int, vx.Parallelism)
		for s := range gates[v] {
			gates[v][s] = NewGate()
		}
	}
	// outs[v][s][k] are the channels of output edge k of subtask s of v.
	outs := make([][][][]OutputChannel, len(plan.Vertices))
	for v, vx := range plan.Vertices {
		outs[v] = make([][][]OutputChannel, vx.Parallelism)
		for s := range outs[v] {
			outs[v][s] = make([][]OutputChannel, len(vx.Outputs))
		}
	}
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
					g := gates[v][j]
					ch := NewLocalChannel(d.spec.ChannelCapacity, g.Ready())
					g.Add(ch)
					inputOf[v][j] = append(inputOf[v][j], e.Input)
					if e.Partition == graph.Forward {
						outs[e.From][i][k] = []OutputChannel{ch}
					} else {
						if outs[e.From][i][k] == nil {
							outs[e.From][i][k] = make([]OutputChannel, vx.Parallelism)
						}
						outs[e.From][i][k][j] = ch
					}
				}
			}
		}
	}
	mode := barrier.AtLeastOnce
	if d.spec.Mode == ExactlyOnce {
		mode = barrier.ExactlyOnce
	}
	d.metrics = d.metrics[:0]
	for v := range plan.Vertices {
		vx := &plan.Vertices[v]
		for s := range vx.Parallelism {
			parts, err := d.spec.Build(&TaskBuild{Ctx: ctx, Vertex: vx, Subtask: s, Outputs: outs[v][s], BatchSize: d.spec.BatchSize})
			if err != nil {
				return nil, fmt.Errorf("build %s subtask %d: %w", vx.ID, s, err)
			}
			t := &task{
				id:  checkpoint.TaskID{Vertex: vx.ID, Subtask: s},
				ops: parts.Ops, outputs: parts.Outputs, mailbox: make(chan ctrl, 1024),
				reports: a.reports, pool: a.pool, store: d.spec.Storage,
				checkpointing: d.spec.Mode != None, now: d.spec.Now, metrics: &TaskMetrics{},
			}
			d.metrics = append(d.metrics, t.metrics)
			for _, node := range vx.Nodes {
				t.contexts = append(t.contexts, d.operatorContext(plan.Graph.Nodes[node], s))
			}
			switch h := parts.Head.(type) {
			case operator.Source:
				t.source = h
			case operator.Input:
				t.input, t.gate, t.inputOf = h, gates[v][s], inputOf[v][s]
				t.aligner = barrier.New(mode, t.gate.Len())
			default:
				return nil, fmt.Errorf("build %s: head is neither a source nor an input", vx.ID)
			}
			a.tasks = append(a.tasks, t)
			a.byID[t.id] = t
		}
	}
	return a, nil
}

func (d *driver) operatorContext(n graph.Node, subtask int) *operator.Context {
	c := &operator.Context{
		Job: d.spec.Name, UID: n.UID, Subtask: subtask, Parallelism: n.Parallelism,
		MaxParallelism: n.MaxParallelism, KeyGroups: keygroup.ForSubtask(n.MaxParallelism, n.Parallelism, subtask),
		CheckpointingEnabled: d.spec.Mode != None, Logger: d.log.With("operator", n.UID, "subtask", subtask), Now: d.spec.Now,
	}
	if d.point != nil {
		r := &operator.Restore{Checkpoint: d.point.Metadata.ID, Read: d.point.Read}
		for _, ts := range d.point.Metadata.Tasks {
			for _, h := range ts.Handles {
				if h.Operator == n.UID {
					r.Handles = append(r.Handles, h)
				}
			}
		}
		c.Restore = r
	}
	return c
}
