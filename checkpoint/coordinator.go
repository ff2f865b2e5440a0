package checkpoint

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Job is what the Coordinator knows of the job it serves.
type Job struct {
	Name  string
	Tasks Tasks
	// Operators fingerprint the job in every checkpoint's metadata.
	Operators []Operator
	// Lineage is written into every checkpoint's metadata (Metadata.Lineage).
	Lineage string
}

// Tasks is the set of tasks a job runs.
type Tasks struct {
	// All is every task that acknowledges checkpoints.
	All []TaskID
	// Sources are the tasks that barriers are injected at; a subset of All.
	Sources []TaskID
}

// Restored is what the driver found in checkpoint storage when it built the
// Coordinator.
type Restored struct {
	// MaxID is the highest checkpoint id ever reserved in storage, completed
	// or not; new ids start above it.
	MaxID ID
	// Completed lists the completed checkpoints found, in any order.
	Completed []Completed
	// Damaged lists checkpoints whose metadata cannot be read. Retention
	// discards them once a newer checkpoint completes.
	Damaged []ID
}

// Completed names one completed checkpoint.
type Completed struct {
	ID        ID
	Savepoint bool
}

type runState int

const (
	stateCreated runState = iota
	stateRunning
	stateStopped // a task failed or the job is failing over; awaiting Start
	stateCancelled
)

// recentAbortedLen bounds the memory of aborted ids kept to tell a late
// acknowledgement from a bogus one.
const recentAbortedLen = 64

type pending struct {
	id         ID
	savepoint  bool
	final      bool
	triggered  time.Time
	acked      []bool
	ackedAt    []time.Time // as the driver passed it to Acknowledge
	handles    [][]Handle
	remaining  int
	persisting bool
}

// Coordinator decides when checkpoints are triggered, completed, aborted and
// discarded. It is a deterministic state machine: see the package doc for
// the driver's duties. The zero value is not usable; build one with New.
type Coordinator struct {
	job     string
	lineage string
	ops     []Operator
	cfg     Config
	tasks   []TaskID // sorted
	index   map[TaskID]int
	sources map[TaskID]bool

	state          runState
	lastID         ID
	lastTrigger    time.Time
	lastCompletion time.Time
	completedOnce  bool
	failures       int

	pending   []*pending  // ascending ids; at most MaxConcurrent periodic plus one savepoint
	completed []Completed // retained checkpoints, ascending
	damaged   []ID        // discarded when the next checkpoint completes
	// newestCompleted is the newest checkpoint or savepoint completed; a
	// failure of an older one does not count.
	newestCompleted ID
	latestSavepoint ID
	// savepoints are those completed in this run: a late duplicate
	// acknowledgement of one must not discard its state (isCompleted).
	savepoints    []ID
	recentAborted [recentAbortedLen]ID
	recentNext    int

	exhausted map[TaskID]bool
	finalFrom ID // once every source is exhausted: the least id that can serve as the final checkpoint
	finishing bool
	// held: no periodic trigger (Hold).
	held bool

	out []Action
}

// New builds a Coordinator for job from cfg (defaults filled in, validated)
// and the facts restored from storage.
func New(job Job, cfg Config, r Restored) (*Coordinator, error) {
	cfg, err := cfg.Normalize()
	if err != nil {
		return nil, err
	}
	if job.Name == "" {
		return nil, errors.New("checkpoint coordinator: empty job name")
	}
	tasks := job.Tasks
	if len(tasks.All) == 0 || len(tasks.Sources) == 0 {
		return nil, errors.New("checkpoint coordinator: a job needs at least one task and one source")
	}
	c := &Coordinator{
		job:       job.Name,
		lineage:   job.Lineage,
		ops:       slices.Clone(job.Operators),
		cfg:       cfg,
		tasks:     slices.Clone(tasks.All),
		index:     make(map[TaskID]int, len(tasks.All)),
		sources:   make(map[TaskID]bool, len(tasks.Sources)),
		lastID:    r.MaxID,
		exhausted: map[TaskID]bool{},
	}
	slices.SortFunc(c.tasks, compareTasks)
	for i, t := range c.tasks {
		if _, dup := c.index[t]; dup {
			return nil, fmt.Errorf("checkpoint coordinator: task %s listed twice", t)
		}
		c.index[t] = i
	}
	for _, s := range tasks.Sources {
		if _, ok := c.index[s]; !ok {
			return nil, fmt.Errorf("checkpoint coordinator: source %s is not among the tasks", s)
		}
		c.sources[s] = true
	}
	done := slices.Clone(r.Completed)
	slices.SortFunc(done, func(a, b Completed) int { return cmpID(a.ID, b.ID) })
	c.damaged = slices.Clone(r.Damaged)
	for _, d := range done {
		c.lastID = max(c.lastID, d.ID)
		c.newestCompleted = max(c.newestCompleted, d.ID)
		if d.Savepoint {
			c.latestSavepoint = d.ID
		} else {
			c.completed = append(c.completed, d)
		}
	}
	return c, nil
}

