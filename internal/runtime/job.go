package runtime

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/local"
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
	// Owned: the job's checkpoint storage holds it and counts the
	// references to its shared files, and it is not a savepoint: restored
	// state may go on referencing them (state.Restored).
	Owned bool
	// Read reads the state the metadata's handles point at; Open streams
	// it.
	Read func(checkpoint.Handle) ([]byte, error)
	Open func(checkpoint.Handle) (io.ReadCloser, error)
	// Where names it for people (a path, or "memory").
	Where string
	// Elsewhere: it was read from another place than the job's storage (a
	// copy, or another job's directory), named by path. Damage there says
	// nothing of the job's own checkpoints: no fallback.
	Elsewhere bool
}

// Start says where a run starts. The zero value starts from the beginning,
// and refuses to when the job's checkpoint storage holds checkpoints of an
// earlier run.
type Start struct {
	// Point is a checkpoint the user named.
	Point *RestorePoint
	// Latest restores the newest completed checkpoint in the job's storage,
	// or starts from the beginning when it holds none; it refuses when the
	// only checkpoints there are damaged.
	Latest bool
	// Fresh starts over: the job's checkpoints are deleted, and sinks may
	// delete what earlier runs wrote (operator.Context.StartOver).
	Fresh bool
	// AllowNonRestoredState drops state that no operator of the job claims
	// instead of refusing the restore.
	AllowNonRestoredState bool
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
	// Stats are the subtask's counters (nil: not kept): its head counts
	// the records it takes, its emitters what they send.
	Stats *TaskStats
	// Elastic: the emitters never wait for room (Emitter.Elastic), as
	// unaligned checkpoints need.
	Elastic bool
}

// TaskParts is one built subtask.
type TaskParts struct {
	// Ops has one operator per node of the vertex, head first.
	Ops []operator.Operator
	// Head is Ops[0] as an operator.Source (source vertex) or operator.Input.
	Head any
	// Outputs are the tail's outputs, one per output edge.
	Outputs []Output
	// Chained has, for each node after the head, an operator.Input that
	// feeds a batch of its records into it (nil at 0, or when the job
	// builds none): channel state stored when the node was a task's head
	// is replayed there when a restore chains it (after a rescale).
	Chained []any
}

// Spec is a job for Run.
type Spec struct {
	Name string
	// RunID names this run of the job (operator.Context.RunID); Run draws
	// one at random when it is empty, which it should be but in tests.
	RunID string
	Plan  *graph.Plan
	Build func(*TaskBuild) (*TaskParts, error)

	Mode       Mode
	Checkpoint checkpoint.Config
	Storage    storage.Storage // required unless Mode is None
	Start      Start
	Restart    RestartStrategy
	// Executor runs the attempts' tasks; default Local, this process.
	Executor Executor
	// Codec encodes the batches of an edge: channel state (unaligned
	// checkpoints) is written with it. Required with Checkpoint.Unaligned
	// or AlignedTimeout.
	Codec func(graph.Edge) BatchCodec
	// ChainCodec is the codec of the records node n emits to the node
	// chained after it: what the channel state of that node holds when a
	// restore chains it. Required with Codec.
	ChainCodec func(n int) BatchCodec

	ChannelCapacity int // events per channel; default 16
	// BufferDebloat, when above 0, makes each task size its input
	// channels (at most ChannelCapacity events) so that what they hold
	// takes about this long to drain at its throughput (Debloater).
	BufferDebloat time.Duration
	BatchSize     int // records per batch; default 512
	// WatermarkInterval is the least time between two watermarks a source
	// (or an assigner) emits, as Flink's auto-watermark interval; default
	// 200ms.
	WatermarkInterval time.Duration
	SnapshotWorkers   int // asynchronous snapshot writers; default 4

	Logger *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
	// OnEvent, if set, hears of checkpoints and restarts, from the driver
	// goroutine; it must not block.
	OnEvent func(JobEvent)
	// Savepoints, if set, takes requests for a savepoint while the job
	// runs: each is answered with the savepoint's id, or why none was
	// triggered; its completion is an EventCheckpointCompleted with
	// Savepoint set.
	Savepoints <-chan SavepointRequest
	// Stats, if set, gets the counters of the subtasks this process runs.
	Stats *Stats
	// Local, if set, keeps a local copy of the snapshots of the subtasks
	// this process runs, and their restores read from it what the
	// restored checkpoint's checksums vouch for (local recovery).
	Local *local.Store
	// NoRunLocks: operators' run-wide locks (operator.Context.Acquire, a
	// file sink's lock on its directory) are not taken, because something
	// else makes the run the only one: a term of leadership in etcd, which
	// a paused leader loses while it would still hold a lock.
	NoRunLocks bool
}

// SavepointRequest asks for a savepoint. With Stop, the job stops with it:
// the sources emit nothing after its barrier, and once it completes every
// task commits it (NotifyComplete) and ends, and Run returns with
// Result.StoppedWith set. Should it abort, the sources go on and the job
// runs on.
type SavepointRequest struct {
	Stop bool
	// Reply hears the answer; it must have room for it.
	Reply chan<- SavepointReply
}

// SavepointReply answers a savepoint request.
type SavepointReply struct {
	ID  checkpoint.ID
	Err error
}

// EventKind is the kind of a JobEvent.
type EventKind int

const (
	EventRunning EventKind = iota + 1
	EventCheckpointCompleted
	EventCheckpointAborted
	EventRestarting
	// EventFinished: the job ended, its input done or, with ID set,
	// stopped with savepoint ID.
	EventFinished
)

func (k EventKind) String() string {
	switch k {
	case EventRunning:
		return "running"
	case EventCheckpointCompleted:
		return "checkpoint-completed"
	case EventCheckpointAborted:
		return "checkpoint-aborted"
	case EventRestarting:
		return "restarting"
	case EventFinished:
		return "finished"
	}
	return fmt.Sprintf("event(%d)", int(k))
}

// JobEvent tells of progress.
type JobEvent struct {
	Kind     EventKind
	Attempt  int
	ID       checkpoint.ID
	Reason   checkpoint.Reason
	Err      error
	Duration time.Duration // checkpoint: trigger to completion
	Size     int64         // checkpoint: bytes of state
	// Uploaded is the bytes of state a completed checkpoint wrote: its
	// Size less the shared files it reuses from the one before.
	Uploaded int64
	// SyncPart is a completed checkpoint's longest synchronous snapshot
	// part (the time a task stopped processing for it).
	SyncPart time.Duration
	// Slowest is the task that acknowledged a completed checkpoint last.
	Slowest checkpoint.TaskID
	// Savepoint: the checkpoint is a savepoint (kept until deleted by
	// hand).
	Savepoint bool
	// Tasks are a completed checkpoint's tasks' parts, in the order they
	// acknowledged.
	Tasks []TaskTrace
	// RestoredFrom is the checkpoint an attempt started from (0: none);
	// RestoredSavepoint says it is a savepoint, RestoredWhere where it
	// lives, RestoredParallelism the most subtasks a vertex had in it.
	RestoredFrom        checkpoint.ID
	RestoredSavepoint   bool
	RestoredWhere       string
	RestoredParallelism int
}

