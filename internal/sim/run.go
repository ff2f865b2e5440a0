package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/checkpoint/barrier"
)

type sim struct {
	cfg  Config
	rng  *rand.Rand
	res  Result
	step int
	now  time.Time

	records, keys, faultsLeft int
	// failuresLeft bounds the checkpoint failures injected (declines,
	// failed metadata writes); faultsLeft bounds crashes.
	failuresLeft           int
	ckCfg                  checkpoint.Config
	pPersistFail, pDecline float64
	pTaskCrash, pProcCrash float64
	// Savepoints are requested with savepointWeight; a source declines a
	// savepoint with pSavepointDecline (not bounded: it costs nothing).
	savepointWeight   int
	pSavepointDecline float64
	// pSlowWrite is the chance that a metadata write is slow (object
	// storage on a bad day): up to slowWrite, while the others finish at
	// once, and it fails with pSlowFail (a write that hangs, then times
	// out). Slow writes let several checkpoints persist at once and finish
	// out of order.
	pSlowWrite, pSlowFail float64
	slowWrite             time.Duration

	coord Coordinator
	epoch int // deployment number; messages carry it
	tasks []*task
	byID  map[checkpoint.TaskID]*task

	// The network. Tasks run on workers, placed afresh at each deployment.
	// Each worker's link to the coordinator is FIFO each way, as TCP is;
	// the coordinator reads the links in any interleaving. local holds the
	// coordinator's own messages (metadata writes' outcomes).
	workers int
	on      map[checkpoint.TaskID]int
	links   [][]msg
	local   []msg
	// A partition cuts a worker off (cut[w] != nil): what its link holds
	// and whatever is sent on it is lost, and data channels to and from
	// other workers stall. Its tasks run on as zombies until they fence
	// themselves, fenceAfter after the cut (their last answered heartbeat
	// was sent before it); the coordinator declares them lost liveTimeout
	// after it, at the earliest, and fails the job over. A message lost on
	// a link that is not cut is no different: the connection broke, and
	// the same follows (design note 33).
	cut                     []*partition
	pPartition              float64
	fenceAfter, liveTimeout time.Duration
	// zombies are tasks of the previous deployment that run on after a
	// failover until zombieUntil, when their cancellation lands (a slow
	// worker, with pSlowCancel). Messages to and from them carry their
	// deployment's number, the attempt; the coordinator addresses only the
	// current attempt's tasks.
	zombies     []*task
	zombieUntil time.Time
	pSlowCancel float64

	st           store
	ext          external
	persistQ     []write
	maxTriggered checkpoint.ID
	failover     bool
	violation    *Violation

	// A model of the coordinator's failure counting: the failures that
	// count since the last completion or start, the newest checkpoint
	// completed, and which checkpoints are savepoints.
	counted    int
	newest     checkpoint.ID
	savepoints map[checkpoint.ID]bool
}

var errInjected = errors.New("injected failure")

func newSim(cfg Config) *sim {
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x9e3779b97f4a7c15))
	s := &sim{cfg: cfg, rng: rng, now: epoch}
	s.records = cfg.RecordsPerSource
	if s.records == 0 {
		s.records = 10 + rng.IntN(400)
	}
	s.keys = cfg.Keys
	if s.keys == 0 {
		s.keys = 1 + rng.IntN(6)
	}
	s.faultsLeft = cfg.MaxFaults
	if s.faultsLeft == 0 {
		s.faultsLeft = rng.IntN(7)
	}
	s.failuresLeft = rng.IntN(40)
	s.ckCfg = checkpoint.Config{
		Interval:          time.Duration(2+rng.IntN(12)) * time.Millisecond,
		Timeout:           time.Duration(40+rng.IntN(400)) * time.Millisecond,
		MaxConcurrent:     2 + rng.IntN(3),
		TolerableFailures: rng.IntN(3),
		Retained:          1 + rng.IntN(3),
	}
	if rng.IntN(8) == 0 {
		s.ckCfg.MaxConcurrent = 1
		s.ckCfg.MinPause = time.Duration(rng.IntN(20)) * time.Millisecond
	}
	s.pPersistFail = 0.5 * rng.Float64()
	s.pDecline = 0.1 * rng.Float64()
	s.savepointWeight = []int{0, 1, 1, 2}[rng.IntN(4)]
	s.pSavepointDecline = 0.8 * rng.Float64()
	s.pSlowWrite = 0.2 + 0.6*rng.Float64()
	s.pSlowFail = 0.3 + 0.7*rng.Float64()
	s.slowWrite = time.Duration(4+rng.IntN(16)) * s.ckCfg.Interval
	s.pTaskCrash = 0.004 * rng.Float64()
	s.pProcCrash = 0.002 * rng.Float64()
	s.workers = 1 + rng.IntN(3)
	s.pPartition = 0.003 * rng.Float64()
	s.liveTimeout = time.Duration(10+rng.IntN(100)) * time.Millisecond
	s.fenceAfter = s.liveTimeout * 3 / 4
	s.pSlowCancel = 0.5 * rng.Float64()
	if cfg.NotifyZombies {
		s.pSlowCancel = 1
	}
	if cfg.FenceAfter != 0 {
		s.fenceAfter = time.Duration(cfg.FenceAfter * float64(s.liveTimeout))
	}
	s.st = store{metadata: map[checkpoint.ID][]byte{}}
	s.ext = external{prepared: map[checkpoint.ID][]record{}, committed: map[checkpoint.ID]bool{}}
	s.savepoints = map[checkpoint.ID]bool{}
	return s
}

