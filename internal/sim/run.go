package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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

	// lead is the coordinator in charge; old holds deposed ones that act
	// on (high availability only).
	lead       *leader
	old        []*leader
	leadersBuf []*leader

	// The network. Tasks run on workers, placed afresh at each deployment.
	// Each worker's link to a coordinator is FIFO each way, as TCP is;
	// the coordinator reads the links in any interleaving.
	workers int
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
	// pSlowCancel is the chance that a failover leaves the previous
	// attempt's tasks running for a while (leader.zombies).
	pSlowCancel float64

	// High availability (issue 20): etcd is nil in a run without it.
	// pLeaderChange is the chance per step of a leader change, and
	// pPauseInCommit the chance that one comes between a checkpoint's
	// metadata and its record; leaderChangesLeft bounds them (a budget of
	// their own: the crashes' stays as it was). A deposed coordinator acts
	// on for up to deposedSteps steps. pUnknown is the chance that etcd's
	// answer to a completion's record is lost. When a leader changes,
	// pTakeover is the chance that a task of the old term still running
	// reaches the new term's task of its name with its data (the
	// connection is refused); pReroute is the chance that a message of an
	// old term's task reaches the new leader (its worker registered
	// there). lastEpoch is the newest leader's epoch.
	etcd                                    *etcd
	pLeaderChange, pPauseInCommit, pUnknown float64
	leaderChangesLeft                       int
	pTakeover, pReroute                     float64
	deposedSteps                            int
	lastEpoch                               uint64

	// exactlyOnce: the mode is not at-least-once; alignment is how it
	// aligns, and alignedTimeout the timeout of AlignedTimeout.
	exactlyOnce    bool
	alignment      Alignment
	alignedTimeout time.Duration
	// outputCap bounds the records queued on a channel (0: no bound): a
	// task whose output holds that many reads no record (it is
	// back-pressured). Channels are bounded in the runtime, which bounds
	// channel state; unbounded, an unaligned checkpoint may persist a
	// backlog so long that replaying it at each restore outlasts the
	// checkpoint timeout of the final (aligned) checkpoint, for ever; with
	// a bound of 31 events and a 42 ms timeout it still did (seed 12001),
	// so the bound is 2 to 10 events. Only
	// runs with unaligned checkpoints bound them, so that aligned seeds
	// replay the schedules they had before.
	outputCap int

	st        store
	ext       external
	violation *Violation
	// outputCheckOnly turns off the invariants of leader changes (one
	// leader acts per epoch; no completion, commit or command of a deposed
	// leader) and the comparison of the coordinator's latest checkpoint
	// with storage's at each deployment (a failover then restores the
	// coordinator's, as the runtime's does): a test sees whether a planted
	// bug shows in the output, or in a restore that cannot be read.
	outputCheckOnly bool
	// noCutCheck turns off the consistent-cut check: a test sees whether a
	// planted channel-state bug shows in the output after restores.
	noCutCheck bool
}

var errInjected = errors.New("injected failure")

func newSim(cfg Config) *sim {
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x9e3779b97f4a7c15))
	s := &sim{cfg: cfg, rng: rng, now: origin}
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
	// High availability is drawn from a stream of its own, so that a run
	// without it replays the schedule the seed gave before it existed.
	ha := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x7f4a7c159e3779b9))
	if cfg.HA || ha.IntN(2) == 0 {
		s.etcd = newEtcd(cfg.CompleteDeposed)
		s.pLeaderChange = 0.002 * ha.Float64()
		s.pPauseInCommit = 0.1 * ha.Float64()
		s.leaderChangesLeft = ha.IntN(4)
		s.deposedSteps = 1 + ha.IntN(3000)
		s.pUnknown = 0.05 * ha.Float64()
		s.pTakeover = 0.3 * ha.Float64()
		s.pReroute = 0.5 * ha.Float64()
	}
	// The alignment is drawn from a stream of its own too: aligned seeds
	// replay the schedules they had before.
	s.exactlyOnce = cfg.Mode != barrier.AtLeastOnce
	if s.exactlyOnce {
		al := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x3c6ef372fe94f82b))
		s.alignment = cfg.Alignment
		if cfg.Mode == barrier.Unaligned {
			s.alignment = Unaligned
		}
		if s.alignment == AlignmentDrawn {
			s.alignment = []Alignment{Aligned, Unaligned, AlignedTimeout}[al.IntN(3)]
		}
		s.alignedTimeout = cfg.AlignedTimeout
		if s.alignment == AlignedTimeout && s.alignedTimeout == 0 {
			s.alignedTimeout = time.Duration(1+al.IntN(20)) * time.Millisecond
		}
		if s.alignment != Aligned {
			s.outputCap = 2 + al.IntN(9)
		}
	}
	s.st = store{metadata: map[checkpoint.ID][]byte{}, durable: map[checkpoint.ID]bool{}}
	s.ext = external{prepared: map[checkpoint.ID][]record{}, committed: map[checkpoint.ID]bool{}}
	return s
}