func compareTasks(a, b TaskID) int {
	switch {
	case a == b:
		return 0
	case a.less(b):
		return -1
	}
	return 1
}

func cmpID(a, b ID) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Ready returns the actions decided since the last call, in the order they
// must be carried out. The caller owns the slice.
func (c *Coordinator) Ready() []Action {
	out := c.out
	c.out = nil
	return out
}

// Latest is the newest completed checkpoint or savepoint, if any.
func (c *Coordinator) Latest() (Completed, bool) {
	var l Completed
	if n := len(c.completed); n > 0 {
		l = c.completed[n-1]
	}
	if c.latestSavepoint > l.ID {
		l = Completed{ID: c.latestSavepoint, Savepoint: true}
	}
	return l, l.ID != 0
}

// Retained lists the completed checkpoints (not savepoints) Weir keeps.
func (c *Coordinator) Retained() []Completed { return slices.Clone(c.completed) }

// Forget drops ids from the retained checkpoints without discarding them:
// they are gone from storage already (a restore that fell back past a
// damaged checkpoint deleted it), and must not count toward
// Config.Retained, which would discard one still kept.
func (c *Coordinator) Forget(ids []ID) {
	c.completed = slices.DeleteFunc(c.completed, func(d Completed) bool { return slices.Contains(ids, d.ID) })
}

// PendingIDs lists the checkpoints triggered but not yet completed or
// aborted, ascending.
func (c *Coordinator) PendingIDs() []ID {
	ids := make([]ID, len(c.pending))
	for i, p := range c.pending {
		ids[i] = p.id
	}
	return ids
}

// PendingCheckpoint is a checkpoint triggered and not yet completed or
// aborted, as the Coordinator sees it (Pending). It is a copy: the caller
// may keep it and hand it to other goroutines.
type PendingCheckpoint struct {
	ID        ID
	Savepoint bool
	// Triggered is the time the driver passed to the call that triggered
	// it (Tick, TriggerSavepoint, InputExhausted or Persisted).
	Triggered time.Time
	// Tasks are every task of the job, in TaskID order, with their
	// acknowledgements.
	Tasks []PendingTask
	// Persisting: every task acknowledged, and the driver is writing its
	// metadata (Persist); it no longer expires.
	Persisting bool
}

// Acknowledged counts the tasks that acknowledged p.
func (p PendingCheckpoint) Acknowledged() int {
	n := 0
	for _, t := range p.Tasks {
		if t.Acknowledged {
			n++
		}
	}
	return n
}

// PendingTask is one task of a PendingCheckpoint: whether it acknowledged,
// and At, the time the driver passed to Acknowledge when it did.
type PendingTask struct {
	Task         TaskID
	Acknowledged bool
	At           time.Time
}

// Pending returns the checkpoints triggered but not yet completed or
// aborted, ascending by id: at most MaxConcurrent periodic ones and a
// savepoint, each with every task. It changes nothing; the cost is one
// copy of that.
func (c *Coordinator) Pending() []PendingCheckpoint {
	out := make([]PendingCheckpoint, len(c.pending))
	for i, p := range c.pending {
		ts := make([]PendingTask, len(c.tasks))
		for j, t := range c.tasks {
			ts[j] = PendingTask{Task: t, Acknowledged: p.acked[j], At: p.ackedAt[j]}
		}
		out[i] = PendingCheckpoint{ID: p.id, Savepoint: p.savepoint, Triggered: p.triggered, Tasks: ts, Persisting: p.persisting}
	}
	return out
}

// LastID is the highest id triggered so far (or restored).
func (c *Coordinator) LastID() ID { return c.lastID }

// ConsecutiveFailures is the number of checkpoint failures since the last
// completion or job start.
func (c *Coordinator) ConsecutiveFailures() int { return c.failures }