func (s *sim) trace(format string, args ...any) {
	if s.cfg.Trace != nil {
		s.cfg.Trace(fmt.Sprintf("%5d %4dms ", s.step, s.now.Sub(epoch).Milliseconds()) + fmt.Sprintf(format, args...))
	}
}

func (s *sim) fail(format string, args ...any) {
	if s.violation == nil {
		s.violation = &Violation{Seed: s.cfg.Seed, Step: s.step, What: fmt.Sprintf(format, args...)}
	}
}

// fault reports whether to crash now, with probability p, within the
// budget of crashes.
func (s *sim) fault(p float64) bool {
	if s.faultsLeft > 0 && s.rng.Float64() < p {
		s.faultsLeft--
		return true
	}
	return false
}

// failure reports whether to fail a checkpoint now, with probability p,
// within the budget of checkpoint failures.
func (s *sim) failure(p float64) bool {
	if s.failuresLeft > 0 && s.rng.Float64() < p {
		s.failuresLeft--
		return true
	}
	return false
}

var taskIDs = []checkpoint.TaskID{
	{Vertex: "src", Subtask: 0}, {Vertex: "src", Subtask: 1},
	{Vertex: "cnt", Subtask: 0}, {Vertex: "cnt", Subtask: 1},
	{Vertex: "union", Subtask: 0}, {Vertex: "sink", Subtask: 0},
}

var operators = []checkpoint.Operator{
	{UID: "src", Kind: "source", MaxParallelism: 2}, {UID: "cnt", Kind: "keyed-process", MaxParallelism: 2},
	{UID: "union", Kind: "union", MaxParallelism: 1}, {UID: "sink", Kind: "sink", MaxParallelism: 1},
}

func (s *sim) newCoordinator() {
	restored := checkpoint.Restored{MaxID: s.st.maxReserved}
	s.newest, s.counted = 0, 0
	for id := range s.st.metadata {
		restored.Completed = append(restored.Completed, checkpoint.Completed{ID: id, Savepoint: s.savepoints[id]})
		s.newest = max(s.newest, id)
	}
	job := checkpoint.Job{Name: "sim", Tasks: checkpoint.Tasks{All: taskIDs, Sources: taskIDs[:2]}, Operators: operators}
	c, err := checkpoint.New(job, s.ckCfg, restored)
	if err != nil {
		panic(err)
	}
	s.coord = c
	if s.cfg.WrapCoordinator != nil {
		s.coord = s.cfg.WrapCoordinator(c, s.ckCfg)
	}
	s.links, s.local = make([][]msg, s.workers), nil
}

func (s *sim) newAligner(channels int) Aligner {
	if s.cfg.NewAligner != nil {
		return s.cfg.NewAligner(s.cfg.Mode, channels)
	}
	return barrier.New(s.cfg.Mode, channels)
}