func (s *sim) trace(format string, args ...any) {
	if s.cfg.Trace != nil {
		s.cfg.Trace(fmt.Sprintf("%5d %4dms ", s.step, s.now.Sub(origin).Milliseconds()) + fmt.Sprintf(format, args...))
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

// leaderFault reports whether to change the leader now, with probability
// p, within the budget of leader changes.
func (s *sim) leaderFault(p float64) bool {
	if s.leaderChangesLeft > 0 && s.rng.Float64() < p {
		s.leaderChangesLeft--
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

// newLeader builds a coordinator from what storage (and, with high
// availability, etcd) holds, as the runtime does at start. With high
// availability it first campaigns: the new leader key's revision is its
// epoch, and the previous term is over.
func (s *sim) newLeader(prev *leader) *leader {
	l := &leader{savepoints: map[checkpoint.ID]bool{}, mustAlign: map[checkpoint.ID]bool{}, links: make([][]msg, s.workers)}
	if s.etcd != nil {
		l.epoch = s.etcd.campaign()
		if l.epoch <= s.lastEpoch {
			s.fail("a leader of epoch %d after one of epoch %d: epochs must only grow, one coordinator each", l.epoch, s.lastEpoch)
		}
		s.lastEpoch = l.epoch
	} else if prev != nil {
		l.attempts = prev.attempts // the trace's attempts go on across process crashes
	}
	restored := s.scan()
	for _, c := range restored.Completed {
		l.newest = max(l.newest, c.ID)
	}
	job := checkpoint.Job{Name: "sim", Tasks: checkpoint.Tasks{All: taskIDs, Sources: taskIDs[:2]}, Operators: operators}
	c, err := checkpoint.New(job, s.ckCfg, restored)
	if err != nil {
		panic(err)
	}
	l.coord = c
	if s.cfg.WrapCoordinator != nil {
		l.coord = s.cfg.WrapCoordinator(c, s.ckCfg)
	}
	return l
}

// scan reads what the job's storage holds, as storage.Scan does; with high
// availability, as storage.Led does: only what etcd records is completed,
// and the new leader deletes the other checkpoints with metadata (a deposed
// leader's, whose record etcd refused).
func (s *sim) scan() checkpoint.Restored {
	r := checkpoint.Restored{MaxID: s.st.maxReserved}
	ha := s.etcd != nil && !s.cfg.RestoreNewestMetadata
	for _, id := range slices.Sorted(maps.Keys(s.st.metadata)) {
		b := s.st.metadata[id]
		if ha {
			if _, ok := s.etcd.completed[id]; !ok {
				s.trace("checkpoint %d has metadata but no record in etcd: incomplete, deleted", id)
				delete(s.st.metadata, id)
				continue
			}
		}
		m, err := checkpoint.Decode(b)
		if err != nil {
			s.fail("checkpoint %d unreadable: %v", id, err)
			continue
		}
		r.Completed = append(r.Completed, checkpoint.Completed{ID: id, Savepoint: m.Savepoint})
	}
	if s.etcd != nil {
		r.MaxID = max(r.MaxID, s.etcd.lastID)
		for _, id := range slices.Sorted(maps.Keys(s.etcd.completed)) {
			if _, ok := s.st.metadata[id]; !ok {
				s.fail("etcd records checkpoint %d as completed, but storage holds no metadata for it", id)
			}
		}
	}
	return r
}

// latest is the checkpoint a deployment restores: the newest completed one
// (with high availability, the newest etcd records).
func (s *sim) latest() (*checkpoint.Metadata, error) {
	if s.etcd == nil || s.cfg.RestoreNewestMetadata {
		return s.st.latest()
	}
	best := s.latestID()
	if best == 0 {
		return nil, nil
	}
	b, ok := s.st.metadata[best]
	if !ok {
		return nil, fmt.Errorf("etcd records checkpoint %d as completed, but storage holds no metadata for it", best)
	}
	return checkpoint.Decode(b)
}

// latestID is the id of the checkpoint latest reads; 0: none.
func (s *sim) latestID() checkpoint.ID {
	var best checkpoint.ID
	if s.etcd == nil || s.cfg.RestoreNewestMetadata {
		for id := range s.st.metadata {
			best = max(best, id)
		}
		return best
	}
	for id := range s.etcd.completed {
		best = max(best, id)
	}
	return best
}

func (s *sim) newAligner(channels int) Aligner {
	mode := s.cfg.Mode
	var opts []barrier.Option
	switch s.alignment {
	case Unaligned:
		mode = barrier.Unaligned
	case AlignedTimeout:
		opts = append(opts, barrier.AlignedTimeout(s.alignedTimeout))
	}
	var a Aligner
	if s.cfg.NewAligner != nil {
		a = s.cfg.NewAligner(mode, channels, opts...)
	} else {
		a = barrier.New(mode, channels, opts...)
	}
	a.Tick(s.now)
	return a
}

// deploy builds every task of the leader in charge afresh from the latest
// durable checkpoint.
func (s *sim) deploy() {
	l := s.lead
	l.attempts++
	l.attempt = l.epoch<<attemptBits | uint64(l.attempts)
	meta, err := s.latest()
	if err != nil {
		s.fail("latest checkpoint unreadable: %v", err)
		return
	}
	c, ok := l.coord.Latest()
	if ok != (meta != nil) || (meta != nil && c.ID != meta.ID) {
		if !s.outputCheckOnly {
			s.fail("coordinator's latest checkpoint %v (%v) differs from storage's %v", c.ID, ok, meta)
			return
		}
		if l.attempts > 1 {
			// A failover restores the newest checkpoint its run
			// completed, as the runtime's does.
			meta = nil
			if ok {
				if meta, err = checkpoint.Decode(s.st.metadata[c.ID]); err != nil {
					s.fail("checkpoint %d unreadable: %v", c.ID, err)
					return
				}
			}
		}
	}
	if meta != nil {
		s.trace("attempt %#x restores checkpoint %d", l.attempt, meta.ID)
	}
	l.tasks = make([]*task, len(taskIDs))
	// A failover heals partitions: a worker that returns is used again.
	s.cut = make([]*partition, s.workers)
	l.on = make([]int, len(taskIDs))
	for i := range taskIDs {
		l.on[i] = s.rng.IntN(s.workers)
	}
	for i, id := range taskIDs {
		t := &task{id: id, idx: i, lead: l, attempt: l.attempt, cuts: map[checkpoint.ID][]int{}, chans: map[checkpoint.ID]*chanSnap{}}
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
		l.tasks[i] = t
	}
	src, cnt, union, sink := l.tasks[0:2], l.tasks[2:4], l.tasks[4], l.tasks[5]
	for _, sr := range src {
		for _, c := range cnt {
			ch := newChannel(sr, l.attempt)
			sr.outputs = append(sr.outputs, ch)
			c.inputs = append(c.inputs, ch)
		}
	}
	for _, c := range cnt {
		ch := newChannel(c, l.attempt)
		c.outputs = []*channel{ch}
		union.inputs = append(union.inputs, ch)
	}
	ch := newChannel(union, l.attempt)
	union.outputs = []*channel{ch}
	sink.inputs = []*channel{ch}
	if s.channelState() {
		for _, t := range l.tasks {
			for _, in := range t.inputs {
				in.logged = true
			}
		}
	}
	// Channel state of the restored checkpoint goes first on each channel:
	// the consumer's input state, then the producer's output state.
	for _, t := range l.tasks {
		for c, in := range t.inputs {
			p := l.tasks[in.from]
			j := slices.Index(p.outputs, in)
			var recs []record
			if c < len(t.state.In) {
				recs = append(recs, t.state.In[c]...)
			}
			if j < len(p.state.Out) {
				recs = append(recs, p.state.Out[j]...)
			}
			for _, r := range recs {
				in.push(event{kind: evRecord, rec: r})
			}
			s.res.Replayed += len(recs)
		}
	}
	for _, t := range l.tasks {
		t.state.In, t.state.Out = nil, nil
	}
	for _, t := range l.tasks {
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
	l.coord.Start(s.now)
	l.counted = 0
	for _, sr := range src {
		s.maybeExhausted(sr)
	}
	s.drainCoord(l)
}

// task returns the task of l's deployment in force named id.
func (l *leader) task(id checkpoint.TaskID) *task {
	for _, t := range l.tasks {
		if t.id == id {
			return t
		}
	}
	return nil
}

// toCoord sends m from task t to its coordinator, on the link of the
// task's worker. A task of a deposed leader's deployment may reach the new
// leader instead (its worker registered there); the new leader refuses
// its attempt.
func (s *sim) toCoord(t *task, m msg) {
	if t.fenced {
		return // it failed in the middle of a step
	}
	m.task, m.attempt = t.id, t.attempt
	l := t.lead
	if l != s.lead && s.rng.Float64() < s.pReroute {
		s.trace("%s of attempt %#x reports to the leader of epoch %d", t.id, t.attempt, s.lead.epoch)
		l = s.lead
	}
	if l.gone {
		return
	}
	w := l.on[t.idx]
	if l == s.lead && s.cut[w] != nil {
		s.trace("lost (worker %d cut off): %s %v", w, m.task, m.kind)
		return
	}
	l.links[w] = append(l.links[w], m)
}

// toTask sends command m from coordinator l to task t, on its worker's
// link. A command of a deposed leader to a task that stopped may reach the
// new term's task of that name instead (its worker runs the new term's
// attempt now), which must refuse it.
func (s *sim) toTask(l *leader, t *task, m msg) {
	m.from = l
	if m.attempt == 0 {
		m.attempt = l.attempt
	}
	if l.deposed && t.fenced && s.rng.IntN(2) == 0 {
		if nt := s.lead.task(t.id); nt != nil {
			t = nt
		}
	}
	if w := t.lead.on[t.idx]; t.lead == s.lead && s.cut[w] != nil {
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
	s.lead = s.newLeader(nil)
	s.deploy()
	for ; s.violation == nil; s.step++ {
		if s.step > maxSteps {
			s.fail("no end after %d steps (livelock?)", maxSteps)
			break
		}
		s.retireDeposed()
		if s.allFinished() {
			if len(s.old) == 0 {
				break
			}
			// The job ended; deposed leaders act on until they notice.
		} else {
			switch {
			case s.fault(s.pProcCrash):
				s.processCrash()
				continue
			case s.fault(s.pTaskCrash):
				s.taskCrash(s.lead.tasks[s.rng.IntN(len(s.lead.tasks))])
				continue
			case s.fault(s.pPartition):
				s.partition(s.rng.IntN(s.workers))
				continue
			case s.etcd != nil && s.leaderFault(s.pLeaderChange):
				s.leaderChange(true)
				continue
			}
		}
		s.schedule()
		if s.lead.failover {
			s.lead.failover = false
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

// leaders lists the coordinator in charge, then the deposed ones that act
// on. NB: the slice is reused by the next call.
func (s *sim) leaders() []*leader {
	s.leadersBuf = append(append(s.leadersBuf[:0], s.lead), s.old...)
	return s.leadersBuf
}

func (s *sim) allFinished() bool {
	for _, t := range s.lead.tasks {
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
	for _, l := range s.leaders() {
		if l.gone {
			continue
		}
		for _, t := range slices.Concat(l.tasks, l.zombies) {
			if t.finished || t.fenced {
				continue
			}
			pressed := s.backPressured(t)
			if t.kind == kSource && !t.inputEnded && !pressed {
				cs = append(cs, choice{4, func() { s.emit(t) }})
			}
			for c, in := range t.inputs {
				if len(in.q) > 0 && !t.aligner.Blocked(c) && !s.stalled(in, t) && (!pressed || in.q[0].kind != evRecord) {
					cs = append(cs, choice{4, func() { s.process(t, c) }})
				}
			}
			if len(t.mailbox) > 0 {
				cs = append(cs, choice{2, func() { s.deliverTask(t) }})
			}
		}
		for w, q := range l.links {
			if len(q) > 0 {
				cs = append(cs, choice{3, func() { s.deliverCoord(l, w) }})
			}
		}
		if len(l.local) > 0 {
			cs = append(cs, choice{3, func() { s.deliverCoord(l, -1) }})
		}
		if slices.ContainsFunc(l.persistQ, s.written) {
			cs = append(cs, choice{2, func() { s.persist(l, true) }})
		}
		if l.deposed {
			// Time is the current leader's to move on.
			cs = append(cs, choice{1, func() { l.coord.Tick(s.now); s.drainCoord(l) }})
		}
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

// channelState says whether the run takes unaligned checkpoints, which
// carry channel state.
func (s *sim) channelState() bool {
	return s.exactlyOnce && s.alignment != Aligned
}

// backPressured says whether an output of t holds outputCap events: t
// reads and emits no record until it drains (control events pass).
func (s *sim) backPressured(t *task) bool {
	if s.outputCap == 0 {
		return false
	}
	for _, o := range t.outputs {
		if len(o.q) >= s.outputCap {
			return true
		}
	}
	return false
}

func (s *sim) tick() {
	s.now = s.now.Add(time.Duration(1+s.rng.IntN(5)) * time.Millisecond)
	s.lead.coord.Tick(s.now)
	s.drainCoord(s.lead)
	s.liveness()
	if s.alignment == AlignedTimeout {
		// The tasks' timers: an alignment that lasts too long switches.
		for _, l := range s.leaders() {
			if l.gone {
				continue
			}
			for _, t := range slices.Concat(l.tasks, l.zombies) {
				if t.aligner != nil && !t.finished && !t.fenced && s.violation == nil {
					s.align(t, 0, func() []barrier.Action { return t.aligner.Tick(s.now) })
				}
			}
		}
	}
}

// partition is a worker cut off from the coordinator and the other
// workers since at.
type partition struct{ at time.Time }

// stalled says whether channel in, read by t, crosses a partition: its
// events wait. Partitions cut the workers of the leader in charge.
func (s *sim) stalled(in *channel, t *task) bool {
	if t.lead != s.lead {
		return false
	}
	from, to := s.lead.on[in.from], s.lead.on[t.idx]
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
	l := s.lead
	l.links[w] = nil
	for _, t := range l.tasks {
		if l.on[t.idx] == w {
			t.mailbox = nil
		}
	}
}

// liveness plays the heartbeats' consequences of partitions: a cut-off
// worker's tasks fence themselves fenceAfter after the cut; the
// coordinator declares them lost liveTimeout after it, and fails over.
func (s *sim) liveness() {
	for _, l := range s.leaders() {
		if l.zombies != nil && !s.now.Before(l.zombieUntil) {
			s.trace("the previous deployment's last tasks are cancelled")
			l.zombies = nil
		}
	}
	l := s.lead
	for w, p := range s.cut {
		if p == nil {
			continue
		}
		if !s.now.Before(p.at.Add(s.fenceAfter)) {
			for _, t := range l.tasks {
				if l.on[t.idx] == w && !t.fenced {
					t.fenced = true
					s.trace("%s fences itself (worker %d lost the coordinator)", t.id, w)
				}
			}
		}
		if s.now.Before(p.at.Add(s.liveTimeout)) {
			continue
		}
		for _, t := range l.tasks {
			if l.on[t.idx] == w && !t.fenced && !t.finished {
				s.fail("worker %d declared lost while its task %s runs on", w, t.id)
				return
			}
		}
		s.trace("coordinator: worker %d lost", w)
		for _, t := range l.tasks {
			if l.on[t.idx] == w && !t.finished {
				l.coord.TaskFailed(t.id, errInjected)
				s.drainCoord(l)
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
	if id, err := s.lead.coord.TriggerSavepoint(s.now); err == nil {
		s.trace("savepoint %d requested", id)
	}
	s.drainCoord(s.lead)
}

func keyOf(src, seq, keys int) int { return (src*7919 + seq*31) % keys }

func (s *sim) emit(t *task) {
	r := record{Src: t.id.Subtask, Seq: t.state.Offset}
	r.Key = keyOf(r.Src, r.Seq, s.keys)
	s.send(t, t.outputs[r.Key%2], event{kind: evRecord, rec: r})
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
		for _, cs := range t.pending {
			if cs.persisting[c] {
				if cs.skip[c] > 0 {
					cs.skip[c]--
					continue
				}
				cs.in[c] = append(cs.in[c], r)
				s.res.Persisted++
			}
		}
		switch t.kind {
		case kCounter:
			t.state.Counts[r.Key]++
			r.Count = t.state.Counts[r.Key]
			s.send(t, t.outputs[0], event{kind: evRecord, rec: r})
		case kUnion:
			t.state.Passed[c]++
			s.send(t, t.outputs[0], event{kind: evRecord, rec: r})
		case kSink:
			t.buffer = append(t.buffer, r)
		}
	case evBarrier:
		if s.alignment != Aligned && s.exactlyOnce && t.lead.mustAlign[e.id] {
			s.align(t, 0, func() []barrier.Action { return t.aligner.OnAlignedBarrier(c, e.id) })
			break
		}
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
	var beforeP, afterP []checkpoint.ID
	if s.channelState() {
		beforeP = t.aligner.Persisting()
	}
	before := t.aligner.Aligning()
	acts := slices.Clone(call())
	after := t.aligner.Aligning()
	if s.channelState() {
		afterP = t.aligner.Persisting()
	}
	for _, id := range beforeP {
		if id == aborted || slices.Contains(afterP, id) {
			continue
		}
		if !slices.ContainsFunc(acts, func(a barrier.Action) bool {
			switch a := a.(type) {
			case barrier.ChannelStateComplete:
				return a.ID == id
			case barrier.Decline:
				return a.ID == id
			case barrier.ForwardCancel:
				return a.ID == id
			}
			return false
		}) {
			s.fail("%s: the persistence of checkpoint %d's channel state ended silently (abort of %d: %v)", t.id, id, aborted, acts)
			return
		}
	}
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
			if a.Unaligned {
				if s.alignment == AlignedTimeout {
					s.res.Switched++
				}
				s.snapshotUnaligned(t, a.ID)
			} else {
				s.snapshot(t, a.ID)
			}
		case barrier.Forward:
			if a.Overtake {
				s.overtake(t, a.ID)
			} else {
				s.broadcast(t, event{kind: evBarrier, id: a.ID})
			}
		case barrier.PersistInput:
			cs := s.chanSnap(t, a.ID)
			if cs.declined {
				break
			}
			cs.persisting[a.Channel] = true
			if s.cfg.PersistArrivalsOnly {
				// Planted: the records queued now are not persisted.
				for _, e := range t.inputs[a.Channel].q {
					if e.kind != evRecord {
						break
					}
					cs.skip[a.Channel]++
				}
			}
		case barrier.EndPersist:
			if cs := t.chans[a.ID]; cs != nil {
				cs.persisting[a.Channel] = false
			}
		case barrier.ChannelStateComplete:
			s.channelStateComplete(t, a.ID)
		case barrier.Decline:
			s.dropChanSnap(t, a.ID)
			s.toCoord(t, msg{kind: mDecline, id: a.ID, err: a.Cause})
		case barrier.ForwardCancel:
			s.dropChanSnap(t, a.ID)
			s.broadcast(t, event{kind: evCancel, id: a.ID})
		}
	}
	if aborted != 0 {
		s.dropChanSnap(t, aborted)
	}
}

// chanSnap returns task t's unaligned snapshot of id, starting it if need
// be (an overtaking forward or a persistence may come before the snapshot
// in a planted bug: the check of the cut finds it).
func (s *sim) chanSnap(t *task, id checkpoint.ID) *chanSnap {
	if cs := t.chans[id]; cs != nil {
		return cs
	}
	cs := &chanSnap{id: id, in: make([][]record, len(t.inputs)), persisting: make([]bool, len(t.inputs)), skip: make([]int, len(t.inputs))}
	t.chans[id] = cs
	t.pending = append(t.pending, cs)
	return cs
}

// dropChanSnap discards the channel state of id at t: the checkpoint is
// over here before it completed.
func (s *sim) dropChanSnap(t *task, id checkpoint.ID) {
	cs := t.chans[id]
	if cs == nil || cs.complete {
		return
	}
	delete(t.chans, id)
	t.pending = slices.DeleteFunc(t.pending, func(x *chanSnap) bool { return x == cs })
}

// declines reports whether task t declines its snapshot of id (injected).
func (s *sim) declines(t *task, id checkpoint.ID) bool {
	if s.failure(s.pDecline) || (t.kind == kSource && t.lead.savepoints[id] && s.rng.Float64() < s.pSavepointDecline) {
		s.trace("%s declines %d (injected)", t.id, id)
		s.toCoord(t, msg{kind: mDecline, id: id, err: errInjected})
		return true
	}
	return false
}

// snapshotUnaligned takes task t's unaligned snapshot of id: the operator
// state is frozen now; the acknowledgement waits for the channel state. It
// reports whether the snapshot was taken rather than declined.
func (s *sim) snapshotUnaligned(t *task, id checkpoint.ID) bool {
	cs := s.chanSnap(t, id)
	if s.declines(t, id) {
		cs.declined = true
		return false
	}
	s.res.Unaligned++
	t.cuts[id] = slices.Clone(t.consumed)
	if t.kind == kSink {
		s.ext.prepared[id] = t.buffer
		t.buffer = nil
		t.state.Pending = append(t.state.Pending, id)
	}
	cs.state = t.state
	cs.state.Counts = maps.Clone(t.state.Counts)
	cs.state.Pending = slices.Clone(t.state.Pending)
	cs.taken = true
	return true
}

// overtake emits barrier id of t at the front of each output channel; the
// records it overtakes are t's output channel state of id.
func (s *sim) overtake(t *task, id checkpoint.ID) {
	cs := s.chanSnap(t, id)
	cs.out = make([][]record, len(t.outputs))
	cs.outCh = slices.Clone(t.outputs)
	e := event{kind: evBarrier, id: id}
	for j, o := range t.outputs {
		if o.attempt != t.attempt && !s.cfg.AcceptOldConnections {
			s.send(t, o, e) // refused: t stops
			continue
		}
		if s.cfg.BarrierBehindOutput {
			// Planted: the queued records are captured, but the
			// barrier goes behind them.
			for _, x := range o.q[len(o.q)-countTrailingRecords(o.q):] {
				if x.kind == evRecord {
					cs.out[j] = append(cs.out[j], x.rec)
				}
			}
			o.push(e)
			continue
		}
		cs.out[j] = o.pushFront(e)
	}
	if cs.declined {
		cs.out = nil
	}
}

func countTrailingRecords(q []event) int {
	n := 0
	for n < len(q) && (q[len(q)-1-n].kind == evRecord || q[len(q)-1-n].kind == evEndOfData) {
		n++
	}
	return n
}

// channelStateComplete acknowledges t's unaligned snapshot of id with its
// operator state and its channel state.
func (s *sim) channelStateComplete(t *task, id checkpoint.ID) {
	cs := t.chans[id]
	if cs == nil {
		return
	}
	if cs.declined {
		s.dropChanSnap(t, id)
		return
	}
	if !cs.taken {
		s.fail("%s: the channel state of checkpoint %d is complete before its snapshot was taken", t.id, id)
		return
	}
	cs.complete = true
	t.pending = slices.DeleteFunc(t.pending, func(x *chanSnap) bool { return x == cs })
	st := cs.state
	st.In, st.Out = cs.in, cs.out
	if !slices.ContainsFunc(st.In, func(r []record) bool { return len(r) > 0 }) {
		st.In = nil
	}
	if !slices.ContainsFunc(st.Out, func(r []record) bool { return len(r) > 0 }) {
		st.Out = nil
	}
	s.ack(t, id, &st)
}

func (s *sim) broadcast(t *task, e event) {
	for _, o := range t.outputs {
		s.send(t, o, e)
	}
}

// send puts e on channel o, an output of t. A data connection belongs to
// one attempt: a task refuses one of another attempt (an old term's
// producer that reached the worker running the new term's task), and the
// producer, whose connection failed, stops.
func (s *sim) send(t *task, o *channel, e event) {
	if o.attempt != t.attempt && !s.cfg.AcceptOldConnections {
		if !t.fenced {
			s.res.Refused++
			s.trace("%s of attempt %#x: its data connection refused by attempt %#x; it stops", t.id, t.attempt, o.attempt)
			t.fenced = true
		}
		return
	}
	o.push(e)
}

// snapshot takes task t's snapshot for checkpoint id and acknowledges it,
// or declines it when a failure is injected; it reports which.
func (s *sim) snapshot(t *task, id checkpoint.ID) bool {
	if s.declines(t, id) {
		return false
	}
	t.cuts[id] = slices.Clone(t.consumed)
	if t.kind == kSink {
		s.ext.prepared[id] = t.buffer
		t.buffer = nil
		t.state.Pending = append(t.state.Pending, id)
	}
	s.ack(t, id, &t.state)
	return true
}

// ack acknowledges checkpoint id of task t with state st.
func (s *sim) ack(t *task, id checkpoint.ID, st *taskState) {
	data, err := json.Marshal(st)
	if err != nil {
		panic(err)
	}
	h := checkpoint.Handle{Operator: t.id.Vertex, Subtask: t.id.Subtask, Parallelism: 2, Kind: "state", Inline: data, SizeBytes: int64(len(data))}
	if t.id.Vertex == "union" || t.id.Vertex == "sink" {
		h.Parallelism = 1
	}
	s.toCoord(t, msg{kind: mAck, id: id, handles: []checkpoint.Handle{h}})
}

func (s *sim) deliverTask(t *task) {
	m := t.mailbox[0]
	t.mailbox = t.mailbox[1:]
	if m.attempt != t.attempt && !s.cfg.ObeyOldAttempts {
		// The worker refuses a command for an attempt it does not run:
		// a deposed leader's, whose attempts are numbered from an older
		// epoch.
		s.res.Refused++
		s.trace("%s of attempt %#x refuses %v %d of attempt %#x", t.id, t.attempt, m.kind, m.id, m.attempt)
		return
	}
	if m.from != t.lead && !s.outputCheckOnly {
		s.fail("%s of the term of epoch %d acted on %v %d of the coordinator of epoch %d: a task obeys only its own term's coordinator",
			t.id, t.lead.epoch, m.kind, m.id, m.from.epoch)
		return
	}
	switch m.kind {
	case mTrigger:
		if t.finished {
			return
		}
		// A source that declines sends a cancel marker instead of the
		// barrier, as the runtime does. In an unaligned run a source's
		// barrier overtakes its queued output too.
		if s.alignment == Unaligned && !t.lead.mustAlign[m.id] {
			if s.snapshotUnaligned(t, m.id) {
				s.overtake(t, m.id)
				s.channelStateComplete(t, m.id)
			} else {
				s.dropChanSnap(t, m.id)
				s.broadcast(t, event{kind: evCancel, id: m.id})
			}
			break
		}
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
			s.checkNotice(t, m)
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

// checkNotice checks, with high availability, that sink t commits its
// transactions only on a notification of a checkpoint that etcd recorded
// as completed in the notifying coordinator's term. A deposed leader may
// deliver such a notification late to its own term's sink (it learned of
// the record after its term ended): the checkpoint is etcd's, so the new
// leader restores it or a newer one, and commits are idempotent.
func (s *sim) checkNotice(t *task, m msg) {
	if s.etcd == nil || s.outputCheckOnly || !slices.ContainsFunc(t.state.Pending, func(txn checkpoint.ID) bool { return txn <= m.id }) {
		return
	}
	if by, ok := s.etcd.recordedBy[m.id]; !ok || by != m.from.epoch {
		s.fail("%s commits on a notification of checkpoint %d from the coordinator of epoch %d, which etcd never recorded as completed in that term (recorded: %v, by epoch %d)",
			t.id, m.id, m.from.epoch, ok, by)
		return
	}
	if m.from.deposed {
		s.res.LateNotices++
	}
}

// deliverCoord delivers the oldest message of worker w's link to
// coordinator l (-1: its own messages) to it.
func (s *sim) deliverCoord(l *leader, w int) {
	q := &l.local
	if w >= 0 {
		q = &l.links[w]
	}
	m := (*q)[0]
	*q = (*q)[1:]
	switch m.kind {
	case mAck:
		// An acknowledgement of an earlier attempt (a zombie's, one in
		// flight at the failover, or an old term's) names a checkpoint
		// that failover aborted, or another term's: the coordinator must
		// refuse it.
		if res := l.coord.Acknowledge(s.now, m.task, m.id, m.handles); res == checkpoint.AckOK && m.attempt != l.attempt {
			s.fail("the coordinator accepted %s's acknowledgement of checkpoint %d from attempt %#x in attempt %#x", m.task, m.id, m.attempt, l.attempt)
		}
	case mDecline:
		l.coord.Decline(m.task, m.id, m.err)
	case mExhausted:
		if m.attempt == l.attempt { // the driver drops life-cycle events of another deployment
			l.coord.InputExhausted(s.now, m.task)
		}
	case mFinished:
		if m.attempt == l.attempt {
			l.coord.TaskFinished(m.task)
		}
	case mPersisted:
		s.persisted(l, m)
	}
	s.drainCoord(l)
}

// persisted reports a metadata write's outcome to coordinator l, and to
// the model of its failure counting: a completion of a checkpoint newer
// than the newest completed resets the count (one older is no progress). A
// commit etcd fenced ends a deposed leader's run for good
// (storage.ErrLeaseLost), once the coordinator heard of it.
func (s *sim) persisted(l *leader, m msg) {
	l.coord.Persisted(s.now, m.id, m.err)
	if m.err == nil {
		if m.id > l.newest {
			l.counted = 0
		}
		l.newest = max(l.newest, m.id)
	}
	if errors.Is(m.err, errDeposed) {
		l.leaseLost = true
	}
}

// write is a metadata write in flight; it can finish from doneAt on.
type write struct {
	m      *checkpoint.Metadata
	doneAt time.Time
	slow   bool
}

func (s *sim) written(w write) bool { return !s.now.Before(w.doneAt) }

// persist finishes a metadata write of coordinator l whose time has come,
// not necessarily the oldest; it may fail. Writes finish in any order: the
// coordinator must not depend on it. With high availability the commit
// point follows the write: etcd records the checkpoint as completed; the
// leader may pause between the two (mayPause: not while a restart settles
// the writes in flight).
func (s *sim) persist(l *leader, mayPause bool) {
	var ready []int
	for i, w := range l.persistQ {
		if s.written(w) {
			ready = append(ready, i)
		}
	}
	i := ready[s.rng.IntN(len(ready))]
	w := l.persistQ[i]
	m := w.m
	l.persistQ = slices.Delete(l.persistQ, i, i+1)
	var err error
	// A slow write's failure is not drawn from the budget: slow writes
	// are bounded themselves.
	if s.failure(s.pPersistFail) || (w.slow && s.rng.Float64() < s.pSlowFail) {
		err = errInjected
	} else {
		s.st.write(m)
		if s.etcd != nil && mayPause && l == s.lead && s.leaderFault(s.pPauseInCommit) {
			// Paused between the metadata and its record: the lease
			// lapses meanwhile, and a standby leads.
			s.trace("the leader of epoch %d pauses in the commit of checkpoint %d", l.epoch, m.ID)
			s.leaderChange(true)
		}
		if s.etcd != nil {
			err = s.record(l, m.ID)
		}
	}
	l.local = append(l.local, msg{kind: mPersisted, id: m.ID, err: err})
}

// record is the commit point with high availability (storage.Led's
// Commit, after the metadata): etcd records checkpoint id as completed, in
// a write fenced by l's epoch. Its answer may be lost after etcd applied
// it.
func (s *sim) record(l *leader, id checkpoint.ID) error {
	if err := s.etcd.complete(l.epoch, id); err != nil {
		s.res.Fenced++
		s.res.FencedCompletes++
		s.trace("coordinator of epoch %d: etcd refuses to record checkpoint %d: %v", l.epoch, id, err)
		return err
	}
	s.effect(l, "checkpoint %d recorded as completed in etcd", id)
	if s.rng.Float64() < s.pUnknown {
		s.trace("etcd recorded checkpoint %d; the answer is lost", id)
		return errUnknownOutcome
	}
	return nil
}

// discard deletes checkpoint id as storage.Led does: it forgets its record
// in etcd, under l's epoch, before it deletes its files, so a deposed
// leader deletes nothing. It reports whether it did.
func (s *sim) discard(l *leader, id checkpoint.ID) bool {
	if err := s.etcd.forget(l.epoch, id); err != nil {
		s.res.Fenced++
		s.trace("coordinator of epoch %d: etcd refuses to forget checkpoint %d: %v", l.epoch, id, err)
		return false
	}
	s.effect(l, "checkpoint %d forgotten in etcd and deleted", id)
	delete(s.st.metadata, id)
	return true
}

// effect checks that what l did to etcd or storage, which outlives its
// term, is the current leader's: at most one coordinator acts per epoch,
// and only the current one. (etcd's fencing keeps it so; a planted bug may
// not.)
func (s *sim) effect(l *leader, format string, args ...any) {
	if (l.deposed || l != s.lead || l.epoch != s.etcd.leader) && !s.outputCheckOnly {
		s.fail("%s by the coordinator of epoch %d, deposed: epoch %d leads", fmt.Sprintf(format, args...), l.epoch, s.etcd.leader)
	}
}

func encode(m *checkpoint.Metadata) []byte {
	b, err := checkpoint.Encode(m)
	if err != nil {
		panic(err) // the simulation's metadata is tiny
	}
	return b
}

// who names coordinator l in traces.
func (l *leader) who() string {
	switch {
	case l.epoch == 0:
		return "coordinator"
	case l.deposed:
		return fmt.Sprintf("coordinator of epoch %d (deposed)", l.epoch)
	}
	return fmt.Sprintf("coordinator of epoch %d", l.epoch)
}

// drainCoord carries out coordinator l's decisions, and checks its count
// of consecutive failures against the model's. A deposed coordinator whose
// commit was fenced, or whose job failed, stops: the runtime ends its run
// for good, or asks whether its term lasts before it restarts.
func (s *sim) drainCoord(l *leader) {
	defer func() {
		if n := l.coord.ConsecutiveFailures(); n != l.counted && s.violation == nil && !l.failover {
			s.fail("the coordinator counts %d consecutive checkpoint failures, the model %d (failures of savepoints and of checkpoints older than the newest completed, %d, do not count)", n, l.counted, l.newest)
		}
		switch {
		case l.deposed && l.leaseLost:
			s.retire(l, "its commit was fenced (lease lost)")
		case l.deposed && l.failover:
			s.retire(l, "its job failed, and its term is over")
		}
	}()
	for {
		acts := l.coord.Ready()
		if len(acts) == 0 {
			return
		}
		for _, a := range acts {
			s.do(l, a)
		}
	}
}

// do carries out action a of coordinator l, as the runtime's driver does.
func (s *sim) do(l *leader, a checkpoint.Action) {
	s.trace("%s: %v", l.who(), a)
	switch a := a.(type) {
	case checkpoint.Trigger:
		if a.ID <= l.maxTriggered {
			s.fail("checkpoint id %d triggered after id %d: ids must only grow", a.ID, l.maxTriggered)
		}
		l.maxTriggered = a.ID
		l.savepoints[a.ID] = a.Savepoint
		l.mustAlign[a.ID] = a.Savepoint || a.Final // the runtime's ControlTrigger.Aligned
		if s.etcd != nil {
			// The id is reserved in etcd before any barrier: no two
			// terms use one id.
			if err := s.etcd.reserve(l.epoch, a.ID); err != nil {
				if l.deposed {
					s.res.Fenced++
				}
				s.trace("%s: reserve %d: %v", l.who(), a.ID, err)
				l.coord.TriggerFailed(a.ID, err)
				return
			}
			s.effect(l, "checkpoint id %d reserved", a.ID)
		}
		s.st.maxReserved = max(s.st.maxReserved, a.ID)
		for _, t := range l.tasks[:2] {
			s.toTask(l, t, msg{kind: mTrigger, id: a.ID})
		}
	case checkpoint.Persist:
		s.checkCut(l, a.Metadata)
		w := write{m: a.Metadata, doneAt: s.now, slow: s.rng.Float64() < s.pSlowWrite}
		if w.slow {
			w.doneAt = w.doneAt.Add(time.Duration(s.rng.Int64N(int64(s.slowWrite) + 1)))
		}
		l.persistQ = append(l.persistQ, w)
	case checkpoint.NotifyComplete:
		if !s.st.durable[a.ID] {
			s.fail("checkpoint %d announced complete before its metadata was durable", a.ID)
		}
		if s.etcd != nil && !s.outputCheckOnly {
			if by, ok := s.etcd.recordedBy[a.ID]; !ok || by != l.epoch {
				s.fail("checkpoint %d completes under the coordinator of epoch %d, but etcd did not record it in that term (recorded: %v, by epoch %d)", a.ID, l.epoch, ok, by)
			}
		}
		s.res.Completed++
		for _, t := range l.tasks {
			s.toTask(l, t, msg{kind: mNotify, id: a.ID, end: a.EndOfInput})
		}
		if s.cfg.NotifyZombies {
			for _, t := range l.zombies {
				s.toTask(l, t, msg{kind: mNotify, id: a.ID, attempt: t.attempt})
			}
		}
	case checkpoint.Abort:
		s.res.Aborted++
		if a.Reason.Counts() && !l.savepoints[a.ID] && a.ID > l.newest {
			l.counted++
		}
		for _, t := range l.tasks {
			s.toTask(l, t, msg{kind: mAbort, id: a.ID})
		}
		if s.etcd != nil {
			// The runtime deletes an aborted checkpoint: a record whose
			// answer was lost goes first.
			s.discard(l, a.ID)
		}
	case checkpoint.Discard:
		latest := s.latestID()
		if s.etcd != nil && !s.discard(l, a.ID) {
			return
		}
		if latest == a.ID {
			s.fail("discard of checkpoint %d, the latest completed", a.ID)
		}
		delete(s.st.metadata, a.ID)
	case checkpoint.DiscardState:
	case checkpoint.FailJob:
		s.trace("%s: job fails over: %v", l.who(), a.Cause)
		if l.counted <= s.ckCfg.TolerableFailures {
			s.fail("the job failed over after %d checkpoint failures that count (%d tolerated): %v", l.counted, s.ckCfg.TolerableFailures, a.Cause)
		}
		l.failover = true
	}
}

// checkCut checks, in exactly-once mode, that each task's snapshot for the
// checkpoint reflects exactly the records that preceded the barrier on each
// of its inputs.
//
// With channel state (issue 21): on each input, the records in the
// consumer's snapshot, then those in its input channel state, then those in
// its producer's output channel state, are exactly the records that
// preceded the barrier, in order.
func (s *sim) checkCut(l *leader, m *checkpoint.Metadata) {
	if !s.exactlyOnce || s.noCutCheck {
		return
	}
	for _, t := range l.tasks {
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
			var inState, outState []record
			cs, pcs := t.chans[m.ID], l.tasks[in.from].chans[m.ID]
			if cs != nil {
				inState = cs.in[c]
			}
			if pcs != nil {
				if j := slices.Index(pcs.outCh, in); j >= 0 && j < len(pcs.out) {
					outState = pcs.out[j]
				}
			}
			if cs == nil && pcs == nil {
				// Aligned on both sides: no channel state.
				if cut[c] != want {
					s.fail("inconsistent cut: %s's snapshot for checkpoint %d holds %d records of input %d, but %d preceded barrier %d",
						t.id, m.ID, cut[c], c, want, m.ID)
					return
				}
				continue
			}
			got := cut[c] + len(inState) + len(outState)
			switch {
			case got > want:
				s.fail("inconsistent cut: %s's input %d at checkpoint %d: %d records in its snapshot, %d in input and %d in output channel state, but %d preceded barrier %d: records persisted twice",
					t.id, c, m.ID, cut[c], len(inState), len(outState), want, m.ID)
				return
			case got < want:
				s.fail("inconsistent cut: %s's input %d at checkpoint %d: %d records in its snapshot, %d in input and %d in output channel state, but %d preceded barrier %d: channel state cut short",
					t.id, c, m.ID, cut[c], len(inState), len(outState), want, m.ID)
				return
			case in.logged && !slices.Equal(slices.Concat(inState, outState), in.log[cut[c]:want]):
				s.fail("inconsistent cut: %s's input %d at checkpoint %d: its channel state holds other records than those between its snapshot and barrier %d",
					t.id, c, m.ID, m.ID)
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
	s.lead.coord.TaskFailed(t.id, errInjected)
	s.drainCoord(s.lead)
	s.restart()
}

// restart redeploys the job. Before it picks the checkpoint to restore, the
// driver reports the outcome of every metadata write in flight.
func (s *sim) restart() {
	l := s.lead
	persisted := l.local
	l.local = nil
	for _, m := range persisted {
		s.persisted(l, m)
		s.drainCoord(l)
	}
	for len(l.persistQ) > 0 {
		l.persistQ[0].doneAt = s.now
		s.persist(l, false)
		m := l.local[0]
		l.local = nil
		s.persisted(l, m)
		s.drainCoord(l)
	}
	l.failover = false // a job failure decided above is this restart's
	l.zombies = nil
	if s.rng.Float64() < s.pSlowCancel {
		for _, t := range l.tasks {
			if !t.finished && !t.fenced {
				l.zombies = append(l.zombies, t)
			}
		}
		if l.zombies != nil {
			s.res.Zombies++
			l.zombieUntil = s.now.Add(time.Duration(1 + s.rng.Int64N(int64(s.liveTimeout))))
			s.trace("%d tasks of the failed deployment run on until %v", len(l.zombies), l.zombieUntil.Sub(origin))
		}
	}
	s.deploy()
}

// processCrash kills the coordinator's process: the coordinator and every
// message in flight are lost; a metadata write in flight may or may not
// have landed. Without high availability the tasks die with it (local
// mode) and the process starts again; with it, a standby leads.
func (s *sim) processCrash() {
	s.res.ProcessCrashes++
	s.trace("process crashes")
	if s.etcd != nil {
		s.leaderChange(false)
		return
	}
	for _, w := range s.lead.persistQ {
		if s.rng.IntN(2) == 0 {
			s.st.write(w.m)
		}
	}
	s.lead = s.newLeader(s.lead)
	s.deploy()
}

// leaderChange ends the leader's term, and a standby campaigns, leads and
// deploys from what etcd records. If acting, the old coordinator was
// paused or cut off from etcd alone: its lease lapsed, and it acts on,
// unaware, beside the new one for up to deposedSteps steps. It may tick,
// trigger, take acknowledgements, write metadata and try to complete;
// each of its tasks runs on unless its worker stopped it, and one may
// reach the new term's task of its name with its data. Otherwise its
// process died: a commit in flight wrote its metadata, its record too, or
// neither, and its tasks stop.
func (s *sim) leaderChange(acting bool) {
	old := s.lead
	if !acting {
		for _, w := range old.persistQ {
			if s.rng.IntN(2) == 0 {
				s.st.write(w.m)
				if s.rng.IntN(2) == 0 {
					_ = s.record(old, w.m.ID) // its answer never arrives
				}
			}
		}
		old.persistQ = nil
	}
	old.deposed = true
	s.lead = s.newLeader(old)
	s.trace("the leader of epoch %d is deposed; epoch %d leads", old.epoch, s.lead.epoch)
	if !acting {
		s.retire(old, "its process died")
		s.deploy()
		return
	}
	s.res.LeaderChanges++
	old.until = s.step + 1 + s.rng.IntN(s.deposedSteps)
	running := func() []*task {
		var ts []*task
		for _, t := range slices.Concat(old.tasks, old.zombies) {
			if !t.fenced && !t.finished {
				ts = append(ts, t)
			}
		}
		return ts
	}
	// The workers follow the old leader still (it is cut off from etcd
	// alone), or some of them, or none (it was paused: they lost it).
	switch s.rng.IntN(3) {
	case 1:
		for _, t := range running() {
			if s.rng.IntN(2) == 0 {
				t.fenced = true
			}
		}
	case 2:
		for _, t := range running() {
			t.fenced = true
		}
	}
	s.old = append(s.old, old)
	s.deploy()
	if s.violation != nil {
		return
	}
	for _, t := range running() {
		if len(t.outputs) > 0 && s.rng.Float64() < s.pTakeover {
			nt := s.lead.task(t.id)
			s.trace("%s of attempt %#x reaches the tasks of attempt %#x with its data", t.id, t.attempt, nt.attempt)
			t.outputs = nt.outputs
		}
	}
}

// retire stops deposed coordinator l and its tasks.
func (s *sim) retire(l *leader, why string) {
	if l.gone {
		return
	}
	l.gone = true
	s.trace("the coordinator of epoch %d stops: %s", l.epoch, why)
	for _, t := range slices.Concat(l.tasks, l.zombies) {
		t.fenced = true
	}
	l.links, l.local, l.persistQ = nil, nil, nil
}

// retireDeposed stops the deposed coordinators whose time is up: they
// noticed that their lease lapsed.
func (s *sim) retireDeposed() {
	for _, l := range s.old {
		if s.step >= l.until {
			s.retire(l, "it noticed that its lease lapsed")
		}
	}
	s.old = slices.DeleteFunc(s.old, func(l *leader) bool { return l.gone })
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
			case n > 1 && s.exactlyOnce:
				s.fail("record %d of source %d written %d times", seq, src, n)
				return
			}
		}
	}
	if len(seen) != 2*s.records {
		s.fail("output holds %d distinct records, the input %d", len(seen), 2*s.records)
		return
	}
	if !s.exactlyOnce {
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
