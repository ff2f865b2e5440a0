// Package sim drives the real checkpoint coordinator and the real barrier
// aligners over a simulated dataflow from one seed, with random scheduling,
// task and process crashes, declines, storage failures and timeouts, and
// checks the protocol's invariants on every run. All non-determinism comes
// from the seed, so a failing seed replays exactly.
//
// The dataflow:
//
//	src0 ─┐ hash by key ┌─ cnt0 ─┐
//	      ├─────────────┤        ├─ union (two inputs) ─ sink (two-phase commit)
//	src1 ─┘             └─ cnt1 ─┘
//
// Sources emit numbered records; each counter keeps a count per key in keyed
// state and emits (key, count, record); the union forwards from both inputs
// and counts what it passed; the sink writes to a simulated external system
// with transactions that are prepared at a snapshot and committed when the
// checkpoint completes. The end of input follows Flink's FLIP-147 order, as
// the runtime does: end of data flows downstream, the final checkpoint
// follows it, and tasks end on its completion.
//
// The schedules include periodic checkpoints beside savepoints, several
// checkpoints in flight, sources that decline (and send cancel markers),
// metadata writes that fail or finish out of order, timeouts, and task and
// process crashes.
//
// Half the seeds run with high availability (issue 20, design note 73): the
// coordinator is one term of the job's leadership in a model of etcd
// (etcd.go), which reserves checkpoint ids and records completed
// checkpoints in writes fenced by the term's epoch. Those runs draw leader
// changes: the leader is deposed while its coordinator acts on for a while,
// unaware, beside a new coordinator that restores what etcd records.
//
// Exactly-once seeds draw how they align (issue 21, design note 74), from a
// random stream of their own, so that aligned seeds replay the schedules
// they had before: aligned, unaligned (FLIP-76), or aligned with a timeout
// that switches a long alignment to unaligned. Unaligned checkpoints carry
// channel state: the records a barrier overtook in a task's output queues,
// and the records a task read from an input after its snapshot and before
// that input's barrier. A restore replays it before anything new.
package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/checkpoint/barrier"
)

// Coordinator is what the simulation needs of the checkpoint coordinator; a
// test may wrap the real one to plant a bug.
type Coordinator interface {
	Start(now time.Time)
	Tick(now time.Time)
	Acknowledge(now time.Time, task checkpoint.TaskID, id checkpoint.ID, hs []checkpoint.Handle) checkpoint.AckResult
	TriggerFailed(id checkpoint.ID, cause error)
	Decline(task checkpoint.TaskID, id checkpoint.ID, cause error)
	Persisted(now time.Time, id checkpoint.ID, err error)
	TriggerSavepoint(now time.Time) (checkpoint.ID, error)
	TaskFailed(task checkpoint.TaskID, cause error)
	TaskFinished(task checkpoint.TaskID)
	InputExhausted(now time.Time, task checkpoint.TaskID)
	Latest() (checkpoint.Completed, bool)
	ConsecutiveFailures() int
	Ready() []checkpoint.Action
}

// Aligner is what the simulation needs of a task's barrier aligner.
type Aligner interface {
	OnBarrier(c int, id checkpoint.ID) []barrier.Action
	OnCancel(c int, id checkpoint.ID) []barrier.Action
	Abort(id checkpoint.ID) []barrier.Action
	Blocked(c int) bool
	Aligning() []checkpoint.ID
	// For unaligned checkpoints and the aligned timeout (issue 21).
	OnAlignedBarrier(c int, id checkpoint.ID) []barrier.Action
	Tick(now time.Time) []barrier.Action
	Persisting() []checkpoint.ID
}

// Alignment is how an exactly-once run aligns barriers.
type Alignment int

const (
	// AlignmentDrawn: the seed draws one of the others.
	AlignmentDrawn Alignment = iota
	// Aligned: every checkpoint aligns.
	Aligned
	// Unaligned: checkpoints are unaligned (barrier.Unaligned); savepoints
	// align.
	Unaligned
	// AlignedTimeout: checkpoints align, and one whose alignment at a task
	// lasts longer than the timeout switches to unaligned there.
	AlignedTimeout
)

func (a Alignment) String() string {
	switch a {
	case Aligned:
		return "aligned"
	case Unaligned:
		return "unaligned"
	case AlignedTimeout:
		return "aligned-timeout"
	}
	return "drawn"
}