// deploy builds every task afresh from the latest durable checkpoint.
func (s *sim) deploy() {
	s.epoch++
	meta, err := s.st.latest()
	if err != nil {
		s.fail("latest checkpoint unreadable: %v", err)
		return
	}
	if l, ok := s.coord.Latest(); ok != (meta != nil) || (meta != nil && l.ID != meta.ID) {
		s.fail("coordinator's latest checkpoint %v (%v) differs from storage's %v", l.ID, ok, meta)
	}
	s.tasks = make([]*task, len(taskIDs))
	s.byID = map[checkpoint.TaskID]*task{}
	// A failover heals partitions: a worker that returns is used again.
	s.cut = make([]*partition, s.workers)
	s.on = map[checkpoint.TaskID]int{}
	for _, id := range taskIDs {
		s.on[id] = s.rng.IntN(s.workers)
	}
	for i, id := range taskIDs {
		t := &task{id: id, epoch: s.epoch, cuts: map[checkpoint.ID][]int{}}
		switch id.Vertex {
		case "src":
			t.kind = kSource
		case "cnt":
			t.kind = kCounter
		case "union":
			t.kind = kUnion
		case "sink":
			t.kind = kSink
		}
		t.state.Counts = map[int]int{}
		if meta != nil {
			for _, ts := range meta.Tasks {
				if ts.Task == id && len(ts.Handles) == 1 {
					if err := json.Unmarshal(ts.Handles[0].Inline, &t.state); err != nil {
						s.fail("restore %s: %v", id, err)
					}
				}
			}
		}
		s.tasks[i] = t
		s.byID[id] = t
	}
	src, cnt, union, sink := s.tasks[0:2], s.tasks[2:4], s.tasks[4], s.tasks[5]
	for _, sr := range src {
		for _, c := range cnt {
			ch := newChannel(sr.id)
			sr.outputs = append(sr.outputs, ch)
			c.inputs = append(c.inputs, ch)
		}
	}
	for _, c := range cnt {
		ch := newChannel(c.id)
		c.outputs = []*channel{ch}
		union.inputs = append(union.inputs, ch)
	}
	ch := newChannel(union.id)
	union.outputs = []*channel{ch}
	sink.inputs = []*channel{ch}
	for _, t := range s.tasks {
		if t.kind != kSource {
			t.aligner = s.newAligner(len(t.inputs))
			t.consumed = make([]int, len(t.inputs))
			t.ended = make([]bool, len(t.inputs))
		}
	}
	// The sink commits the transactions its snapshot recorded (commit is
	// idempotent) and aborts every other one it had prepared.
	for _, txn := range sink.state.Pending {
		s.ext.commit(txn)
	}
	sink.state.Pending = nil
	for txn := range s.ext.prepared {
		delete(s.ext.prepared, txn)
	}
	s.coord.Start(s.now)
	s.counted = 0
	for _, sr := range src {
		s.maybeExhausted(sr)
	}
	s.drainCoord()
}

// toCoord sends m from task t to the coordinator, on the link of the
// task's worker.
func (s *sim) toCoord(t *task, m msg) {
	m.task, m.epoch = t.id, t.epoch
	w := s.on[m.task]
	if s.cut[w] != nil {
		s.trace("lost (worker %d cut off): %s %v", w, m.task, m.kind)
		return
	}
	s.links[w] = append(s.links[w], m)
}

// toTask sends m from the coordinator to task t, on its worker's link.
func (s *sim) toTask(t *task, m msg) {
	if w := s.on[t.id]; s.cut[w] != nil {
		s.trace("lost (worker %d cut off): %v to %s", w, m.kind, t.id)
		return
	}
	t.mailbox = append(t.mailbox, m)
}

// maybeExhausted ends a source's input once it has emitted every record.
func (s *sim) maybeExhausted(t *task) {
	if t.state.Offset == s.records && !t.inputEnded {
		s.endInput(t)
		s.toCoord(t, msg{kind: mExhausted})
	}
}

// endInput: every input of t ended. It sends end of data downstream and
// takes part in checkpoints until the final one completes.
func (s *sim) endInput(t *task) {
	t.inputEnded = true
	s.broadcast(t, event{kind: evEndOfData})
}