// Start tells the coordinator that every task is deployed and restored and
// the job runs. The first periodic checkpoint is due one interval later.
// Start after Cancel is a bug.
func (c *Coordinator) Start(now time.Time) {
	if c.state == stateCancelled {
		panic("checkpoint: Start after Cancel")
	}
	c.state = stateRunning
	c.lastTrigger = now
	c.failures = 0
	c.exhausted = map[TaskID]bool{}
	c.finalFrom = 0
	c.finishing = false
}

// Tick lets time pass: pending checkpoints older than the timeout expire and
// a periodic checkpoint is triggered when it is due.
func (c *Coordinator) Tick(now time.Time) {
	for _, p := range slices.Clone(c.pending) {
		if !p.persisting && !now.Before(p.triggered.Add(c.cfg.Timeout)) && c.isPending(p.id) {
			c.abort(p, ReasonExpired, fmt.Errorf("not acknowledged within %v by %s", c.cfg.Timeout, c.missing(p)))
		}
	}
	c.maybeTrigger(now)
}

// TriggerSavepoint triggers a savepoint now, whatever the interval, minimum
// pause and concurrency limit say. At most one savepoint is pending at once.
func (c *Coordinator) TriggerSavepoint(now time.Time) (ID, error) {
	switch {
	case c.state != stateRunning:
		return 0, errors.New("savepoint: the job is not running")
	case c.finishing:
		return 0, errors.New("savepoint: the job is finishing")
	}
	for _, p := range c.pending {
		if p.savepoint {
			return 0, fmt.Errorf("savepoint: savepoint %d is still in progress", p.id)
		}
	}
	return c.trigger(now, true, false), nil
}

// InputExhausted tells the coordinator that a source has read all its input
// and emitted its last record. Once every source has, a final checkpoint is
// triggered as soon as the concurrency limit and minimum pause allow,
// whatever the interval; its NotifyComplete carries EndOfInput.
func (c *Coordinator) InputExhausted(now time.Time, task TaskID) {
	if !c.sources[task] {
		panic(fmt.Sprintf("checkpoint: InputExhausted from %s, which is not a source", task))
	}
	c.exhausted[task] = true
	if len(c.exhausted) == len(c.sources) && c.finalFrom == 0 {
		c.finalFrom = c.lastID + 1
	}
	c.maybeTrigger(now)
}

// Acknowledge records that task wrote its state for checkpoint id; now is
// when the driver received the acknowledgement (Pending tells it).
func (c *Coordinator) Acknowledge(now time.Time, task TaskID, id ID, handles []Handle) AckResult {
	p := c.find(id)
	if p == nil {
		if c.isCompleted(id) {
			return AckDuplicate
		}
		res := AckUnknown
		if id != 0 && slices.Contains(c.recentAborted[:], id) {
			res = AckDiscarded
		}
		if len(handles) > 0 {
			c.emit(DiscardState{ID: id, Task: task, Handles: handles})
		}
		return res
	}
	i, ok := c.index[task]
	if !ok {
		if len(handles) > 0 {
			c.emit(DiscardState{ID: id, Task: task, Handles: handles})
		}
		return AckUnknown
	}
	if p.acked[i] {
		return AckDuplicate
	}
	p.acked[i], p.ackedAt[i] = true, now
	p.handles[i] = handles
	p.remaining--
	if p.remaining == 0 {
		p.persisting = true
		c.emit(Persist{Metadata: c.metadata(p)})
	}
	return AckOK
}

// Decline records that task could not take checkpoint id; it is aborted. A
// cause wrapping ErrSubsumedAtTask does not count as a failure.
func (c *Coordinator) Decline(task TaskID, id ID, cause error) {
	p := c.find(id)
	if p == nil || p.persisting {
		return // already over, or every task has acknowledged: a stale decline
	}
	reason := ReasonDeclined
	if errors.Is(cause, ErrSubsumedAtTask) {
		reason = ReasonSubsumed
	}
	c.abort(p, reason, fmt.Errorf("task %s declined: %w", task, cause))
}

// TriggerFailed reports that the driver could not carry out the Trigger of
// checkpoint id (reserving it in storage failed); it is aborted as declined.
func (c *Coordinator) TriggerFailed(id ID, cause error) {
	if p := c.find(id); p != nil && !p.persisting {
		c.abort(p, ReasonDeclined, fmt.Errorf("could not start: %w", cause))
	}
}

// Persisted reports the outcome of a Persist. Only a nil err completes the
// checkpoint; now is its completion time.
func (c *Coordinator) Persisted(now time.Time, id ID, err error) {
	p := c.find(id)
	if p == nil || !p.persisting {
		panic(fmt.Sprintf("checkpoint: Persisted(%d) without a Persist", id))
	}
	if err != nil {
		c.abort(p, ReasonPersistFailed, err)
		c.maybeTrigger(now)
		return
	}
	c.complete(p, now)
	c.maybeTrigger(now)
}