// TaskTrace is one task's part in a checkpoint: when it acknowledged
// (after the trigger), how long it aligned, its snapshot's synchronous and
// asynchronous parts, the bytes it wrote, and when each input channel's
// barrier arrived after the first (-1: not before the snapshot).
type TaskTrace struct {
	Task               checkpoint.TaskID
	Acked              time.Duration
	Align, Sync, Async time.Duration
	Bytes              int64
	Arrivals           []time.Duration
	// Unaligned: the task's snapshot was unaligned; Switched: it started
	// aligned and the aligned-checkpoint timeout switched it (after Align).
	// ChannelState is the bytes of channel state it stored (of Bytes).
	Unaligned, Switched bool
	ChannelState        int64
}

// Result summarises a finished job.
type Result struct {
	Attempts    int
	Checkpoints int
	// Durations of completed checkpoints, trigger to completion, the last
	// 10,000.
	Durations       []time.Duration
	MaxSyncSnapshot time.Duration
	// StoppedWith is the savepoint the job stopped with (a SavepointRequest
	// with Stop); 0 when its input ended.
	StoppedWith checkpoint.ID
}

const maxDurations = 10_000

// ErrEarlierRun matches Run's error (errors.Is) when the job would start
// from the beginning over checkpoints of an earlier run.
var ErrEarlierRun = errors.New("checkpoints of an earlier run are in the way")

// earlierRunError says why and what to do; it is ErrEarlierRun.
type earlierRunError struct{ msg string }

func (e earlierRunError) Error() string        { return e.msg }
func (e earlierRunError) Is(target error) bool { return target == ErrEarlierRun }

// ErrRolledBack matches Run's error (errors.Is) when the checkpoint to
// restore was rolled back: a start since restored an older checkpoint,
// and its sinks rolled back the output this one's builds on.
var ErrRolledBack = errors.New("a start since restored an older checkpoint, and rolled back the output this one's builds on")

// Run runs the job until its input ends (bounded sources), it fails beyond
// its restart strategy, or ctx ends.
func Run(ctx context.Context, spec Spec) (Result, error) {
	d, err := newDriver(spec)
	if err != nil {
		return Result{}, err
	}
	defer d.release()
	return d.run(ctx)
}

type driver struct {
	spec  Spec
	log   *slog.Logger
	coord *checkpoint.Coordinator
	tasks checkpoint.Tasks
	ops   []checkpoint.Operator
	// start is where the run started; point is where the next attempt
	// starts: start, or the newest checkpoint this run completed.
	start, point *RestorePoint
	// lineage is the run's (operator.Context.Lineage): a fallback to an
	// older checkpoint stays in it.
	lineage   string
	attempt   int
	failures  Failures
	triggered map[checkpoint.ID]time.Time
	// persisted holds the metadata of checkpoints written but not yet
	// announced complete; announced ones become point.
	persisted map[checkpoint.ID]*checkpoint.Metadata
	// unsure holds checkpoints whose commit failed and whose files could
	// not be deleted since: their metadata may be in storage, where they
	// look completed.
	unsure map[checkpoint.ID]bool
	// acks holds, per checkpoint in flight, its tasks' acknowledgements in
	// order; lastShared, the shared files of the newest completed
	// checkpoint.
	acks       map[checkpoint.ID][]TaskTrace
	lastShared map[string]bool
	res        Result
	resources  resources
	// stopWith is the savepoint the job is to stop with, if any.
	stopWith checkpoint.ID
	// told is the newest checkpoint whose completion this attempt's tasks
	// were sent; a trigger carries it (Control.Completed).
	told checkpoint.ID
	// lease is the storage's lock, if it can tell that another run took
	// it over (storage.Blob's lease).
	lease interface{ Held() error }
	// unpublished: acknowledgements came since the checkpoints in flight
	// were last published (publishPending).
	unpublished bool
}

// WithDefaults fills in what spec leaves unset: the settings it runs with.
func (spec Spec) WithDefaults() Spec {
	if spec.Mode == 0 {
		spec.Mode = ExactlyOnce
	}
	if spec.Restart == nil {
		spec.Restart = NoRestart{}
	}
	if spec.Executor == nil {
		spec.Executor = Local{}
	}
	spec.ChannelCapacity = cmpOr(spec.ChannelCapacity, 16)
	spec.BatchSize = cmpOr(spec.BatchSize, 512)
	spec.WatermarkInterval = cmpOr(spec.WatermarkInterval, 200*time.Millisecond)
	spec.SnapshotWorkers = cmpOr(spec.SnapshotWorkers, 4)
	if spec.Logger == nil {
		spec.Logger = slog.Default()
	}
	if spec.Now == nil {
		spec.Now = time.Now
	}
	return spec
}