func (s *sim) run() error {
	s.newCoordinator()
	s.deploy()
	for ; s.violation == nil; s.step++ {
		if s.step > maxSteps {
			s.fail("no end after %d steps (livelock?)", maxSteps)
			break
		}
		if s.allFinished() {
			break
		}
		switch {
		case s.fault(s.pProcCrash):
			s.processCrash()
			continue
		case s.fault(s.pTaskCrash):
			s.taskCrash(s.tasks[s.rng.IntN(len(s.tasks))])
			continue
		case s.fault(s.pPartition):
			s.partition(s.rng.IntN(s.workers))
			continue
		}
		s.schedule()
		if s.failover {
			s.failover = false
			s.restart()
		}
	}
	if s.violation == nil {
		s.checkOutput()
	}
	s.res.Steps = s.step
	if s.violation != nil {
		return s.violation
	}
	return nil
}

func (s *sim) allFinished() bool {
	for _, t := range s.tasks {
		if !t.finished {
			return false
		}
	}
	return true
}

type choice struct {
	weight int
	do     func()
}

func (s *sim) schedule() {
	var cs []choice
	for _, t := range slices.Concat(s.tasks, s.zombies) {
		if t.finished || t.fenced {
			continue
		}
		if t.kind == kSource && !t.inputEnded {
			cs = append(cs, choice{4, func() { s.emit(t) }})
		}
		for c, in := range t.inputs {
			if len(in.q) > 0 && !t.aligner.Blocked(c) && !s.stalled(in, t) {
				cs = append(cs, choice{4, func() { s.process(t, c) }})
			}
		}
		if len(t.mailbox) > 0 {
			cs = append(cs, choice{2, func() { s.deliverTask(t) }})
		}
	}
	for w, l := range s.links {
		if len(l) > 0 {
			cs = append(cs, choice{3, func() { s.deliverCoord(w) }})
		}
	}
	if len(s.local) > 0 {
		cs = append(cs, choice{3, func() { s.deliverCoord(-1) }})
	}
	if slices.ContainsFunc(s.persistQ, s.written) {
		cs = append(cs, choice{2, s.persist})
	}
	if s.savepointWeight > 0 {
		cs = append(cs, choice{s.savepointWeight, s.savepoint})
	}
	cs = append(cs, choice{1, s.tick})
	total := 0
	for _, c := range cs {
		total += c.weight
	}
	n := s.rng.IntN(total)
	for _, c := range cs {
		if n < c.weight {
			c.do()
			return
		}
		n -= c.weight
	}
}

func (s *sim) tick() {
	s.now = s.now.Add(time.Duration(1+s.rng.IntN(5)) * time.Millisecond)
	s.coord.Tick(s.now)
	s.drainCoord()
	s.liveness()
}

// partition is a worker cut off from the coordinator and the other
// workers since at.
type partition struct{ at time.Time }

// stalled says whether channel in, read by t, crosses a partition: its
// events wait.
func (s *sim) stalled(in *channel, t *task) bool {
	from, to := s.on[in.from], s.on[t.id]
	return from != to && (s.cut[from] != nil || s.cut[to] != nil)
}

// partition cuts worker w off: its link loses what it holds.
func (s *sim) partition(w int) {
	if s.cut[w] != nil {
		return
	}
	s.res.Partitions++
	s.trace("worker %d cut off", w)
	s.cut[w] = &partition{at: s.now}
	s.links[w] = nil
	for _, t := range s.tasks {
		if s.on[t.id] == w {
			t.mailbox = nil
		}
	}
}

// liveness plays the heartbeats' consequences of partitions: a cut-off
// worker's tasks fence themselves fenceAfter after the cut; the
// coordinator declares them lost liveTimeout after it, and fails over.
func (s *sim) liveness() {
	if s.zombies != nil && !s.now.Before(s.zombieUntil) {
		s.trace("the previous deployment's last tasks are cancelled")
		s.zombies = nil
	}
	for w, p := range s.cut {
		if p == nil {
			continue
		}
		if !s.now.Before(p.at.Add(s.fenceAfter)) {
			for _, t := range s.tasks {
				if s.on[t.id] == w && !t.fenced {
					t.fenced = true
					s.trace("%s fences itself (worker %d lost the coordinator)", t.id, w)
				}
			}
		}
		if s.now.Before(p.at.Add(s.liveTimeout)) {
			continue
		}
		for _, t := range s.tasks {
			if s.on[t.id] == w && !t.fenced && !t.finished {
				s.fail("worker %d declared lost while its task %s runs on", w, t.id)
				return
			}
		}
		s.trace("coordinator: worker %d lost", w)
		for _, t := range s.tasks {
			if s.on[t.id] == w && !t.finished {
				s.coord.TaskFailed(t.id, errInjected)
				s.drainCoord()
				s.restart()
				return
			}
		}
		s.cut[w] = nil // only finished tasks were there
	}
}

