package runtime

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
)

// TaskStats are one subtask's counters in one attempt. Its goroutine
// writes them once per batch or wait, never per record; the API reads them
// at any time. A nil *TaskStats counts nothing.
type TaskStats struct {
	task    checkpoint.TaskID
	attempt int
	started time.Time

	in, out             atomic.Int64
	idle, backPressured atomic.Int64 // nanoseconds
	watermark           atomic.Int64
	commits, commitTime atomic.Int64 // a sink's; nanoseconds
	inputCapacity       atomic.Int32 // buffer debloating's; 0: not debloated
	state               atomic.Int32 // a TaskState
	ended               atomic.Int64 // nanoseconds from started to its end, once state says it ended
	// netIn and netOut are its channels to and from other processes,
	// whose bytes Read sums; set before the task runs.
	netIn, netOut []ByteCounter

	// barrier is its progress through its newest checkpoint. NB: a mutex,
	// not atomics, so that a reading is never torn between two
	// checkpoints; it is taken once per barrier or snapshot, and by a
	// reading.
	barrierMu sync.Mutex
	barrier   BarrierProgress
}

// BarrierProgress is a subtask's way through the newest checkpoint it
// took part in, as its task publishes it (once per barrier and per
// snapshot, never per record). The zero value: no checkpoint yet in this
// attempt.
type BarrierProgress struct {
	// ID is the newest checkpoint whose first barrier (a source: its
	// trigger) the subtask received; Since is when.
	ID    checkpoint.ID
	Since time.Time
	// Barriers counts the input channels whose barrier of ID came, of
	// Channels, all the subtask's input channels (0: a source).
	Barriers, Channels int
	// Unaligned: its snapshot of ID is unaligned; Switched: it began
	// aligned, and the aligned-checkpoint timeout switched it.
	Unaligned, Switched bool
	// Done: the subtask is through ID's barriers: it took its snapshot,
	// with its channel state complete when unaligned, and is writing its
	// state; its acknowledgement follows. NB: an aligned snapshot is
	// taken when the barriers of the channels that have not ended came,
	// so Barriers may stay below Channels.
	Done bool
}

// barrierArrived notes checkpoint id's barrier on one of channels input
// channels at now.
func (s *TaskStats) barrierArrived(id checkpoint.ID, channels int, now time.Time) {
	if s == nil {
		return
	}
	s.barrierMu.Lock()
	defer s.barrierMu.Unlock()
	switch b := &s.barrier; {
	case id > b.ID:
		*b = BarrierProgress{ID: id, Since: now, Barriers: 1, Channels: channels}
	case id == b.ID:
		b.Barriers = min(b.Barriers+1, b.Channels)
	}
}

// triggered notes that a source took checkpoint id's trigger at now.
func (s *TaskStats) triggered(id checkpoint.ID, now time.Time) {
	if s == nil {
		return
	}
	s.barrierMu.Lock()
	defer s.barrierMu.Unlock()
	if id > s.barrier.ID {
		s.barrier = BarrierProgress{ID: id, Since: now}
	}
}

// snapshotted notes the subtask's snapshot of checkpoint id; done says it
// is through id's barriers (BarrierProgress.Done).
func (s *TaskStats) snapshotted(id checkpoint.ID, unaligned, switched, done bool) {
	if s == nil {
		return
	}
	s.barrierMu.Lock()
	defer s.barrierMu.Unlock()
	if b := &s.barrier; b.ID == id {
		b.Unaligned, b.Switched, b.Done = unaligned, switched, b.Done || done
	}
}

// barriersDone notes that an unaligned snapshot of checkpoint id has all
// its channel state.
func (s *TaskStats) barriersDone(id checkpoint.ID) {
	if s == nil {
		return
	}
	s.barrierMu.Lock()
	defer s.barrierMu.Unlock()
	if s.barrier.ID == id {
		s.barrier.Done = true
	}
}

func (s *TaskStats) barrierProgress() BarrierProgress {
	s.barrierMu.Lock()
	defer s.barrierMu.Unlock()
	return s.barrier
}

// TaskState is where a subtask is in its life.
type TaskState int32

const (
	StateRunning   TaskState = iota // built, running
	StateFinished                   // its input ended and the final checkpoint completed
	StateFailed                     // it failed: the attempt restarts
	StateCancelled                  // its attempt was stopped
)

func (s TaskState) String() string {
	switch s {
	case StateRunning:
		return "running"
	case StateFinished:
		return "finished"
	case StateFailed:
		return "failed"
	case StateCancelled:
		return "cancelled"
	}
	return fmt.Sprintf("state(%d)", int32(s))
}

// end records that the task ended at in state st: its uptime stops there,
// and with it its busy time.
func (s *TaskStats) end(st TaskState, at time.Time) {
	if s != nil {
		s.ended.Store(int64(at.Sub(s.started)))
		s.state.Store(int32(st))
	}
}

// uptime is the task's time from its start to now, or to its end.
func (s *TaskStats) uptime(now time.Time) time.Duration {
	if TaskState(s.state.Load()) != StateRunning { // stored after ended
		return time.Duration(s.ended.Load())
	}
	return now.Sub(s.started)
}

// AddIn counts n records entering the task: read by its source, or taken
// by its head from its inputs.
func (s *TaskStats) AddIn(n int) {
	if s != nil {
		s.in.Add(int64(n))
	}
}

func (s *TaskStats) addOut(n int) {
	if s != nil {
		s.out.Add(int64(n))
	}
}

func (s *TaskStats) addIdle(d time.Duration) {
	if s != nil {
		s.idle.Add(int64(d))
	}
}