// TaskFailed aborts every pending checkpoint that is not being persisted and
// stops triggering until the next Start.
func (c *Coordinator) TaskFailed(task TaskID, cause error) {
	c.abortUnpersisted(ReasonTaskFailed, fmt.Errorf("task %s failed: %w", task, cause))
	if c.state != stateCancelled {
		c.state = stateStopped
	}
}

// TaskFinished records that a task ended after its input did. No checkpoint
// is triggered after that; pending ones it has not acknowledged are aborted.
func (c *Coordinator) TaskFinished(task TaskID) {
	i, ok := c.index[task]
	if !ok {
		panic(fmt.Sprintf("checkpoint: TaskFinished from unknown task %s", task))
	}
	c.finishing = true
	for _, p := range slices.Clone(c.pending) {
		if !p.persisting && !p.acked[i] {
			c.abort(p, ReasonTaskFinished, fmt.Errorf("task %s finished before acknowledging", task))
		}
	}
}

// Cancel stops the job for good: pending checkpoints are aborted and, unless
// Config.RetainOnCancel, completed checkpoints are discarded. Savepoints are
// kept. A checkpoint being persisted still reports its outcome.
func (c *Coordinator) Cancel() {
	c.abortUnpersisted(ReasonCancelled, nil)
	c.state = stateCancelled
	if !c.cfg.RetainOnCancel {
		for _, d := range c.completed {
			c.emit(Discard{ID: d.ID})
		}
		c.completed = nil
	}
}

// Hold stops (true) or resumes (false) periodic triggers: a job stopping
// with a savepoint takes no checkpoint after it, which would otherwise
// complete after the savepoint it stopped with and be restored instead.
func (c *Coordinator) Hold(held bool) { c.held = held }

func (c *Coordinator) maybeTrigger(now time.Time) {
	if c.state != stateRunning || c.finishing || c.held {
		return
	}
	periodic := 0
	for _, p := range c.pending {
		if !p.savepoint {
			periodic++
		}
	}
	if periodic >= c.cfg.MaxConcurrent {
		return
	}
	if c.completedOnce && now.Before(c.lastCompletion.Add(c.cfg.MinPause)) {
		return
	}
	// NB: every checkpoint triggered once the input is exhausted is Final,
	// not only the first: any of them may complete first and end the job
	// (notify), so each must align behind the end of data.
	final := c.finalFrom != 0
	due := c.cfg.Interval > 0 && !now.Before(c.lastTrigger.Add(c.cfg.Interval))
	if (final && !c.finalUnderway()) || due {
		c.trigger(now, false, final)
	}
}

// finalUnderway reports whether a checkpoint that can be the final one is
// pending or complete.
func (c *Coordinator) finalUnderway() bool {
	for _, p := range c.pending {
		if p.id >= c.finalFrom && !p.savepoint {
			return true
		}
	}
	n := len(c.completed)
	return n > 0 && c.completed[n-1].ID >= c.finalFrom
}

func (c *Coordinator) trigger(now time.Time, savepoint, final bool) ID {
	c.lastID++
	p := &pending{
		id:        c.lastID,
		savepoint: savepoint,
		final:     final,
		triggered: now,
		acked:     make([]bool, len(c.tasks)),
		ackedAt:   make([]time.Time, len(c.tasks)),
		handles:   make([][]Handle, len(c.tasks)),
		remaining: len(c.tasks),
	}
	c.pending = append(c.pending, p)
	if !savepoint {
		c.lastTrigger = now
	}
	c.emit(Trigger{ID: p.id, Savepoint: savepoint, Final: final, At: now})
	return p.id
}