// savepoint asks for a savepoint, which the coordinator triggers at once
// beside any periodic checkpoint in flight.
func (s *sim) savepoint() {
	if id, err := s.coord.TriggerSavepoint(s.now); err == nil {
		s.trace("savepoint %d requested", id)
	}
	s.drainCoord()
}

func keyOf(src, seq, keys int) int { return (src*7919 + seq*31) % keys }

func (s *sim) emit(t *task) {
	r := record{Src: t.id.Subtask, Seq: t.state.Offset}
	r.Key = keyOf(r.Src, r.Seq, s.keys)
	t.outputs[r.Key%2].push(event{kind: evRecord, rec: r})
	t.state.Offset++
	s.maybeExhausted(t)
}

func (s *sim) process(t *task, c int) {
	in := t.inputs[c]
	e := in.q[0]
	in.q = in.q[1:]
	switch e.kind {
	case evRecord:
		t.consumed[c]++
		r := e.rec
		switch t.kind {
		case kCounter:
			t.state.Counts[r.Key]++
			r.Count = t.state.Counts[r.Key]
			t.outputs[0].push(event{kind: evRecord, rec: r})
		case kUnion:
			t.state.Passed[c]++
			t.outputs[0].push(event{kind: evRecord, rec: r})
		case kSink:
			t.buffer = append(t.buffer, r)
		}
	case evBarrier:
		s.align(t, 0, func() []barrier.Action { return t.aligner.OnBarrier(c, e.id) })
	case evCancel:
		s.align(t, 0, func() []barrier.Action { return t.aligner.OnCancel(c, e.id) })
	case evEndOfData:
		if t.ended[c] {
			s.fail("%s: end of data twice on input %d", t.id, c)
		}
		t.ended[c] = true
		if !slices.Contains(t.ended, false) {
			s.endInput(t)
		}
	}
}

// align calls the aligner of t (aborted is the checkpoint the call aborts,
// if it is an abort), checks that no alignment ended silently, and carries
// out its actions: an alignment ends with the snapshot, a decline, a
// forwarded cancel marker, or the coordinator's abort of that very
// checkpoint. One that vanishes otherwise leaves the coordinator waiting
// for the timeout.
func (s *sim) align(t *task, aborted checkpoint.ID, call func() []barrier.Action) {
	before := t.aligner.Aligning()
	acts := slices.Clone(call())
	after := t.aligner.Aligning()
	for _, id := range before {
		if id == aborted || slices.Contains(after, id) {
			continue
		}
		if !slices.ContainsFunc(acts, func(a barrier.Action) bool {
			switch a := a.(type) {
			case barrier.Snapshot:
				return a.ID >= id
			case barrier.Decline:
				return a.ID == id
			case barrier.ForwardCancel:
				return a.ID == id
			}
			return false
		}) {
			s.fail("%s: the alignment of checkpoint %d ended silently (abort of %d: %v)", t.id, id, aborted, acts)
			return
		}
	}
	for _, a := range acts {
		switch a := a.(type) {
		case barrier.Block, barrier.UnblockAll:
			// The scheduler asks the aligner which channels it may read.
		case barrier.Snapshot:
			s.snapshot(t, a.ID)
		case barrier.Forward:
			s.broadcast(t, event{kind: evBarrier, id: a.ID})
		case barrier.Decline:
			s.toCoord(t, msg{kind: mDecline, id: a.ID, err: a.Cause})
		case barrier.ForwardCancel:
			s.broadcast(t, event{kind: evCancel, id: a.ID})
		}
	}
}

func (s *sim) broadcast(t *task, e event) {
	for _, o := range t.outputs {
		o.push(e)
	}
}