func (s *TaskStats) addBackPressure(d time.Duration) {
	if s != nil {
		s.backPressured.Add(int64(d))
	}
}

func (s *TaskStats) addCommit(d time.Duration) {
	if s != nil {
		s.commits.Add(1)
		s.commitTime.Add(int64(d))
	}
}

func (s *TaskStats) setInputCapacity(n int) {
	if s != nil {
		s.inputCapacity.Store(int32(n))
	}
}

func (s *TaskStats) setWatermark(wm int64) {
	if s != nil {
		s.watermark.Store(wm)
	}
}

// SubtaskStats is a reading of a subtask's counters since it started. Its
// busy time is its Uptime less Idle (waiting for input or a timer) and
// BackPressured (waiting for room downstream).
type SubtaskStats struct {
	Task    checkpoint.TaskID
	Attempt int
	State   TaskState
	Uptime  time.Duration
	// In counts the records it read (a source) or took from its inputs;
	// Out the records it sent downstream (a record broadcast to n channels
	// counts n times).
	In, Out             int64
	Idle, BackPressured time.Duration
	// Watermark is its event-time watermark in milliseconds since the
	// epoch; operator.MinTime while it has none.
	Watermark int64
	// Commits counts the completed checkpoints a subtask ending in a sink
	// committed, and CommitTime is the time they took.
	Commits    int64
	CommitTime time.Duration
	// InputCapacity is the events each of its input channels may hold,
	// as buffer debloating last sized them; 0 while it has not.
	InputCapacity int
	// BytesIn and BytesOut are the bytes its channels received from and
	// sent to other processes (ByteCounter): every event's frame,
	// batches, barriers and watermarks, headers included. Channels within
	// a process pass batches by reference and count nothing: a job in
	// one process counts 0.
	BytesIn, BytesOut int64
	// Barrier is its progress through the newest checkpoint it took part
	// in: with the coordinator's acknowledgements (Stats.Pending), what
	// the tasks of a checkpoint in flight are doing.
	Barrier BarrierProgress
}

// Busy is the time the subtask worked.
func (s SubtaskStats) Busy() time.Duration { return max(s.Uptime-s.Idle-s.BackPressured, 0) }

// Stats holds the counters of the subtasks of a job: those running in this
// process (live), and those a cluster's workers reported (Report). A
// subtask's entry stays, with its last values, until a later attempt
// replaces it. In the process that runs the job's driver it also holds the
// checkpoints in flight (Pending). It is safe for concurrent use.
type Stats struct {
	mu       sync.Mutex
	live     map[checkpoint.TaskID]*TaskStats
	reported map[checkpoint.TaskID]SubtaskStats
	// pending is what the driver last published; never changed after.
	pending []checkpoint.PendingCheckpoint
}

// Pending returns the checkpoints in flight as the job's driver last
// published them (checkpoint.Coordinator.Pending), ascending by id: it
// publishes when one is triggered, completes or aborts, and, at its next
// tick, after acknowledgements. Empty in a process that does not run the
// driver, and once the run ended. The caller must not modify them.
func (r *Stats) Pending() []checkpoint.PendingCheckpoint {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pending
}

// setPending publishes the checkpoints in flight; p is not changed after.
func (r *Stats) setPending(p []checkpoint.PendingCheckpoint) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending = p
}

// NewStats returns an empty registry.
func NewStats() *Stats {
	return &Stats{live: map[checkpoint.TaskID]*TaskStats{}, reported: map[checkpoint.TaskID]SubtaskStats{}}
}

// start registers task's counters for attempt, with its channels to and
// from other processes; nil when r is nil.
func (r *Stats) start(task checkpoint.TaskID, attempt int, now time.Time, netIn, netOut []ByteCounter) *TaskStats {
	if r == nil {
		return nil
	}
	s := &TaskStats{task: task, attempt: attempt, started: now, netIn: netIn, netOut: netOut}
	s.watermark.Store(operator.MinTime)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.live[task] = s
	delete(r.reported, task)
	return s
}

// Report records readings of subtasks running elsewhere.
func (r *Stats) Report(ss []SubtaskStats) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range ss {
		if old, ok := r.reported[s.Task]; ok && old.Attempt > s.Attempt {
			continue // a late report of an earlier attempt
		}
		r.reported[s.Task] = s
		delete(r.live, s.Task)
	}
}

// Read returns a reading of every subtask, ordered by task, as of now.
func (r *Stats) Read(now time.Time) []SubtaskStats {
	r.mu.Lock()
	out := make([]SubtaskStats, 0, len(r.live)+len(r.reported))
	for _, s := range r.live {
		out = append(out, SubtaskStats{
			Task: s.task, Attempt: s.attempt, State: TaskState(s.state.Load()), Uptime: s.uptime(now),
			In: s.in.Load(), Out: s.out.Load(),
			Idle: time.Duration(s.idle.Load()), BackPressured: time.Duration(s.backPressured.Load()),
			Watermark: s.watermark.Load(), Commits: s.commits.Load(), CommitTime: time.Duration(s.commitTime.Load()),
			InputCapacity: int(s.inputCapacity.Load()), BytesIn: sumBytes(s.netIn), BytesOut: sumBytes(s.netOut), Barrier: s.barrierProgress(),
		})
	}
	for _, s := range r.reported {
		out = append(out, s)
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b SubtaskStats) int {
		if c := strings.Compare(a.Task.Vertex, b.Task.Vertex); c != 0 {
			return c
		}
		return a.Task.Subtask - b.Task.Subtask
	})
	return out
}

func sumBytes(cs []ByteCounter) int64 {
	var n int64
	for _, c := range cs {
		n += c.Bytes()
	}
	return n
}