// Config is one simulation run.
type Config struct {
	Seed int64
	Mode barrier.Mode
	// Alignment is how an exactly-once run aligns; zero draws it from the
	// seed. AlignedTimeout is the timeout of AlignedTimeout runs; zero
	// draws it (1 to 20 ms of simulated time).
	Alignment      Alignment
	AlignedTimeout time.Duration
	// RecordsPerSource and Keys size the input; zero picks from the seed.
	RecordsPerSource int
	Keys             int
	// MaxFaults bounds crashes and injected failures; after them the run
	// must finish. Zero picks from the seed.
	MaxFaults int
	// NewAligner and WrapCoordinator replace the real cores, for tests that
	// check the simulation catches planted bugs. Nil means the real ones.
	NewAligner      func(mode barrier.Mode, channels int, opts ...barrier.Option) Aligner
	WrapCoordinator func(*checkpoint.Coordinator, checkpoint.Config) Coordinator
	// FenceAfter is when a cut-off worker fences itself, as a share of the
	// coordinator's heartbeat timeout; zero means the runtime's 3/4. Tests
	// plant a late fence with it.
	FenceAfter float64
	// NotifyZombies plants the bug that attempts prevent: the coordinator
	// notifies the tasks of an earlier deployment that are still running
	// (their cancellation is slow) of its checkpoints too; every failover
	// then leaves such tasks, so that the bug shows.
	NotifyZombies bool
	// HA runs with high availability whatever the seed draws; a seed
	// draws it for half the runs otherwise.
	HA bool
	// The leader-change bugs below are planted in runs with high
	// availability (tests set HA with them).
	//
	// CompleteDeposed: etcd records a checkpoint complete for a deposed
	// leader (its completion is not fenced by the leader's epoch).
	CompleteDeposed bool
	// RestoreNewestMetadata: a new leader restores the newest checkpoint
	// whose metadata storage holds, as a run without high availability
	// does, rather than the newest etcd records as complete.
	RestoreNewestMetadata bool
	// AcceptOldConnections: a task accepts a data connection of another
	// attempt (an old term's producer reaching a worker that runs the new
	// term's task).
	AcceptOldConnections bool
	// ObeyOldAttempts: a task acts on a command of another attempt (a
	// deposed leader's trigger, abort or notification).
	ObeyOldAttempts bool
	// The channel-state bugs below are planted in unaligned runs (tests
	// set Alignment with them).
	//
	// BarrierBehindOutput: a task captures its queued output records as
	// channel state, but puts the barrier behind them, not in front: the
	// records are persisted twice (in the task's output state, and in the
	// consumer's input state or snapshot).
	BarrierBehindOutput bool
	// PersistArrivalsOnly: an input's records already queued when its
	// persistence starts are not persisted, only those that arrive later:
	// the channel state is cut short.
	PersistArrivalsOnly bool
	// Trace, if set, receives a line per scheduling decision.
	Trace func(string)
}

// Result summarises a run that held every invariant.
type Result struct {
	Steps, TaskCrashes, ProcessCrashes, Partitions, Zombies, Completed, Aborted int
	// With high availability: LeaderChanges counts the leaders deposed
	// while their coordinator acted on (a process crash starts a new term
	// too, counted as a process crash); Fenced the writes of deposed
	// leaders etcd refused (reserve, complete, forget), FencedCompletes
	// those that were a checkpoint's completion; Refused the commands and
	// data connections of another attempt that tasks refused;
	// LateNotices the notifications a deposed leader sent for a checkpoint
	// etcd recorded in its term, which its own sink obeyed.
	LeaderChanges, Fenced, FencedCompletes, Refused, LateNotices int
	// Unaligned counts the unaligned snapshots taken, Switched those of
	// them a timeout switched, Persisted the records persisted as channel
	// state, Replayed those replayed at restores.
	Unaligned, Switched, Persisted, Replayed int
}

// Violation is an invariant that did not hold.
type Violation struct {
	Seed int64
	Step int
	What string
}

func (v *Violation) Error() string {
	return fmt.Sprintf("seed %d, step %d: %s", v.Seed, v.Step, v.What)
}

const maxSteps = 200_000

// origin is the simulated time a run starts at.
var origin = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Run simulates one seed and returns a *Violation when an invariant breaks.
func Run(cfg Config) (Result, error) {
	s := newSim(cfg)
	err := s.run()
	return s.res, err
}

// ---- records and events on channels ----

type record struct {
	Src, Seq, Key int
	Count         int // set by the counter
}

type eventKind int

const (
	evRecord eventKind = iota
	evBarrier
	evCancel
	evEndOfData
)

type event struct {
	kind eventKind
	rec  record
	id   checkpoint.ID
}

// channel is a FIFO from one task to one input of another. It remembers how
// many records preceded each barrier, for the consistent-cut check.
type channel struct {
	from    int    // its producer's index in taskIDs
	attempt uint64 // the attempt whose tasks it joins
	q       []event
	sent    int
	before  map[checkpoint.ID]int
	log     []record // every record sent, in order, if logged (runs with channel state)
	logged  bool
}

func newChannel(from *task, attempt uint64) *channel {
	return &channel{from: from.idx, attempt: attempt, before: map[checkpoint.ID]int{}}
}

func (c *channel) push(e event) {
	switch e.kind {
	case evRecord:
		c.sent++
		if c.logged {
			c.log = append(c.log, e.rec)
		}
	case evBarrier:
		c.before[e.id] = c.sent
	}
	c.q = append(c.q, e)
}