func (c *Coordinator) complete(p *pending, now time.Time) {
	c.remove(p)
	c.lastCompletion = now
	c.completedOnce = true
	if p.id > c.newestCompleted {
		// Progress ends a run of failures; a checkpoint older than the
		// newest completed (a savepoint that completed late, one a newer
		// completion subsumed) is none, as in Flink's
		// CheckpointFailureManager.
		c.failures = 0
	}
	c.newestCompleted = max(c.newestCompleted, p.id)
	for _, id := range c.damaged {
		c.emit(Discard{ID: id})
	}
	c.damaged = nil
	if p.savepoint {
		c.latestSavepoint = max(c.latestSavepoint, p.id)
		c.savepoints = append(c.savepoints, p.id)
		if c.state != stateCancelled {
			c.emit(c.notify(p))
		}
		return
	}
	if n := len(c.completed); (n > 0 && c.completed[n-1].ID > p.id) || (c.state == stateCancelled && !c.cfg.RetainOnCancel) {
		// A newer checkpoint completed first, or nobody is left to restore
		// from it: it is durable, but not retained.
		c.emit(Discard{ID: p.id})
		return
	}
	c.completed = append(c.completed, Completed{ID: p.id})
	if c.state != stateCancelled {
		c.emit(c.notify(p))
	}
	for _, q := range slices.Clone(c.pending) {
		if q.id < p.id && !q.savepoint && !q.persisting {
			c.abort(q, ReasonSubsumed, fmt.Errorf("checkpoint %d completed", p.id))
		}
	}
	for len(c.completed) > c.cfg.Retained {
		c.emit(Discard{ID: c.completed[0].ID})
		c.completed = c.completed[1:]
	}
}

func (c *Coordinator) notify(p *pending) NotifyComplete {
	return NotifyComplete{ID: p.id, EndOfInput: c.finalFrom != 0 && p.id >= c.finalFrom}
}

func (c *Coordinator) abort(p *pending, reason Reason, cause error) {
	c.remove(p)
	c.recentAborted[c.recentNext] = p.id
	c.recentNext = (c.recentNext + 1) % recentAbortedLen
	c.emit(Abort{ID: p.id, Reason: reason, Cause: cause})
	// The state the tasks wrote for it goes: in a cluster, the workers
	// wrote it, and only their acknowledgements name it to the process
	// that discards (the storage there did not see the writes).
	for i, hs := range p.handles {
		if p.acked[i] && len(hs) > 0 {
			c.emit(DiscardState{ID: p.id, Task: c.tasks[i], Handles: hs})
		}
	}
	if !reason.Counts() || p.savepoint || p.id < c.newestCompleted {
		// A savepoint's failure is the user's to handle; one of a
		// checkpoint older than the newest completed costs nothing, as in
		// Flink.
		return
	}
	c.failures++
	if c.failures > c.cfg.TolerableFailures {
		err := fmt.Errorf("%d consecutive checkpoint failures exceed the %d tolerated; the last: checkpoint %d %s: %w",
			c.failures, c.cfg.TolerableFailures, p.id, reason, cause)
		c.emit(FailJob{Cause: err})
		c.abortUnpersisted(ReasonJobFailing, err)
		c.state = stateStopped
	}
}

func (c *Coordinator) abortUnpersisted(reason Reason, cause error) {
	for _, p := range slices.Clone(c.pending) {
		if !p.persisting && c.isPending(p.id) {
			c.abort(p, reason, cause)
		}
	}
}

func (c *Coordinator) metadata(p *pending) *Metadata {
	m := &Metadata{Job: c.job, Lineage: c.lineage, ID: p.id, Savepoint: p.savepoint, AtLeastOnce: c.cfg.AtLeastOnce, Triggered: p.triggered, Operators: c.ops, Tasks: make([]TaskState, len(c.tasks))}
	for i, t := range c.tasks {
		m.Tasks[i] = TaskState{Task: t, Handles: p.handles[i]}
	}
	return m
}

// missing names the tasks that have not acknowledged p, at most three.
func (c *Coordinator) missing(p *pending) string {
	var names []string
	for i, ok := range p.acked {
		if !ok {
			names = append(names, c.tasks[i].String())
		}
	}
	if len(names) > 3 {
		return fmt.Sprintf("%s and %d more tasks", strings.Join(names[:3], ", "), len(names)-3)
	}
	return strings.Join(names, ", ")
}

func (c *Coordinator) find(id ID) *pending {
	for _, p := range c.pending {
		if p.id == id {
			return p
		}
	}
	return nil
}

func (c *Coordinator) isPending(id ID) bool { return c.find(id) != nil }

func (c *Coordinator) isCompleted(id ID) bool {
	if id == 0 {
		return false
	}
	return id == c.latestSavepoint || slices.Contains(c.savepoints, id) || slices.ContainsFunc(c.completed, func(d Completed) bool { return d.ID == id })
}

func (c *Coordinator) remove(p *pending) {
	c.pending = slices.DeleteFunc(c.pending, func(q *pending) bool { return q == p })
}

func (c *Coordinator) emit(a Action) { c.out = append(c.out, a) }