func newDriver(spec Spec) (_ *driver, err error) {
	if spec.Name == "" || spec.Plan == nil || spec.Build == nil {
		return nil, errors.New("runtime: a job needs a name, a plan and a builder")
	}
	spec = spec.WithDefaults()
	if spec.RunID == "" {
		// NB: drawn here, where the run starts, not in withDefaults, which
		// every worker of a cluster runs too.
		spec.RunID = rand.Text()
	}
	if err := validateRestart(spec.Restart); err != nil {
		return nil, err
	}
	if st := spec.Start; st.Fresh && (st.Point != nil || st.Latest) {
		return nil, errors.New("starting over (fresh) and restoring a checkpoint exclude each other")
	}
	d := &driver{
		spec: spec, log: spec.Logger.With("job", spec.Name), tasks: spec.Plan.Tasks(), ops: spec.Plan.Graph.Operators(),
		triggered: map[checkpoint.ID]time.Time{}, persisted: map[checkpoint.ID]*checkpoint.Metadata{}, unsure: map[checkpoint.ID]bool{}, acks: map[checkpoint.ID][]TaskTrace{},
		resources: resources{held: map[string]resource{}},
	}
	defer func() {
		if err != nil {
			d.release()
		}
	}()
	if spec.Mode != None && spec.Storage == nil {
		return nil, errors.New("runtime: checkpointing needs checkpoint storage")
	}
	if cc := spec.Checkpoint; (cc.Unaligned || cc.AlignedTimeout > 0) && spec.Mode != ExactlyOnce {
		return nil, fmt.Errorf("unaligned checkpoints and the aligned checkpoint timeout are settings of mode exactly-once, not %v", spec.Mode)
	} else if (cc.Unaligned || cc.AlignedTimeout > 0) && spec.Codec == nil {
		return nil, errors.New("runtime: unaligned checkpoints need the edges' codec (Spec.Codec)")
	}
	var restored checkpoint.Restored
	if spec.Storage != nil {
		lock, err := spec.Storage.Lock()
		if err != nil {
			return nil, err
		}
		d.resources.held["storage"] = resource{c: lock}
		d.lease, _ = lock.(interface{ Held() error })
		if restored, err = d.decideStart(); err != nil {
			return nil, err
		}
	} else if p := spec.Start.Point; p != nil {
		if err := d.fit(p); err != nil {
			return nil, err
		}
		d.start = p
	}
	d.point, d.lineage = d.start, lineage(spec.RunID, d.start)
	if spec.Mode == None {
		return d, nil
	}
	d.coord, err = checkpoint.New(checkpoint.Job{Name: spec.Name, Tasks: d.tasks, Operators: d.ops, Lineage: d.lineage}, spec.Checkpoint, restored)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// lineage is the lineage (operator.Context.Lineage) of a run with id run
// that starts at p: p's, or the run's own when it restores nothing.
func lineage(run string, p *RestorePoint) string {
	if p == nil {
		return run
	}
	return p.Metadata.Lineage
}

// startedOverSince refuses to restore m when completed holds a checkpoint
// of another lineage taken after it: a run started over since m was taken,
// and its output is not what m's output builds on (--fresh deleted that, or
// it wrote beside it). Restoring m would delete that run's checkpoints, and
// sinks would take its output for m's. NB: "after" by the time they were
// triggered, not by id: ids start again at 1 in an emptied storage, while m
// may have been kept elsewhere. Checkpoints without a lineage (of Weir
// before lineages) are not compared.
func startedOverSince(m *checkpoint.Metadata, completed []*checkpoint.Metadata) error {
	for _, c := range completed {
		if c.Triggered.After(m.Triggered) && c.Lineage != "" && c.Lineage != m.Lineage {
			return operator.Permanent(fmt.Errorf("job %s: %w: checkpoint %d was taken before a run that started over (--fresh, or a start without checkpoints), whose checkpoint %d (taken %s) is in the job's storage: restoring it would delete that run's checkpoints and take its output for this checkpoint's. Restore a checkpoint of that run (--restore latest), or start over with --fresh",
				m.Job, operator.ErrStartedOver, m.ID, c.ID, c.Triggered.Format(time.RFC3339)))
		}
	}
	return nil
}

// rolledBackError refuses to restore checkpoint id, which the start r
// records rolled back.
func rolledBackError(job, where string, id checkpoint.ID, r storage.Rollback) error {
	return operator.Permanent(fmt.Errorf("job %s: %w: checkpoint %d is newer than checkpoint %d, which a start restored at %s, and its sinks rolled back the output committed after that one: restoring checkpoint %d would lose that output. Restore a checkpoint taken since (--restore latest), or checkpoint %d or an older one, or start over with --fresh. (Sinks that cannot take back what they committed, such as Kafka's, kept that output: to go back to checkpoint %d anyway, delete %s/%s first)",
		job, ErrRolledBack, id, r.Restored, r.At.Format(time.RFC3339), id, r.Restored, id, where, r.Name()))
}

// recordRollback records in the job's storage that the run restores p,
// before any task starts (so before any sink rolls back), if p is older
// than a checkpoint scan holds or is not one of them (a checkpoint
// restored from elsewhere): --restore latest then restores p, not a newer
// one whose output is rolled back, until a checkpoint completes; and a
// restore of one of those newer ones is refused (rolledBackError). It
// returns the record's Through (0 when it records nothing): new ids start
// above it.
//
// An earlier start's record that restored a newer checkpoint than p (one
// from elsewhere, which scan does not hold) makes p a rollback too: that
// start's sinks committed output up to its checkpoint. Through is at
// least the restored checkpoint's id, so that a checkpoint from elsewhere
// newer than every one scan holds is rolled back by the next start that
// goes back from it. A record of another lineage with the same Through is
// never written over (it says which checkpoints of its lineage are rolled
// back): Through goes one above it.
func (d *driver) recordRollback(p *RestorePoint, scan storage.Scan) (checkpoint.ID, error) {
	held := scan.Holds(p.Metadata)
	newer := slices.ContainsFunc(scan.Completed, func(m *checkpoint.Metadata) bool { return m.ID > p.Metadata.ID }) ||
		slices.ContainsFunc(scan.Damaged, func(dmg storage.Damaged) bool { return dmg.ID > p.Metadata.ID }) ||
		slices.ContainsFunc(scan.Rollbacks, func(r storage.Rollback) bool { return r.Restored > p.Metadata.ID })
	if held && !newer {
		return 0, nil
	}
	r := storage.Rollback{Restored: p.Metadata.ID, Lineage: p.Metadata.Lineage, Through: max(scan.MaxID, p.Metadata.ID), At: d.spec.Now()}
	if slices.ContainsFunc(scan.Rollbacks, func(h storage.Rollback) bool { return h.Through == r.Through && h.Lineage != r.Lineage }) {
		r.Through++ // NB: scan.MaxID is at least every record's Through
	}
	if !held {
		r.Elsewhere = p.Where
	}
	if err := d.spec.Storage.RecordRollback(r); err != nil {
		return 0, fmt.Errorf("job %s: restore checkpoint %d: the rollback to it could not be recorded, so nothing was restored or deleted; start again to retry: %w", d.spec.Name, p.Metadata.ID, err)
	}
	return r.Through, nil
}

// decideStart reads what the job's storage holds, tidies it, and decides
// where the run starts (d.start). It refuses what could lose or duplicate
// output: starting from the beginning over an earlier run's checkpoints,
// or over checkpoints whose metadata is damaged.
func (d *driver) decideStart() (checkpoint.Restored, error) {
	st, store := d.spec.Start, d.spec.Storage
	scan, err := store.Scan()
	if errors.Is(err, storage.ErrUnavailable) {
		// NB: never start from what a partial scan saw: a checkpoint that
		// could not be read would be skipped, an older one restored and
		// the newer deleted, and sinks whose commits cannot be taken back
		// would write its interval again.
		return checkpoint.Restored{}, fmt.Errorf("job %s: checkpoint storage %s could not be read at start; nothing was restored or deleted, start again to retry: %w",
			d.spec.Name, store.Describe(), err)
	}
	if err != nil {
		return checkpoint.Restored{}, err
	}
	// Checkpoints reserved but never committed were left by a run that was
	// killed or failed; they can never complete.
	for _, id := range scan.Incomplete {
		if err := store.Discard(id); err != nil {
			return checkpoint.Restored{}, fmt.Errorf("clean up incomplete checkpoint %d: %w", id, err)
		}
		d.log.Info("deleted an incomplete checkpoint a previous run left", "checkpoint", id)
	}
	for _, dmg := range scan.Damaged {
		d.log.Warn("checkpoint metadata is damaged; the checkpoint is skipped", "checkpoint", dmg.ID, "path", dmg.Path, "err", dmg.Err)
	}
	var drop []checkpoint.ID // checkpoints to delete before the run starts
	switch {
	case st.Fresh:
		for _, m := range scan.Completed {
			if !m.Savepoint {
				drop = append(drop, m.ID)
			}
		}
		for _, dmg := range scan.Damaged {
			drop = append(drop, dmg.ID)
		}
		if len(drop) > 0 {
			d.log.Warn("starting over: deleting the checkpoints of earlier runs", "dir", store.Describe(), "checkpoints", drop)
		}
	case st.Point != nil:
		d.start = st.Point
	case st.Latest:
		if r, ok := scan.Elsewhere(); ok {
			return checkpoint.Restored{}, fmt.Errorf("job %s: the start at %s restored checkpoint %d from %s and no checkpoint has completed since, so --restore latest would restore an older one of %s than the output holds: restore that one again (--restore %s)",
				d.spec.Name, r.At.Format(time.RFC3339), r.Restored, r.Elsewhere, store.Describe(), r.Elsewhere)
		}
		if m := scan.Latest(); m != nil {
			d.start = &RestorePoint{Metadata: m, Owned: !m.Savepoint, Read: store.ReadState, Open: store.OpenState, Where: store.Describe()}
			break
		}
		if n := len(scan.Completed); n > 0 {
			// Every one rolled back; the one the rollback restored is gone.
			r, _ := scan.RolledBack(scan.Completed[n-1])
			return checkpoint.Restored{}, earlierRunError{fmt.Sprintf("the checkpoints in %s are newer than checkpoint %d, which a start restored at %s, and their output is rolled back; checkpoint %d is not there any more. Weir does not start from the beginning over them: restore checkpoint %d or an older one by path (--restore <dir>/chk-<id>), or start over with --fresh (Config.Fresh), which deletes them and the job's output",
				store.Describe(), r.Restored, r.At.Format(time.RFC3339), r.Restored, r.Restored)}
		}
		if len(scan.Damaged) > 0 {
			return checkpoint.Restored{}, earlierRunError{fmt.Sprintf("every checkpoint in %s is damaged (%s); Weir does not start from the beginning over them: restore an older one by path (--restore <dir>/chk-<id>), or start over with --fresh (Config.Fresh), which deletes them and the job's output",
				store.Describe(), damagedList(scan.Damaged))}
		}
		d.log.Info("no completed checkpoint to restore; starting from the beginning", "dir", store.Describe())
	default:
		if n := len(scan.Completed); n > 0 || len(scan.Damaged) > 0 {
			what := fmt.Sprintf("checkpoints of an earlier run (the latest is %d)", scan.MaxID)
			if n > 0 {
				what = fmt.Sprintf("checkpoints of an earlier run (the latest completed is %d)", scan.Completed[n-1].ID)
			}
			resume := `--restore latest (Config.Restore "latest")`
			if r, ok := scan.Elsewhere(); ok {
				resume = fmt.Sprintf("--restore %s (the checkpoint its last start restored: none has completed here since)", r.Elsewhere)
			} else if scan.Latest() == nil {
				resume = "a checkpoint by path (--restore <dir>/chk-<id>): --restore latest takes none of these, as they are damaged or rolled back"
			}
			return checkpoint.Restored{}, earlierRunError{fmt.Sprintf("%s holds %s: resume it with %s, or start over with --fresh (Config.Fresh), which deletes them and the job's output",
				store.Describe(), what, resume)}
		}
	}
	if d.start != nil {
		if err := d.fit(d.start); err != nil {
			return checkpoint.Restored{}, err
		}
		if err := startedOverSince(d.start.Metadata, scan.Completed); err != nil {
			return checkpoint.Restored{}, err
		}
		if r, rolled := scan.RolledBack(d.start.Metadata); rolled {
			return checkpoint.Restored{}, rolledBackError(d.spec.Name, store.Describe(), d.start.Metadata.ID, r)
		}
		through, err := d.recordRollback(d.start, scan)
		if err != nil {
			return checkpoint.Restored{}, err
		}
		scan.MaxID = max(scan.MaxID, through)
		// Checkpoints newer than the restored one describe output that the
		// sinks roll back on restore: they are gone for good.
		for _, m := range scan.Completed {
			if m.ID > d.start.Metadata.ID && !m.Savepoint {
				drop = append(drop, m.ID)
			}
		}
		for _, dmg := range scan.Damaged {
			if dmg.ID > d.start.Metadata.ID {
				drop = append(drop, dmg.ID)
			}
		}
		if len(drop) > 0 {
			d.log.Warn("restoring an older checkpoint than the latest: the newer ones are deleted, and sinks roll back what they committed",
				"restored", d.start.Metadata.ID, "deleted", drop)
		}
	}
	restored := checkpoint.Restored{MaxID: scan.MaxID}
	if d.start != nil {
		restored.MaxID = max(restored.MaxID, d.start.Metadata.ID)
	}
	for _, id := range drop {
		if err := store.Discard(id); err != nil {
			return checkpoint.Restored{}, fmt.Errorf("delete checkpoint %d: %w", id, err)
		}
	}
	for _, m := range scan.Completed {
		if !slices.Contains(drop, m.ID) {
			restored.Completed = append(restored.Completed, checkpoint.Completed{ID: m.ID, Savepoint: m.Savepoint})
		}
	}
	for _, dmg := range scan.Damaged {
		if !slices.Contains(drop, dmg.ID) {
			restored.Damaged = append(restored.Damaged, dmg.ID)
		}
	}
	// Shared files no completed checkpoint references were left by a
	// crash during a discard or an upload.
	if err := store.RemoveOrphans(); err != nil {
		d.log.Warn("could not delete shared files no checkpoint references", "dir", store.Describe(), "err", err)
	}
	return restored, nil
}

func damagedList(ds []storage.Damaged) string {
	var s string
	for i, dmg := range ds {
		if i > 0 {
			s += "; "
		}
		s += dmg.Err.Error()
	}
	return s
}

// fit checks a restore point against the job before anything is restored.
func (d *driver) fit(p *RestorePoint) error {
	fit, err := p.Metadata.Fit(d.spec.Name, d.ops, d.spec.Start.AllowNonRestoredState)
	if err != nil {
		return fmt.Errorf("restore from %s: %w", p.Where, err)
	}
	if len(fit.Fresh) > 0 {
		d.log.Info("operators without state in the checkpoint start fresh", "checkpoint", p.Metadata.ID, "operators", fit.Fresh)
	}
	if len(fit.Dropped) > 0 {
		d.log.Warn("dropping state no operator claims (allowed)", "checkpoint", p.Metadata.ID, "operators", fit.Dropped)
	}
	return nil
}

func cmpOr[T int | time.Duration](v, def T) T {
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
	defer d.spec.Stats.setPending(nil) // nothing is in flight once the run ended
	defer func() {
		if err := d.deleteUnsure(); err != nil {
			d.log.Error("a checkpoint whose commit failed is left in storage, where it looks completed: delete it by hand before a run restores it or one before it",
				"storage", d.spec.Storage.Describe(), "err", err)
		}
		// The shared files of the checkpoints aborted as the run ended:
		// in a cluster, those of tasks that had not acknowledged are known
		// to the workers' storage only (a discard here does not see them).
		// Nothing writes any more in one process; in a cluster, an upload
		// a worker still runs after the stop's wait is left to the next
		// start.
		if d.spec.Storage != nil {
			if err := d.spec.Storage.RemoveOrphans(); err != nil {
				d.log.Warn("could not delete shared files no checkpoint references; the next start does", "storage", d.spec.Storage.Describe(), "err", err)
			}
		}
	}()
	for {
		d.attempt++
		if d.point != nil {
			d.log.Info("restoring checkpoint", "checkpoint", d.point.Metadata.ID, "from", d.point.Where, "attempt", d.attempt)
		}
		err := d.runAttempt(ctx)
		d.res.Attempts = d.attempt
		if err == nil {
			d.emit(JobEvent{Kind: EventFinished, ID: d.res.StoppedWith})
			return d.res, nil
		}
		if ctx.Err() != nil {
			return d.res, d.stopped(ctx, err)
		}
		if d.lease != nil {
			if lerr := d.lease.Held(); lerr != nil {
				// NB: a restart would write and commit over the run that
				// holds the storage now.
				return d.res, fmt.Errorf("job %s failed, and must not restart: %w; the attempt's failure: %w", d.spec.Name, lerr, err)
			}
		}
		if d.point != nil && DamagedState(err) && d.point.Elsewhere {
			// Maybe a copy: the job's storage may hold an intact checkpoint
			// of the same id, which a fallback would delete, and restore
			// another than the one named.
			return d.res, fmt.Errorf("job %s: checkpoint %d at %s cannot be restored: %w; it is not in the job's checkpoint storage %s, so Weir does not fall back to an earlier one: copy it with its job directory's shared files, or restore another (--restore latest restores the newest of %s)",
				d.spec.Name, d.point.Metadata.ID, d.point.Where, err, d.spec.Storage.Describe(), d.spec.Storage.Describe())
		}
		if d.point != nil && DamagedState(err) {
			// The restored checkpoint's state is missing or damaged: the
			// previous retained checkpoint is the next best. Only proven
			// damage gets here (DamagedState): an I/O error reading the
			// state restarts from the same checkpoint below.
			prev, abandoned, perr := d.previous(d.point.Metadata.ID)
			if perr == nil {
				perr = d.abandon(abandoned)
			}
			switch {
			case errors.Is(perr, storage.ErrUnavailable):
				// Which checkpoint comes before is not known, or the
				// damaged one is not deleted yet: restart from the same
				// one, and look again if it is still damaged.
				err = fmt.Errorf("checkpoint %d in %s cannot be restored (%w), and the storage could not be read or written to fall back to the previous one: %w",
					d.point.Metadata.ID, d.point.Where, err, perr)
			case perr != nil:
				return d.res, fmt.Errorf("job %s: checkpoint %d in %s cannot be restored (%w), and no earlier one can be used: %w",
					d.spec.Name, d.point.Metadata.ID, d.point.Where, err, perr)
			default:
				d.log.Error("checkpoint state is missing or damaged; restoring the previous checkpoint",
					"checkpoint", d.point.Metadata.ID, "previous", prev.Metadata.ID, "dir", d.point.Where, "err", err)
				d.point = prev
			}
		} else if IsPermanent(err) {
			return d.res, fmt.Errorf("job %s failed, and a restart cannot fix it: %w", d.spec.Name, err)
		}
		d.failures.Consecutive++
		if len(d.failures.Times) == MaxFailureHistory {
			d.failures.Times = d.failures.Times[1:]
		}
		d.failures.Times = append(d.failures.Times, d.spec.Now())
		delay, ok := d.spec.Restart.Next(d.failures)
		if !ok {
			return d.res, fmt.Errorf("job %s gave up after %d failures in a row, %d in all (restart strategy: %s); the last: %w",
				d.spec.Name, d.failures.Consecutive, len(d.failures.Times), d.spec.Restart, err)
		}
		d.emit(JobEvent{Kind: EventRestarting, Err: err, Duration: delay, RestoredFrom: d.pointID()})
		d.log.Warn("job failed; restarting", "attempt", d.attempt, "delay", delay, "from-checkpoint", d.pointID(), "err", err)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return d.res, d.stopped(ctx, err)
		}
	}
}