// pushFront puts barrier e in front of the queued records and end of data
// that follow the last queued barrier or cancel marker (those keep their
// order) and returns the records it overtook. It overtakes end of data: an
// exhausted source's channel may hold a backlog before it (replayed channel
// state), and the final checkpoints, which must follow end of data, align.
func (c *channel) pushFront(e event) []record {
	pos := len(c.q)
	for pos > 0 && (c.q[pos-1].kind == evRecord || c.q[pos-1].kind == evEndOfData) {
		pos--
	}
	var overtaken []record
	for _, x := range c.q[pos:] {
		if x.kind == evRecord {
			overtaken = append(overtaken, x.rec)
		}
	}
	c.before[e.id] = c.sent
	c.q = slices.Insert(c.q, pos, e)
	return overtaken
}

// ---- control messages ----

type msgKind int

const (
	mTrigger msgKind = iota
	mNotify
	mAbort
	mAck
	mDecline
	mExhausted
	mFinished
	mPersisted
)

func (k msgKind) String() string {
	switch k {
	case mTrigger:
		return "trigger"
	case mNotify:
		return "notify"
	case mAbort:
		return "abort"
	case mAck:
		return "ack"
	case mDecline:
		return "decline"
	case mExhausted:
		return "exhausted"
	case mFinished:
		return "finished"
	case mPersisted:
		return "persisted"
	}
	return fmt.Sprintf("msg(%d)", int(k))
}

type msg struct {
	kind    msgKind
	task    checkpoint.TaskID
	id      checkpoint.ID
	handles []checkpoint.Handle
	err     error
	end     bool // mNotify: the final checkpoint; every task ends
	// attempt is the task's attempt (a message to the coordinator) or
	// the attempt the coordinator addresses (a command); with high
	// availability it is numbered from the term's epoch.
	attempt uint64
	from    *leader // a command's sender, for the invariants; tasks compare attempts
}

// ---- the simulated external world: storage and the sink's target ----

// store is durable checkpoint storage; it survives process crashes.
type store struct {
	maxReserved checkpoint.ID
	metadata    map[checkpoint.ID][]byte
	durable     map[checkpoint.ID]bool // every id whose metadata was ever written
}

func (st *store) write(m *checkpoint.Metadata) {
	st.metadata[m.ID] = encode(m)
	st.durable[m.ID] = true
}

func (st *store) latest() (*checkpoint.Metadata, error) {
	var best checkpoint.ID
	for id := range st.metadata {
		best = max(best, id)
	}
	if best == 0 {
		return nil, nil
	}
	return checkpoint.Decode(st.metadata[best])
}

// external is the sink's transactional target; it survives everything.
type external struct {
	prepared  map[checkpoint.ID][]record
	committed map[checkpoint.ID]bool
	output    []record
}

func (x *external) commit(txn checkpoint.ID) {
	if x.committed[txn] {
		return
	}
	recs, ok := x.prepared[txn]
	if !ok {
		return
	}
	x.committed[txn] = true
	x.output = append(x.output, recs...)
	delete(x.prepared, txn)
}

// ---- tasks ----

type taskKind int

const (
	kSource taskKind = iota
	kCounter
	kUnion
	kSink
)

type taskState struct {
	Offset  int             `json:"offset,omitempty"`  // source
	Counts  map[int]int     `json:"counts,omitempty"`  // counter
	Passed  [2]int          `json:"passed,omitempty"`  // union
	Pending []checkpoint.ID `json:"pending,omitempty"` // sink: prepared transactions
	// Channel state of an unaligned checkpoint: per input, the records
	// read after the snapshot and before the input's barrier; per output,
	// the records the barrier overtook.
	In  [][]record `json:"in,omitempty"`
	Out [][]record `json:"out,omitempty"`
}

// chanSnap is a task's unaligned snapshot of one checkpoint, from the
// snapshot until its channel state is complete (and then kept for the
// consistent-cut check). An aligned snapshot has none.
type chanSnap struct {
	id         checkpoint.ID
	state      taskState // operator state frozen at the snapshot
	taken      bool      // the snapshot was taken
	declined   bool      // the snapshot was declined: nothing is persisted
	in, out    [][]record
	outCh      []*channel // the channel of each out (a task's outputs may change after: a takeover)
	persisting []bool
	skip       []int // PersistArrivalsOnly: records not persisted, per input
	complete   bool
}

type task struct {
	id      checkpoint.TaskID
	idx     int     // its index in taskIDs
	lead    *leader // the coordinator it reports to
	attempt uint64  // its deployment
	kind    taskKind
	inputs  []*channel
	outputs []*channel
	aligner Aligner
	state   taskState
	buffer  []record // sink: records of the open transaction
	// consumed counts records read per input; ended marks inputs that
	// delivered end of data.
	consumed   []int
	ended      []bool
	inputEnded bool // end of data on every input (a source: input exhausted) was handled
	finished   bool
	fenced     bool // its worker lost the coordinator, or it was stopped: it does nothing more
	mailbox    []msg
	// snapshots taken in this deployment: consumed counts per input
	cuts map[checkpoint.ID][]int
	// chans holds this deployment's unaligned snapshots; pending those
	// whose channel state is not complete.
	chans   map[checkpoint.ID]*chanSnap
	pending []*chanSnap
}