// snapshot takes task t's snapshot for checkpoint id and acknowledges it,
// or declines it when a failure is injected; it reports which.
func (s *sim) snapshot(t *task, id checkpoint.ID) bool {
	if s.failure(s.pDecline) || (t.kind == kSource && s.savepoints[id] && s.rng.Float64() < s.pSavepointDecline) {
		s.trace("%s declines %d (injected)", t.id, id)
		s.toCoord(t, msg{kind: mDecline, id: id, err: errInjected})
		return false
	}
	t.cuts[id] = slices.Clone(t.consumed)
	if t.kind == kSink {
		s.ext.prepared[id] = t.buffer
		t.buffer = nil
		t.state.Pending = append(t.state.Pending, id)
	}
	data, err := json.Marshal(&t.state)
	if err != nil {
		panic(err)
	}
	h := checkpoint.Handle{Operator: t.id.Vertex, Subtask: t.id.Subtask, Parallelism: 2, Kind: "state", Inline: data, SizeBytes: int64(len(data))}
	if t.id.Vertex == "union" || t.id.Vertex == "sink" {
		h.Parallelism = 1
	}
	s.toCoord(t, msg{kind: mAck, id: id, handles: []checkpoint.Handle{h}})
	return true
}

func (s *sim) deliverTask(t *task) {
	m := t.mailbox[0]
	t.mailbox = t.mailbox[1:]
	switch m.kind {
	case mTrigger:
		if t.finished {
			return
		}
		// A source that declines sends a cancel marker instead of the
		// barrier, as the runtime does.
		if s.snapshot(t, m.id) {
			s.broadcast(t, event{kind: evBarrier, id: m.id})
		} else {
			s.broadcast(t, event{kind: evCancel, id: m.id})
		}
	case mNotify:
		if t.finished {
			return
		}
		if t.kind == kSink {
			keep := t.state.Pending[:0]
			for _, txn := range t.state.Pending {
				if txn <= m.id {
					s.ext.commit(txn)
				} else {
					keep = append(keep, txn)
				}
			}
			t.state.Pending = keep
		}
		if m.end {
			switch {
			case !t.inputEnded:
				s.fail("%s told to end at checkpoint %d before its input ended", t.id, m.id)
			case len(t.buffer) > 0:
				s.fail("%s ends with %d records no completed checkpoint covers", t.id, len(t.buffer))
			}
			t.finished = true
			s.toCoord(t, msg{kind: mFinished})
		}
	case mAbort:
		if t.aligner != nil && !t.finished {
			s.align(t, m.id, func() []barrier.Action { return t.aligner.Abort(m.id) })
		}
	}
}

// deliverCoord delivers the oldest message of worker w's link (-1: the
// coordinator's own) to the coordinator.
func (s *sim) deliverCoord(w int) {
	q := &s.local
	if w >= 0 {
		q = &s.links[w]
	}
	m := (*q)[0]
	*q = (*q)[1:]
	ep := m.epoch
	switch m.kind {
	case mAck:
		// An acknowledgement of an earlier attempt (a zombie's, or one
		// in flight at the failover) names a checkpoint that failover
		// aborted: the coordinator must refuse it.
		if res := s.coord.Acknowledge(m.task, m.id, m.handles); res == checkpoint.AckOK && ep != s.epoch {
			s.fail("the coordinator accepted %s's acknowledgement of checkpoint %d from attempt %d in attempt %d", m.task, m.id, ep, s.epoch)
		}
	case mDecline:
		s.coord.Decline(m.task, m.id, m.err)
	case mExhausted:
		if ep == s.epoch { // the driver drops life-cycle events of an old deployment
			s.coord.InputExhausted(s.now, m.task)
		}
	case mFinished:
		if ep == s.epoch {
			s.coord.TaskFinished(m.task)
		}
	case mPersisted:
		s.persisted(m)
	}
	s.drainCoord()
}

// persisted reports a metadata write's outcome to the coordinator, and to
// the model of its failure counting: a completion resets the count.
func (s *sim) persisted(m msg) {
	s.coord.Persisted(s.now, m.id, m.err)
	if m.err == nil {
		s.counted = 0
		s.newest = max(s.newest, m.id)
	}
}

// write is a metadata write in flight; it can finish from doneAt on.
type write struct {
	m      *checkpoint.Metadata
	doneAt time.Time
	slow   bool
}