// stopped is the error of a run whose ctx ended: its cause, and the failure
// that ended the last attempt, if it failed.
func (d *driver) stopped(ctx context.Context, last error) error {
	cause := context.Cause(ctx)
	if last == nil || errors.Is(last, cause) || errors.Is(last, ErrStopped) {
		return cause
	}
	return fmt.Errorf("job %s stopped (%w) after a failure: %w", d.spec.Name, cause, last)
}

// DamagedState reports whether err is a restore that found a checkpoint's
// state missing or corrupt: proven damage, the only reason to fall back to
// an older checkpoint. An I/O error reading the state is not damage
// (storage wraps only a missing file or wrong bytes in
// checkpoint.ErrStateDamaged).
func DamagedState(err error) bool {
	return errors.Is(err, checkpoint.ErrStateDamaged) || errors.Is(err, state.ErrCorrupt)
}

// previous is the newest completed checkpoint in the job's storage older
// than id that fits the job and that no start rolled back, and the
// checkpoints it abandons: those after it up to id, savepoints excepted.
// It records the rollback to it (recordRollback).
func (d *driver) previous(id checkpoint.ID) (*RestorePoint, []checkpoint.ID, error) {
	store := d.spec.Storage
	if store == nil {
		return nil, nil, errors.New("no checkpoint storage")
	}
	scan, err := store.Scan()
	if err != nil {
		return nil, nil, err
	}
	var abandoned []checkpoint.ID
	for i := len(scan.Completed) - 1; i >= 0; i-- {
		m := scan.Completed[i]
		if d.unsure[m.ID] {
			abandoned = append(abandoned, m.ID) // its commit failed
			continue
		}
		if m.ID >= id {
			if m.ID == id && !m.Savepoint {
				abandoned = append(abandoned, m.ID)
			}
			continue
		}
		if m.Lineage != d.lineage {
			// Taken before a run that started over (savepoints survive
			// --fresh): its output is gone or written over.
			continue
		}
		if _, rolled := scan.RolledBack(m); rolled {
			continue // a savepoint whose output an earlier fallback or start rolled back
		}
		p := &RestorePoint{Metadata: m, Owned: !m.Savepoint, Read: store.ReadState, Open: store.OpenState, Where: store.Describe()}
		if err := d.fit(p); err != nil {
			d.log.Warn("an earlier checkpoint does not fit the job either", "checkpoint", m.ID, "err", err)
			if !m.Savepoint {
				abandoned = append(abandoned, m.ID)
			}
			continue
		}
		// NB: the run reserved id, so scan.MaxID is above every earlier
		// record's Through and the record takes no id above it.
		if _, err := d.recordRollback(p, scan); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", storage.ErrUnavailable, err)
		}
		return p, abandoned, nil
	}
	return nil, nil, fmt.Errorf("%s holds no completed checkpoint of this run's lineage older than %d (keep more with --checkpoints-retained)", store.Describe(), id)
}

