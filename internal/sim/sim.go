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
package sim

import (
	"fmt"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/checkpoint/barrier"
)

// Coordinator is what the simulation needs of the checkpoint coordinator; a
// test may wrap the real one to plant a bug.
type Coordinator interface {
	Start(now time.Time)
	Tick(now time.Time)
	Acknowledge(task checkpoint.TaskID, id checkpoint.ID, hs []checkpoint.Handle) checkpoint.AckResult
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
}

// Config is one simulation run.
type Config struct {
	Seed int64
	Mode barrier.Mode
	// RecordsPerSource and Keys size the input; zero picks from the seed.
	RecordsPerSource int
	Keys             int
	// MaxFaults bounds crashes and injected failures; after them the run
	// must finish. Zero picks from the seed.
	MaxFaults int
	// NewAligner and WrapCoordinator replace the real cores, for tests that
	// check the simulation catches planted bugs. Nil means the real ones.
	NewAligner      func(mode barrier.Mode, channels int) Aligner
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
	// Trace, if set, receives a line per scheduling decision.
	Trace func(string)
}

// Result summarises a run that held every invariant.
type Result struct {
	Steps, TaskCrashes, ProcessCrashes, Partitions, Zombies, Completed, Aborted int
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

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

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
	from   checkpoint.TaskID
	q      []event
	sent   int
	before map[checkpoint.ID]int
}

func newChannel(from checkpoint.TaskID) *channel {
	return &channel{from: from, before: map[checkpoint.ID]int{}}
}

func (c *channel) push(e event) {
	switch e.kind {
	case evRecord:
		c.sent++
	case evBarrier:
		c.before[e.id] = c.sent
	}
	c.q = append(c.q, e)
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

type msg struct {
	kind    msgKind
	task    checkpoint.TaskID
	id      checkpoint.ID
	handles []checkpoint.Handle
	err     error
	end     bool // mNotify: the final checkpoint; every task ends
	epoch   int  // the deployment of the task that sent it
}

// ---- the simulated external world: storage and the sink's target ----

// store is durable checkpoint storage; it survives process crashes.
type store struct {
	maxReserved checkpoint.ID
	metadata    map[checkpoint.ID][]byte
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
}

type task struct {
	id      checkpoint.TaskID
	epoch   int // its deployment
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
	fenced     bool // its worker lost the coordinator: it does nothing more
	mailbox    []msg
	// snapshots taken in this deployment: consumed counts per input
	cuts map[checkpoint.ID][]int
}