func (s *sim) written(w write) bool { return !s.now.Before(w.doneAt) }

// persist finishes a metadata write whose time has come, not necessarily
// the oldest; it may fail. Writes finish in any order: the coordinator
// must not depend on it.
func (s *sim) persist() {
	var ready []int
	for i, w := range s.persistQ {
		if s.written(w) {
			ready = append(ready, i)
		}
	}
	i := ready[s.rng.IntN(len(ready))]
	w := s.persistQ[i]
	m := w.m
	s.persistQ = slices.Delete(s.persistQ, i, i+1)
	var err error
	// A slow write's failure is not drawn from the budget: slow writes
	// are bounded themselves.
	if s.failure(s.pPersistFail) || (w.slow && s.rng.Float64() < s.pSlowFail) {
		err = errInjected
	} else {
		s.st.metadata[m.ID] = encode(m)
	}
	s.local = append(s.local, msg{kind: mPersisted, id: m.ID, err: err})
}

func encode(m *checkpoint.Metadata) []byte {
	b, err := checkpoint.Encode(m)
	if err != nil {
		panic(err) // the simulation's metadata is tiny
	}
	return b
}

// drainCoord carries out the coordinator's decisions, and checks its count
// of consecutive failures against the model's.
func (s *sim) drainCoord() {
	defer func() {
		if n := s.coord.ConsecutiveFailures(); n != s.counted && s.violation == nil && !s.failover {
			s.fail("the coordinator counts %d consecutive checkpoint failures, the model %d (failures of savepoints and of checkpoints older than the newest completed, %d, do not count)", n, s.counted, s.newest)
		}
	}()
	for _, a := range s.coord.Ready() {
		s.trace("coordinator: %v", a)
		switch a := a.(type) {
		case checkpoint.Trigger:
			if a.ID <= s.maxTriggered {
				s.fail("checkpoint id %d triggered after id %d: ids must only grow", a.ID, s.maxTriggered)
			}
			s.maxTriggered = a.ID
			s.savepoints[a.ID] = a.Savepoint
			s.st.maxReserved = max(s.st.maxReserved, a.ID)
			for _, t := range s.tasks[:2] {
				s.toTask(t, msg{kind: mTrigger, id: a.ID})
			}
		case checkpoint.Persist:
			s.checkCut(a.Metadata)
			w := write{m: a.Metadata, doneAt: s.now, slow: s.rng.Float64() < s.pSlowWrite}
			if w.slow {
				w.doneAt = w.doneAt.Add(time.Duration(s.rng.Int64N(int64(s.slowWrite) + 1)))
			}
			s.persistQ = append(s.persistQ, w)
		case checkpoint.NotifyComplete:
			if _, ok := s.st.metadata[a.ID]; !ok {
				s.fail("checkpoint %d announced complete before its metadata was durable", a.ID)
			}
			s.res.Completed++
			for _, t := range s.tasks {
				s.toTask(t, msg{kind: mNotify, id: a.ID, end: a.EndOfInput})
			}
			if s.cfg.NotifyZombies {
				for _, t := range s.zombies {
					s.toTask(t, msg{kind: mNotify, id: a.ID})
				}
			}
		case checkpoint.Abort:
			s.res.Aborted++
			if a.Reason.Counts() && !s.savepoints[a.ID] && a.ID > s.newest {
				s.counted++
			}
			for _, t := range s.tasks {
				s.toTask(t, msg{kind: mAbort, id: a.ID})
			}
		case checkpoint.Discard:
			if latest, _ := s.st.latest(); latest != nil && latest.ID == a.ID {
				s.fail("discard of checkpoint %d, the latest completed", a.ID)
			}
			delete(s.st.metadata, a.ID)
		case checkpoint.DiscardState:
		case checkpoint.FailJob:
			s.trace("job fails over: %v", a.Cause)
			if s.counted <= s.ckCfg.TolerableFailures {
				s.fail("the job failed over after %d checkpoint failures that count (%d tolerated): %v", s.counted, s.ckCfg.TolerableFailures, a.Cause)
			}
			s.failover = true
		}
	}
}