// abandon deletes the checkpoints a fallback skips before the run
// restores an older one. NB: the sinks roll back what they committed
// after the older one, so a skipped checkpoint left in storage could later
// be restored (as the latest at the next start, or as the previous of
// another damaged one) with its output gone.
//
// The coordinator forgets each one deleted, so that it does not count
// toward Config.Retained (which would discard one still kept).
func (d *driver) abandon(ids []checkpoint.ID) (err error) {
	for i, id := range ids {
		if err = d.spec.Storage.Discard(id); err != nil {
			err = fmt.Errorf("delete checkpoint %d, which the fallback skips (%w): %w", id, storage.ErrUnavailable, err)
			ids = ids[:i]
			break
		}
	}
	if d.coord != nil {
		d.coord.Forget(ids)
	}
	return err
}

// deleteUnsure deletes the checkpoints whose commit failed and whose files
// an abort could not delete. It runs before every attempt, at every
// completed checkpoint and at the end of the run; an attempt does not start
// while one is left. NB: the failed commit may have written the metadata,
// so such a checkpoint can look completed in storage; an attempt rolls back
// the sinks' output after the checkpoint it restores, and a later start (or
// fallback) restoring the unsure one would find that output gone.
func (d *driver) deleteUnsure() error {
	for _, id := range slices.Sorted(maps.Keys(d.unsure)) {
		if err := d.spec.Storage.Discard(id); err != nil {
			return fmt.Errorf("the commit of checkpoint %d failed and its files could not be deleted (%w), so it may look completed in storage; the job restores an older one only once it is deleted: %w",
				id, storage.ErrUnavailable, err)
		}
		delete(d.unsure, id)
	}
	return nil
}

// sharedPaths are the shared files m references.
func sharedPaths(m *checkpoint.Metadata) map[string]bool {
	out := map[string]bool{}
	for _, ts := range m.Tasks {
		for _, h := range ts.Handles {
			if storage.IsShared(h) {
				out[h.Path] = true
			}
		}
	}
	return out
}

// uploaded is the bytes of state m wrote: all but the shared files the
// checkpoint before it (whose shared files are before) referenced too.
func uploaded(m *checkpoint.Metadata, before map[string]bool) int64 {
	var n int64
	for _, ts := range m.Tasks {
		for _, h := range ts.Handles {
			if !before[h.Path] || !storage.IsShared(h) {
				n += h.SizeBytes
			}
		}
	}
	return n
}

// IsPermanent reports whether err is a failure a restart cannot fix: the
// job fails instead (a worker's report says so, for the coordinator's
// driver to decide as this process's would).
func IsPermanent(err error) bool {
	return operator.IsPermanent(err) || errors.Is(err, storage.ErrLeaseLost) || errors.Is(err, state.ErrCorrupt) || errors.Is(err, checkpoint.ErrCorrupt) || errors.Is(err, checkpoint.ErrMismatch)
}

func (d *driver) pointID() checkpoint.ID {
	if d.point == nil {
		return 0
	}
	return d.point.Metadata.ID
}

// release closes the run's resources: locks of storage and of sinks.
func (d *driver) release() {
	if err := d.resources.close(); err != nil {
		d.log.Warn("could not release the run's locks", "err", err)
	}
}

// resources are what operators hold for a whole run (operator.Context.Acquire).
type resources struct {
	mu   sync.Mutex
	held map[string]resource
}

type resource struct {
	c   io.Closer
	err error
}

func (r *resources) acquire(key string, open func() (io.Closer, error)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h, ok := r.held[key]; ok {
		return h.err
	}
	c, err := open()
	r.held[key] = resource{c: c, err: err}
	return err
}

func (r *resources) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for k, h := range r.held {
		if h.c != nil {
			errs = append(errs, h.c.Close())
		}
		delete(r.held, k)
	}
	return errors.Join(errs...)
}