// checkCut checks, in exactly-once mode, that each task's snapshot for the
// checkpoint reflects exactly the records that preceded the barrier on each
// of its inputs.
func (s *sim) checkCut(m *checkpoint.Metadata) {
	if s.cfg.Mode != barrier.ExactlyOnce {
		return
	}
	for _, t := range s.tasks {
		if t.kind == kSource {
			continue
		}
		cut, ok := t.cuts[m.ID]
		if !ok {
			s.fail("checkpoint %d persisted without a snapshot of %s in this deployment", m.ID, t.id)
			return
		}
		for c, in := range t.inputs {
			want, ok := in.before[m.ID]
			if !ok {
				s.fail("%s snapshotted checkpoint %d before barrier %d was sent on input %d", t.id, m.ID, m.ID, c)
				return
			}
			if cut[c] != want {
				s.fail("inconsistent cut: %s's snapshot for checkpoint %d holds %d records of input %d, but %d preceded barrier %d",
					t.id, m.ID, cut[c], c, want, m.ID)
				return
			}
		}
	}
}

// taskCrash fails task t: the job restarts from the latest completed
// checkpoint while the coordinator lives on.
func (s *sim) taskCrash(t *task) {
	s.res.TaskCrashes++
	s.trace("task %s crashes", t.id)
	s.coord.TaskFailed(t.id, errInjected)
	s.drainCoord()
	s.restart()
}

// restart redeploys the job. Before it picks the checkpoint to restore, the
// driver reports the outcome of every metadata write in flight.
func (s *sim) restart() {
	persisted := s.local
	s.local = nil
	for _, m := range persisted {
		s.persisted(m)
		s.drainCoord()
	}
	for len(s.persistQ) > 0 {
		s.persistQ[0].doneAt = s.now
		s.persist()
		m := s.local[0]
		s.local = nil
		s.persisted(m)
		s.drainCoord()
	}
	s.failover = false // a job failure decided above is this restart's
	s.zombies = nil
	if s.rng.Float64() < s.pSlowCancel {
		for _, t := range s.tasks {
			if !t.finished && !t.fenced {
				s.zombies = append(s.zombies, t)
			}
		}
		if s.zombies != nil {
			s.res.Zombies++
			s.zombieUntil = s.now.Add(time.Duration(1 + s.rng.Int64N(int64(s.liveTimeout))))
			s.trace("%d tasks of the failed deployment run on until %v", len(s.zombies), s.zombieUntil.Sub(epoch))
		}
	}
	s.deploy()
}

// processCrash kills the whole process: the coordinator and every message in
// flight are lost; a metadata write in flight may or may not have landed.
func (s *sim) processCrash() {
	s.res.ProcessCrashes++
	s.trace("process crashes")
	for _, w := range s.persistQ {
		if s.rng.IntN(2) == 0 {
			s.st.metadata[w.m.ID] = encode(w.m)
		}
	}
	s.persistQ = nil
	s.zombies = nil // they died with the process, or fenced themselves on losing the coordinator
	s.newCoordinator()
	s.deploy()
}

// checkOutput compares the committed output with what a failure-free run
// produces: every record once (exactly-once) or at least once
// (at-least-once), and per key the counts 1..n.
func (s *sim) checkOutput() {
	seen := map[[2]int]int{}
	counts := map[int][]int{}
	for _, r := range s.ext.output {
		seen[[2]int{r.Src, r.Seq}]++
		counts[r.Key] = append(counts[r.Key], r.Count)
	}
	perKey := map[int]int{}
	for src := range 2 {
		for seq := range s.records {
			perKey[keyOf(src, seq, s.keys)]++
			n := seen[[2]int{src, seq}]
			switch {
			case n == 0:
				s.fail("record %d of source %d lost", seq, src)
				return
			case n > 1 && s.cfg.Mode == barrier.ExactlyOnce:
				s.fail("record %d of source %d written %d times", seq, src, n)
				return
			}
		}
	}
	if len(seen) != 2*s.records {
		s.fail("output holds %d distinct records, the input %d", len(seen), 2*s.records)
		return
	}
	if s.cfg.Mode != barrier.ExactlyOnce {
		return
	}
	for k, n := range perKey {
		got := slices.Sorted(slices.Values(counts[k]))
		for i, c := range got {
			if c != i+1 {
				s.fail("key %d: counts %v, want 1..%d", k, got, n)
				return
			}
		}
	}
}