func (d *driver) runAttempt(parent context.Context) error {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(ErrStopped)
	d.stopWith = 0 // a stop an earlier attempt did not finish is not this one's
	d.told = 0     // this attempt's tasks were told of nothing yet
	if d.point != nil {
		// What the first checkpoint uploaded excludes the restored files
		// it references (an owned restore's, state.Restored).
		d.lastShared = sharedPaths(d.point.Metadata)
	}
	if d.coord != nil {
		d.coord.Hold(false)
	}
	if err := d.deleteUnsure(); err != nil {
		return err
	}
	// The attempt's reports channel is its own, so nothing an earlier
	// attempt sends reaches a later one.
	reports := make(chan Report, 64*len(d.tasks.All)+64)
	acquire := d.resources.acquire
	if d.spec.NoRunLocks {
		acquire = func(string, func() (io.Closer, error)) error { return nil }
	}
	part := Part{
		RunID: d.spec.RunID, Attempt: d.attempt, Point: d.point, Acquire: acquire,
		// Operators start over when the user asked for it, or when an
		// earlier attempt of this run also started from nothing: what they
		// wrote then is this run's own.
		StartOver: (d.attempt == 1 && d.spec.Start.Fresh) || (d.attempt > 1 && d.point == nil),
	}
	x, err := d.spec.Executor.Start(ctx, d.spec, part, reports)
	if err != nil {
		return err
	}
	stop := func() {
		cancel(ErrStopped)
		x.Stop()
	}
	now := d.spec.Now()
	// Tasks that restore channel state replay it first; the job runs for
	// the coordinator once they all have: a checkpoint triggered before
	// would wait for the replay, and might expire, fail the job over and
	// replay again, for ever (note 74). Exhausted sources wait too (Start
	// forgets them).
	var replaying map[checkpoint.TaskID]bool
	var exhausted []checkpoint.TaskID
	if d.point != nil {
		replaying = ChannelStateReplays(d.spec.Plan, d.point.Metadata)
	}
	if d.coord != nil && len(replaying) == 0 {
		d.coord.Start(now)
	}
	running := JobEvent{Kind: EventRunning, RestoredFrom: d.pointID()}
	if p := d.point; p != nil {
		running.RestoredSavepoint, running.RestoredWhere = p.Metadata.Savepoint, p.Where
		for _, ts := range p.Metadata.Tasks {
			running.RestoredParallelism = max(running.RestoredParallelism, ts.Task.Subtask+1)
		}
	}
	d.emit(running)
	tick := time.NewTicker(d.tickInterval())
	defer tick.Stop()
	finished := 0
	for {
		var failure error
		select {
		case <-tick.C:
			if d.coord != nil {
				d.coord.Tick(d.spec.Now())
				if d.unpublished {
					d.publishPending()
				}
			}
		case req := <-d.spec.Savepoints:
			var r SavepointReply
			switch {
			case d.coord == nil:
				r.Err = errors.New("savepoint: the job takes no checkpoints (mode none)")
			case len(replaying) > 0:
				r.Err = fmt.Errorf("savepoint: the job is replaying the channel state of checkpoint %d (%d tasks to go); try again once it runs", d.pointID(), len(replaying))
			case req.Stop && d.stopWith != 0:
				r.Err = fmt.Errorf("savepoint: the job is stopping with savepoint %d already", d.stopWith)
			default:
				r.ID, r.Err = d.coord.TriggerSavepoint(d.spec.Now())
				if r.Err == nil && req.Stop {
					d.stopWith = r.ID
					d.coord.Hold(true)
				}
			}
			req.Reply <- r
		case r := <-reports:
			switch r.Kind {
			case ReportAck:
				var bytes int64
				for _, h := range r.Handles {
					bytes += h.SizeBytes
				}
				d.acks[r.ID] = append(d.acks[r.ID], TaskTrace{Task: r.Task, Acked: d.spec.Now().Sub(d.triggered[r.ID]), Align: r.Align, Sync: r.Sync, Async: r.Async, Bytes: bytes, Arrivals: r.Arrivals, Unaligned: r.Unaligned, Switched: r.Switched, ChannelState: r.ChannelState})
				d.res.MaxSyncSnapshot = max(d.res.MaxSyncSnapshot, r.Sync)
				d.coord.Acknowledge(d.spec.Now(), r.Task, r.ID, r.Handles)
				d.unpublished = true
			case ReportDecline:
				d.coord.Decline(r.Task, r.ID, r.Err)
				if IsPermanent(r.Err) {
					// Every checkpoint after it would be declined alike,
					// and a restart cannot fix it: the job fails at once,
					// as on a task's permanent failure, whatever checkpoint
					// failures it tolerates.
					failure = fmt.Errorf("task %s declined checkpoint %d, and no checkpoint can succeed: %w", r.Task, r.ID, r.Err)
					d.coord.TaskFailed(r.Task, failure)
				}
			case ReportExhausted:
				if len(replaying) > 0 {
					exhausted = append(exhausted, r.Task)
				} else {
					d.coord.InputExhausted(d.spec.Now(), r.Task)
				}
			case ReportReplayed:
				delete(replaying, r.Task)
				if len(replaying) == 0 && d.coord != nil {
					d.log.Info("channel state replayed", "checkpoint", d.pointID(), "attempt", d.attempt, "after", d.spec.Now().Sub(now))
					d.coord.Start(d.spec.Now())
					for _, task := range exhausted {
						d.coord.InputExhausted(d.spec.Now(), task)
					}
				}
			case ReportFinished:
				finished++
				if d.coord != nil {
					d.coord.TaskFinished(r.Task)
				}
			case ReportFailed:
				failure = r.Err
				if d.coord != nil {
					d.coord.TaskFailed(r.Task, r.Err)
				}
			}
		case <-parent.Done():
			if d.coord != nil {
				d.coord.Cancel()
				d.carryOut(ctx, x)
			}
			stop()
			return context.Cause(parent)
		}
		if d.coord != nil {
			if err := d.carryOut(ctx, x); err != nil && failure == nil {
				failure = err
			}
		}
		if failure != nil {
			// The coordinator already stopped: TaskFailed or FailJob.
			stop()
			return failure
		}
		if finished == len(d.tasks.All) {
			stop()
			if d.stopWith != 0 {
				d.res.StoppedWith = d.stopWith
				d.log.Info("job stopped with a savepoint", "savepoint", d.stopWith, "attempt", d.attempt)
			}
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

// publishPending publishes the checkpoints in flight (Stats.Pending) for
// the web server's goroutines. NB: a copy of them, each with every task,
// at every trigger, completion and abort, but after acknowledgements at
// most once per tick: a copy per acknowledgement would cost the square of
// the tasks per checkpoint.
func (d *driver) publishPending() {
	d.spec.Stats.setPending(d.coord.Pending())
	d.unpublished = false
}

// discardState deletes the state a task wrote for a checkpoint that is
// not pending any more (aborted, or acknowledged late). NB: not that of an
// unsure checkpoint (its commit failed, maybe after its metadata was
// written, and its discard failed too): it may look completed in storage,
// and its files stay until deleteUnsure deletes it, metadata first.
func (d *driver) discardState(act checkpoint.DiscardState) {
	if d.unsure[act.ID] {
		return
	}
	if err := d.spec.Storage.DiscardState(act.Handles); err != nil {
		d.log.Warn("could not delete late state", "checkpoint", act.ID, "err", err)
	}
}

// carryOut executes the coordinator's decisions until it has none; a
// FailJob decision is returned as the failure.
func (d *driver) carryOut(ctx context.Context, x Execution) error {
	var failure error
	for n := 0; ; n++ {
		acts := d.coord.Ready()
		if len(acts) == 0 {
			if n > 0 {
				d.publishPending() // one may have been triggered, completed or aborted
			}
			return failure
		}
		for _, act := range acts {
			switch act := act.(type) {
			case checkpoint.Trigger:
				// The instant the barriers carry, from which tasks count
				// the aligned-checkpoint timeout: a task's acknowledgement
				// and the checkpoint's duration count from it too (the
				// driver may reach this action some milliseconds later).
				d.triggered[act.ID] = act.At
				if act.At.IsZero() {
					d.triggered[act.ID] = d.spec.Now()
				}
				if err := d.spec.Storage.Reserve(act.ID); err != nil {
					d.coord.TriggerFailed(act.ID, err)
					continue
				}
				for _, s := range d.tasks.Sources {
					x.Send(ctx, s, Control{Kind: ControlTrigger, ID: act.ID, Stop: act.ID == d.stopWith, Aligned: act.Savepoint || act.Final, Triggered: act.At, Completed: d.told})
				}
			case checkpoint.Persist:
				m := act.Metadata
				err := d.spec.Storage.Commit(m)
				if errors.Is(err, storage.ErrFreedFilesStay) {
					d.log.Warn("checkpoint completed; deleting the shared files it freed failed", "checkpoint", m.ID, "err", err)
					err = nil
				}
				if err == nil {
					d.persisted[m.ID] = m
					d.res.Checkpoints++
					dur := d.spec.Now().Sub(d.triggered[m.ID])
					if len(d.res.Durations) == maxDurations {
						d.res.Durations = d.res.Durations[1:]
					}
					d.res.Durations = append(d.res.Durations, dur)
					up := uploaded(m, d.lastShared)
					d.lastShared = sharedPaths(m)
					// Every task acknowledged: the last is the slowest.
					tasks := d.acks[m.ID]
					var sync time.Duration
					var channel int64
					for _, tt := range tasks {
						sync = max(sync, tt.Sync)
						channel += tt.ChannelState
					}
					slowest := tasks[len(tasks)-1].Task
					d.emit(JobEvent{Kind: EventCheckpointCompleted, ID: m.ID, Duration: dur, Size: m.SizeBytes(), Uploaded: up, SyncPart: sync, Slowest: slowest, Savepoint: m.Savepoint, Tasks: tasks})
					attrs := []any{"checkpoint", m.ID, "attempt", d.attempt, "duration", dur, "bytes", m.SizeBytes(), "uploaded", up, "sync", sync, "slowest", slowest}
					if channel > 0 {
						// Of bytes: the records in flight the snapshots
						// stored (unaligned ones; aligned ones too, of
						// barriers that overtook records), which a
						// restore replays. The UI's channelStateBytes.
						attrs = append(attrs, "channel-state-bytes", channel)
					}
					d.log.Info("checkpoint completed", attrs...)
					// Forget m's acknowledgements and those of older
					// checkpoints that are over (late acks of an aborted
					// one), not of those still pending: a savepoint does
					// not count against MaxConcurrent, so a periodic
					// checkpoint triggered after it can complete first
					// (its barriers right behind the savepoint's, under
					// back-pressure), and the savepoint's event then
					// listed only the tasks that acknowledged it after
					// that (TestUnalignedSavepointsUnderBackPressure).
					pending := d.coord.PendingIDs()
					for id := range d.acks {
						if id == m.ID || id < m.ID && !slices.Contains(pending, id) {
							delete(d.acks, id)
						}
					}
				}
				if err != nil {
					d.unsure[m.ID] = true // until the abort deletes it
				}
				d.coord.Persisted(d.spec.Now(), m.ID, err)
				if errors.Is(err, storage.ErrLeaseLost) {
					failure = err // fenced: another run holds the storage
				}
			case checkpoint.NotifyComplete:
				delete(d.triggered, act.ID)
				d.failures.Consecutive = 0 // progress: restart attempts count afresh
				// A failover restores the newest checkpoint this run
				// completed, never one an earlier run left in storage.
				// NB: the newest by id, not the last announced: a
				// savepoint (it does not count against MaxConcurrent)
				// may complete after newer periodic checkpoints whose
				// output the sinks have committed since; restoring it
				// would produce that output again
				// (TestUnalignedSavepointCompletedLateIsNoFailoverPoint).
				if d.point == nil || act.ID > d.point.Metadata.ID {
					m := d.persisted[act.ID]
					d.point = &RestorePoint{Metadata: m, Owned: !m.Savepoint, Read: d.spec.Storage.ReadState, Open: d.spec.Storage.OpenState, Where: d.spec.Storage.Describe()}
				}
				delete(d.persisted, act.ID)
				_ = d.deleteUnsure() // retried before the next attempt, and at the end
				for _, t := range d.tasks.All {
					x.Send(ctx, t, Control{Kind: ControlComplete, ID: act.ID, EndOfInput: act.EndOfInput, Stop: act.ID == d.stopWith})
				}
				d.told = max(d.told, act.ID)
			case checkpoint.Abort:
				delete(d.triggered, act.ID)
				if act.ID == d.stopWith {
					d.stopWith = 0 // the job runs on
					d.coord.Hold(false)
					d.log.Warn("the savepoint to stop with was aborted: "+act.Reason.AfterAbortedStop(), "savepoint", act.ID, "reason", act.Reason, "err", act.Cause)
				}
				d.emit(JobEvent{Kind: EventCheckpointAborted, ID: act.ID, Reason: act.Reason, Err: act.Cause})
				if act.Reason.Counts() {
					d.log.Warn("checkpoint aborted", "checkpoint", act.ID, "attempt", d.attempt, "reason", act.Reason, "err", act.Cause)
				}
				for _, t := range d.tasks.All {
					x.Send(ctx, t, Control{Kind: ControlAbort, ID: act.ID})
				}
				if err := d.spec.Storage.Discard(act.ID); err != nil {
					d.log.Warn("could not delete an aborted checkpoint's files", "checkpoint", act.ID, "err", err)
				} else {
					delete(d.unsure, act.ID)
				}
			case checkpoint.Discard:
				delete(d.persisted, act.ID)
				if err := d.spec.Storage.Discard(act.ID); err != nil {
					d.log.Warn("could not discard a checkpoint", "checkpoint", act.ID, "err", err)
				}
			case checkpoint.DiscardState:
				d.discardState(act)
			case checkpoint.FailJob:
				failure = act.Cause
			}
		}
	}
}
