package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	rt "runtime"
	"runtime/debug"
	"slices"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/checkpoint/barrier"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/local"
	"github.com/weirstream/weir/storage"
)

// ControlKind is the kind of a Control.
type ControlKind int

const (
	// ControlTrigger starts checkpoint ID at a source task; Stop: the
	// source emits nothing after its barrier (unless it is aborted).
	ControlTrigger ControlKind = iota + 1
	// ControlComplete says checkpoint ID completed; EndOfInput, that it is
	// the job's final one; Stop, that the job stops with it: the task
	// commits it and ends.
	ControlComplete
	// ControlAbort says checkpoint ID was aborted.
	ControlAbort
)

// Control is a message from the job's driver to a task.
type Control struct {
	Kind       ControlKind
	ID         checkpoint.ID
	EndOfInput bool
	Stop       bool
	// Aligned: a trigger's checkpoint aligns in every mode (a savepoint,
	// or the final checkpoint). Triggered: when the driver triggered it.
	Aligned   bool
	Triggered time.Time
	// Completed, of a trigger: the newest checkpoint this attempt's tasks
	// were told completed before it (0: none); its barriers carry it
	// (Event.Completed).
	Completed checkpoint.ID
}

// ReportKind is the kind of a Report.
type ReportKind int

const (
	// ReportAck acknowledges checkpoint ID with the state's Handles and
	// the snapshot's synchronous part.
	ReportAck ReportKind = iota + 1
	// ReportDecline declines checkpoint ID, for Err.
	ReportDecline
	// ReportExhausted: a source task read all its input.
	ReportExhausted
	// ReportFinished: the task ended with the job's final checkpoint.
	ReportFinished
	// ReportFailed: the task failed, for Err.
	ReportFailed
	// ReportReplayed: the task replayed the channel state it restored
	// (ChannelStateReplays says which tasks do).
	ReportReplayed
)

// Report is a message from a task (or its snapshot writer) to the driver.
type Report struct {
	Kind    ReportKind
	Task    checkpoint.TaskID
	ID      checkpoint.ID
	Handles []checkpoint.Handle
	Err     error
	// An ack's snapshot parts: the synchronous and asynchronous parts,
	// the alignment (from the first barrier to the snapshot), and when
	// each input channel's barrier arrived after the first (-1: never,
	// at least once).
	Sync, Async, Align time.Duration
	Arrivals           []time.Duration
	// Unaligned: the task's snapshot was unaligned; Switched: the
	// aligned-checkpoint timeout switched it, after Align. ChannelState
	// is the bytes of channel state it wrote.
	Unaligned, Switched bool
	ChannelState        int64
}

// task runs one subtask of a vertex: a chain of operators, its input gate
// and its outputs, in one goroutine that owns all their state.
type task struct {
	// endedAsActive puts back a defect (an ended channel counted as an
	// active one: advance), for the test that shows the watermark
	// generator finds it. False in every job.
	endedAsActive bool

	id       checkpoint.TaskID
	ops      []operator.Operator
	contexts []*operator.Context
	source   operator.Source
	input    operator.Input
	inputOf  []int // gate channel → head input
	gate     *Gate
	aligner  *barrier.Aligner
	outputs  []Output
	timed    []operator.Timed
	mailbox  chan Control
	reports  chan<- Report
	pool     *pool
	store    storage.Storage
	// local, if set, is the task's local copy of its snapshots.
	local *local.Task
	// checkpointing is false in mode none: a task ends as soon as its
	// input has.
	checkpointing bool
	now           func() time.Time

	// ended marks the input channels that delivered end of data.
	ended      []bool
	endedCount int
	// inputEnded: the task's input ended (a source's is exhausted) and its
	// operators finished; it emits nothing more and fires no timers, and
	// waits for the final checkpoint.
	inputEnded bool
	finished   bool
	// completed is the newest checkpoint the task was told completed in
	// this attempt (0: none).
	completed checkpoint.ID
	// suspendedAt is the savepoint a source stopped emitting at, to stop
	// the job with it (0: none).
	suspendedAt checkpoint.ID

	// Event time. wmSource, if set, makes the task's watermark; else it is
	// the least of the input channels' (chanWM) that are not idle. wm is
	// the watermark the operators saw and downstream was told; idle, that
	// downstream was told the task is idle.
	wmSource   operator.WatermarkSource
	eventTimed []operator.EventTimed
	chanWM     []int64
	chanIdle   []bool
	wm         int64
	idle       bool
	// wmNext throttles a wmSource's watermarks to one per wmInterval.
	wmNext time.Time
	// wmCheck, of a task with a wmSource, is when to ask the wmSource
	// again while no input comes or the source's reader waits (zero: not
	// set): a watermark the interval held back, or an input gone idle, is
	// told then.
	wmCheck    time.Time
	wmInterval time.Duration

	// traces time the barriers of the checkpoints this task aligns;
	// snapshotted is the newest it snapshotted (later barriers of it, when
	// not aligning, are not traced).
	traces      map[checkpoint.ID]*trace
	snapshotted checkpoint.ID

	stats *TaskStats
	// sink: the chain ends in a sink, whose commits are timed.
	sink bool

	// Unaligned checkpoints. overtakes: a source forwards barriers
	// overtaking (mode unaligned). channels says where each gate channel
	// comes from; persisting lists, per gate channel, the checkpoints
	// whose channel state its records are; pending holds the channel
	// state being collected, by checkpoint. restore is the channel state
	// to replay at start (nil: none).
	overtakes bool
	alignedTO bool
	// alignTimeout is the aligned-checkpoint timeout (alignedTO), and
	// nextPromote when the gate's barriers are next checked against it;
	// triggered holds when recent checkpoints were triggered (Unix
	// nanoseconds), which forwarded barriers carry on.
	alignTimeout time.Duration
	nextPromote  time.Time
	triggered    map[checkpoint.ID]int64
	channels     []channelInfo
	persisting   [][]checkpoint.ID
	pending      map[checkpoint.ID]*pendingState
	restores     []*channelRestore
	scratch      []Event

	// debloat, if set, sizes the input channels to the task's throughput.
	debloat *debloat
}

// debloat is a task's buffer debloating: its Debloater, and what it
// measures in the current period.
type debloat struct {
	*Debloater
	from   time.Time     // when the period began (zero: none yet)
	events int           // batches taken since
	waited time.Duration // time since spent waiting for input
}

// tick measures a period that ended by now and resizes the gate's
// channels; the first call begins the first period. A period lasts until
// the task took a batch in it: one that takes longer than DebloatPeriod
// to handle is measured with the time it took.
func (d *debloat) tick(now time.Time, g *Gate, stats *TaskStats) {
	if d.from.IsZero() {
		d.from = now
		return
	}
	elapsed := now.Sub(d.from)
	if elapsed < DebloatPeriod || d.events == 0 {
		return
	}
	if c, changed := d.Observe(d.events, g.Len(), elapsed-d.waited); changed {
		g.SetCapacity(c)
		stats.setInputCapacity(c)
	}
	d.from, d.events, d.waited = now, 0, 0
}

// maxPending bounds the checkpoints whose channel state a task collects at
// once (the aligner bounds them too).
const maxPending = 64

// maxTraces bounds the checkpoints a task traces at once.
const maxTraces = 16

// trace is when a task's barriers of one checkpoint arrived.
type trace struct {
	first    time.Time
	arrivals []time.Duration // per input channel, after the first; -1: none yet
}

func (t *task) send(ctx context.Context, r Report) {
	r.Task = t.id
	select {
	case t.reports <- r:
	case <-ctx.Done():
	}
}

// run opens the operators and runs the task until its input ends, it fails
// or ctx ends. A panic in an operator is a task failure.
func (t *task) run(ctx context.Context) (err error) {
	defer func() {
		if p := recover(); p != nil {
			buf := make([]byte, 8<<10)
			buf = buf[:rt.Stack(buf, false)]
			err = fmt.Errorf("task %s panicked: %v\n%s", t.id, p, buf)
			if perr, ok := p.(error); ok {
				// Kept, so that a panic with a permanent error
				// (operator.Permanent) fails the job at once.
				err = fmt.Errorf("task %s panicked: %w\n%s", t.id, perr, buf)
			}
		}
		for _, op := range t.ops {
			if cerr := op.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("task %s: close: %w", t.id, cerr)
			}
		}
	}()
	t.wm = operator.MinTime
	for i, op := range t.ops {
		if err := op.Open(t.contexts[i]); err != nil {
			return fmt.Errorf("task %s: open %s: %w", t.id, t.contexts[i].UID, err)
		}
		if tm, ok := op.(operator.Timed); ok {
			t.timed = append(t.timed, tm)
		}
		if et, ok := op.(operator.EventTimed); ok {
			t.eventTimed = append(t.eventTimed, et)
		}
	}
	if t.local != nil {
		if r := t.local.Restored(); r.LocalPieces+r.RemotePieces > 0 {
			t.contexts[0].Logger.Info("restored state", "checkpoint", t.contexts[0].Resumed,
				"localPieces", r.LocalPieces, "localBytes", r.LocalBytes, "remotePieces", r.RemotePieces, "remoteBytes", r.RemoteBytes)
		}
		if err := t.local.RestoreErr(); err != nil {
			t.contexts[0].Logger.Warn("restored state; the local copy could not keep all of what was downloaded, and the next restore reads what it misses from checkpoint storage", "err", err)
		}
	}
	t.wmSource, _ = t.ops[0].(operator.WatermarkSource)
	if t.gate != nil {
		t.chanWM, t.chanIdle = make([]int64, t.gate.Len()), make([]bool, t.gate.Len())
		for i := range t.chanWM {
			t.chanWM[i] = operator.MinTime
		}
	}
	if len(t.restores) > 0 {
		for _, r := range t.restores {
			if err := t.replay(r); err != nil {
				return err
			}
		}
		t.restores = nil
		t.send(ctx, Report{Kind: ReportReplayed})
	}
	if t.source != nil {
		return t.runSource(ctx)
	}
	return t.runInputs(ctx)
}

func (t *task) runSource(ctx context.Context) error {
	for {
		if err := t.drainMailbox(ctx); err != nil || t.finished {
			return err
		}
		var wakeAt time.Time
		if room := t.congested(); room != nil {
			// Elastic outputs forced what they had no room for: poll again
			// once there is room, taking triggers meanwhile.
			if err := t.wait(ctx, nil, room, time.Time{}); err != nil {
				return err
			}
			continue
		}
		if !t.inputEnded && t.suspendedAt == 0 {
			res, err := t.source.Poll()
			if err != nil {
				return fmt.Errorf("task %s: %w", t.id, err)
			}
			if err := t.outputErr(); err != nil {
				return err
			}
			if err := t.advance(); err != nil {
				return err
			}
			switch {
			case res.Exhausted:
				if err := t.endInput(ctx); err != nil {
					return err
				}
				if t.checkpointing {
					t.send(ctx, Report{Kind: ReportExhausted})
				}
				continue
			case res.IdleUntil.IsZero():
				continue
			}
			// A reader that waits does not hold event time back: the task
			// polls again when the interval lets a held-back watermark go,
			// or to find the source idle (watermarkCheck), as Flink's
			// periodic watermark emitter runs whatever the reader does.
			t.wmCheck = time.Time{}
			wakeAt = res.IdleUntil
			if at := t.watermarkCheck(); !at.IsZero() && at.Before(wakeAt) {
				wakeAt = at
			}
		}
		if err := t.flush(); err != nil {
			return err
		}
		if err := t.wait(ctx, nil, nil, wakeAt); err != nil {
			return err
		}
	}
}

func (t *task) runInputs(ctx context.Context) error {
	for {
		if err := t.drainMailbox(ctx); err != nil || t.finished {
			return err
		}
		if t.alignedTO {
			now := t.now()
			if err := t.aligned(ctx, t.aligner.Tick(now), Event{}); err != nil {
				return err
			}
			if !now.Before(t.nextPromote) {
				// Barriers due to switch to unaligned overtake where they
				// wait in the input, rather than after the backlog.
				t.gate.Promote(now.Add(-t.alignTimeout).UnixNano())
				t.nextPromote = now.Add(max(min(t.alignTimeout/4, 5*time.Millisecond), 100*time.Microsecond))
			}
		}
		if t.debloat != nil {
			t.debloat.tick(time.Now(), t.gate, t.stats)
		}
		if room := t.congested(); room != nil {
			// Elastic outputs forced what they had no room for: take
			// barriers and cancel markers only until there is room.
			if ch, ev, ok := t.gate.PollControl(t.aligner.Blocked); ok {
				if err := t.handle(ctx, ch, ev); err != nil {
					return err
				}
				continue
			}
			if err := t.wait(ctx, t.gate.Ready(), room, t.switchAt()); err != nil {
				return err
			}
			continue
		}
		if err := t.fireTimers(); err != nil {
			return err
		}
		if !t.wmCheck.IsZero() && !t.now().Before(t.wmCheck) {
			t.wmCheck = time.Time{}
			if err := t.advance(); err != nil {
				return err
			}
		}
		ch, ev, ok := t.gate.Poll(t.aligner.Blocked)
		if ok {
			if t.debloat != nil && ev.Kind == KindBatch {
				t.debloat.events++
			}
			if err := t.handle(ctx, ch, ev); err != nil {
				return err
			}
			continue
		}
		if err := t.flush(); err != nil {
			return err
		}
		var wakeAt time.Time
		for _, tm := range t.timed {
			if t.inputEnded {
				break // timers fire no more
			}
			if at, ok := tm.NextTimer(); ok && (wakeAt.IsZero() || at.Before(wakeAt)) {
				wakeAt = at
			}
		}
		for _, at := range []time.Time{t.switchAt(), t.watermarkCheck()} {
			if !at.IsZero() && (wakeAt.IsZero() || at.Before(wakeAt)) {
				wakeAt = at
			}
		}
		if err := t.wait(ctx, t.gate.Ready(), nil, wakeAt); err != nil {
			return err
		}
	}
}

// watermarkCheck is when a source, or a task with inputs whose watermark
// an operator makes (AssignWatermarks), asks for its watermark again while
// no input comes, as Flink's periodic watermark emitter does (zero:
// never): when the interval lets the next watermark go, else an interval
// on, for an input that may go idle. An idle task is asked again when
// records come.
func (t *task) watermarkCheck() time.Time {
	if t.wmSource == nil || t.inputEnded || t.idle {
		return time.Time{}
	}
	if t.wmCheck.IsZero() {
		t.wmCheck = t.wmNext
		if now := t.now(); !t.wmCheck.After(now) {
			t.wmCheck = now.Add(max(t.wmInterval, time.Millisecond))
		}
	}
	return t.wmCheck
}

// switchAt is when the task wakes for the aligned-checkpoint timeout to
// switch the checkpoint in alignment (zero: none): just past its deadline,
// which Tick must see passed, not reached.
func (t *task) switchAt() time.Time {
	at, ok := t.aligner.Deadline()
	if !ok {
		return time.Time{}
	}
	return at.Add(time.Millisecond)
}

// congested returns what signals room on an output that has none after
// forcing events beyond it (elastic outputs), else nil.
func (t *task) congested() <-chan struct{} {
	for _, o := range t.outputs {
		if r := o.Congested(); r != nil {
			return r
		}
	}
	return nil
}

// wait blocks until input may be ready, an output may have room (room:
// the time waited is then back-pressure, not idleness), a control message
// comes, wakeAt passes or ctx ends. A control message is handled here.
func (t *task) wait(ctx context.Context, ready, room <-chan struct{}, wakeAt time.Time) error {
	t.flushChannels()
	var timeout <-chan time.Time
	if !wakeAt.IsZero() {
		d := wakeAt.Sub(t.now())
		if d <= 0 {
			return nil
		}
		tm := time.NewTimer(d)
		defer tm.Stop()
		timeout = tm.C
	}
	start := time.Now()
	defer func() {
		d := time.Since(start)
		if room != nil {
			t.stats.addBackPressure(d)
		} else {
			t.stats.addIdle(d)
			if t.debloat != nil {
				t.debloat.waited += d
			}
		}
	}()
	select {
	case <-ready:
	case <-room:
	case <-timeout:
	case m := <-t.mailbox:
		return t.control(ctx, m)
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	return nil
}

// drainMailbox handles every waiting control message. It also notices the
// end of ctx: a task that never waits (its input always ready, its output
// never full) would not see it otherwise.
func (t *task) drainMailbox(ctx context.Context) error {
	for {
		select {
		case m := <-t.mailbox:
			if err := t.control(ctx, m); err != nil || t.finished {
				return err
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		default:
			return nil
		}
	}
}

func (t *task) fireTimers() error {
	if len(t.timed) == 0 || t.inputEnded {
		return nil
	}
	now := t.now()
	for _, tm := range t.timed {
		if at, ok := tm.NextTimer(); ok && !at.After(now) {
			if err := tm.FireTimers(now); err != nil {
				return fmt.Errorf("task %s: timer: %w", t.id, err)
			}
		}
	}
	return t.outputErr()
}

func (t *task) handle(ctx context.Context, ch int, ev Event) error {
	switch ev.Kind {
	case KindBatch:
		if len(t.persisting[ch]) > 0 {
			t.persist(ch, t.persisting[ch], ev)
		}
		err := t.input.ProcessBatch(t.inputOf[ch], ev.Batch, ev.Times, ev.Groups)
		t.gate.Recycle(ch, ev)
		if err != nil {
			return fmt.Errorf("task %s: %w", t.id, err)
		}
		if err := t.outputErr(); err != nil {
			return err
		}
		if t.wmSource != nil {
			return t.advance() // an assigner's watermark follows its records
		}
		return nil
	case KindWatermark:
		t.chanWM[ch] = max(t.chanWM[ch], ev.Time)
		t.chanIdle[ch] = false
		return t.advance()
	case KindIdle:
		t.chanIdle[ch] = true
		return t.advance()
	case KindBarrier:
		t.stats.barrierArrived(ev.ID, t.gate.Len(), t.now())
		if err := t.awaitCompleted(ctx, ev.Completed); err != nil {
			return err
		}
		t.traceBarrier(ch, ev.ID)
		var triggered time.Time
		if ev.Time != 0 {
			t.triggered[ev.ID] = ev.Time
			triggered = time.Unix(0, ev.Time)
		}
		acts := t.aligner.OnBarrierTriggered(ch, ev.ID, triggered, ev.Aligned)
		if ev.Overtaken > 0 && t.keepsOvertaken(ch, ev.ID, acts) {
			// The batches the barrier overtook precede it: they are
			// channel state of its checkpoint, persisted now rather than
			// when the task gets to them.
			t.scratch = t.gate.Overtaken(ch, ev.Overtaken, t.scratch[:0])
			t.persist(ch, []checkpoint.ID{ev.ID}, t.scratch...)
			clear(t.scratch)
		}
		if err := t.aligned(ctx, acts, ev); err != nil || !t.alignedTO {
			return err
		}
		// A barrier that comes after its timeout (it counts from the
		// trigger) switches its checkpoint now, not after the next batch.
		return t.aligned(ctx, t.aligner.Tick(t.now()), Event{})
	case KindCancel:
		return t.aligned(ctx, t.aligner.OnCancel(ch, ev.ID), ev)
	case KindEndOfData:
		if t.ended[ch] {
			panic(fmt.Sprintf("runtime: task %s: end of data twice on channel %d", t.id, ch))
		}
		t.ended[ch] = true
		if t.endedCount++; t.endedCount == len(t.ended) {
			return t.endInput(ctx)
		}
		return nil
	}
	panic(fmt.Sprintf("runtime: event kind %d", ev.Kind))
}

// awaitCompleted handles control messages until the task has been told
// that checkpoint id completed. A barrier carries the newest completion
// announced before its checkpoint was triggered, and the notice may come
// after the barrier (it travels by another path: a control connection to
// a worker); a snapshot taken before it would be built on an older
// checkpoint, whose shared files storage may have deleted since (design
// note 89). The driver sent the notice before the trigger, so it comes.
func (t *task) awaitCompleted(ctx context.Context, id checkpoint.ID) error {
	if t.completed < id {
		t.flushChannels()
	}
	for t.completed < id {
		select {
		case m := <-t.mailbox:
			if err := t.control(ctx, m); err != nil {
				return err
			}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// traceBarrier notes when checkpoint id's barrier arrived on channel ch.
func (t *task) traceBarrier(ch int, id checkpoint.ID) {
	if id <= t.snapshotted {
		return
	}
	now := t.now()
	if t.traces == nil {
		t.traces = map[checkpoint.ID]*trace{}
	}
	tr, ok := t.traces[id]
	if !ok {
		tr = &trace{first: now, arrivals: make([]time.Duration, t.gate.Len())}
		for i := range tr.arrivals {
			tr.arrivals[i] = -1
		}
		t.traces[id] = tr
		// Barriers of an aborted checkpoint may still arrive after its
		// abort: keep the newest few traces only.
		for old := range t.traces {
			if old+maxTraces <= id {
				delete(t.traces, old)
			}
		}
		for old := range t.triggered {
			if old+maxTraces <= id {
				delete(t.triggered, old)
			}
		}
	}
	tr.arrivals[ch] = now.Sub(tr.first)
}

// keepsOvertaken says whether the batches that barrier id, read from
// channel ch, overtook are channel state of id here: id is aligning (ch is
// blocked now, and they come after the snapshot) or snapshotted (now, or
// before: ch's persistence ends with the barrier), not declined.
func (t *task) keepsOvertaken(ch int, id checkpoint.ID, acts []barrier.Action) bool {
	keep := slices.Contains(t.aligner.Aligning(), id)
	for _, a := range acts {
		switch a := a.(type) {
		case barrier.Snapshot:
			keep = keep || a.ID == id
		case barrier.EndPersist:
			keep = keep || a.ID == id && a.Channel == ch && t.pending[id] != nil
		case barrier.Decline:
			if a.ID == id {
				return false
			}
		}
	}
	return keep
}

// persist adds batches read from channel ch to the channel state of the
// checkpoints ids.
func (t *task) persist(ch int, ids []checkpoint.ID, batches ...Event) {
	for _, b := range batches {
		enc := AppendBatch(nil, b, t.channels[ch].codec)
		for _, id := range ids {
			t.pendingOf(id).add(ch, enc)
		}
	}
}

// pendingOf returns the channel state checkpoint id collects, making it if
// need be (the oldest goes beyond maxPending: the aligner has declined it).
func (t *task) pendingOf(id checkpoint.ID) *pendingState {
	p := t.pending[id]
	if p != nil {
		return p
	}
	if t.pending == nil {
		t.pending = map[checkpoint.ID]*pendingState{}
	}
	if len(t.pending) == maxPending {
		delete(t.pending, slices.Min(slices.Collect(maps.Keys(t.pending))))
	}
	p = &pendingState{}
	t.pending[id] = p
	return p
}

// aligned carries out the aligner's decisions; by is the event that made
// them (its Aligned flag goes on with the barrier it forwards).
func (t *task) aligned(ctx context.Context, acts []barrier.Action, by Event) error {
	for _, a := range slices.Clone(acts) {
		var err error
		switch a := a.(type) {
		case barrier.Block, barrier.UnblockAll:
			// The gate asks the aligner which channels it may read.
		case barrier.Snapshot:
			// An unaligned snapshot is through its barriers once its
			// channel state is complete (ChannelStateComplete).
			t.stats.snapshotted(a.ID, a.Unaligned, a.Unaligned && t.alignedTO, !a.Unaligned)
			t.snapshot(ctx, a.ID, a.Unaligned)
			delete(t.traces, a.ID)
			t.snapshotted = max(t.snapshotted, a.ID)
		case barrier.Forward:
			// NB: the task was told of every completion its barriers of
			// a.ID carried; it may know of a newer one, which was sent to
			// every task too.
			b := Event{Kind: KindBarrier, ID: a.ID, Aligned: by.Kind == KindBarrier && by.ID == a.ID && by.Aligned, Time: t.triggered[a.ID], Completed: t.completed}
			if a.Overtake {
				err = t.overtake(b)
			} else {
				err = t.broadcast(b)
			}
		case barrier.PersistInput:
			if t.pending[a.ID] != nil { // else its snapshot failed
				t.persisting[a.Channel] = append(t.persisting[a.Channel], a.ID)
			}
		case barrier.EndPersist:
			t.persisting[a.Channel] = slices.DeleteFunc(t.persisting[a.Channel], func(id checkpoint.ID) bool { return id == a.ID })
		case barrier.ChannelStateComplete:
			t.stats.barriersDone(a.ID)
			if p := t.pending[a.ID]; p != nil && p.snapshot != nil {
				delete(t.pending, a.ID)
				t.write(ctx, a.ID, p.snapshot, p)
			}
		case barrier.Decline:
			delete(t.pending, a.ID)
			t.send(ctx, Report{Kind: ReportDecline, ID: a.ID, Err: a.Cause})
		case barrier.ForwardCancel:
			delete(t.pending, a.ID)
			err = t.broadcast(Event{Kind: KindCancel, ID: a.ID})
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (t *task) control(ctx context.Context, m Control) error {
	switch m.Kind {
	case ControlTrigger:
		if t.source == nil || t.finished {
			return nil
		}
		t.stats.triggered(m.ID, t.now())
		if t.snapshot(ctx, m.ID, false) {
			t.stats.snapshotted(m.ID, false, false, true)
			if m.Stop {
				t.suspendedAt = m.ID // nothing after the savepoint's barrier
			}
			// NB: the mailbox is in order: the notice of m.Completed
			// came before the trigger.
			b := Event{Kind: KindBarrier, ID: m.ID, Aligned: m.Aligned, Time: unixNano(m.Triggered), Completed: m.Completed}
			if t.overtakes && !m.Aligned {
				return t.overtake(b)
			}
			return t.broadcast(b)
		}
		return t.broadcast(Event{Kind: KindCancel, ID: m.ID})
	case ControlComplete:
		t.completed = max(t.completed, m.ID)
		if t.local != nil {
			t.local.Complete(m.ID)
		}
		start := time.Now()
		for i, op := range t.ops {
			if err := op.NotifyComplete(m.ID); err != nil {
				return fmt.Errorf("task %s: %s: checkpoint %d complete: %w", t.id, t.contexts[i].UID, m.ID, err)
			}
		}
		if t.sink {
			t.stats.addCommit(time.Since(start))
		}
		if err := t.outputErr(); err != nil {
			return err
		}
		if m.EndOfInput && !t.inputEnded {
			panic(fmt.Sprintf("runtime: task %s: checkpoint %d ends the job, but the task's input has not ended", t.id, m.ID))
		}
		if m.EndOfInput || m.Stop {
			t.finished = true
			t.send(ctx, Report{Kind: ReportFinished})
		}
	case ControlAbort:
		delete(t.traces, m.ID)
		delete(t.pending, m.ID)
		if t.suspendedAt == m.ID {
			t.suspendedAt = 0 // the savepoint to stop with failed: go on
		}
		if t.aligner != nil {
			if err := t.aligned(ctx, t.aligner.Abort(m.ID), Event{}); err != nil {
				return err
			}
		}
		for _, op := range t.ops {
			op.NotifyAborted(m.ID)
		}
		if t.local != nil {
			t.local.Abort(m.ID)
		}
	}
	return nil
}

// snapshot takes the synchronous part of checkpoint id in every operator of
// the chain and hands the asynchronous part to the pool, which acknowledges
// or declines. It reports whether the synchronous part succeeded. An
// unaligned snapshot is written once its channel state is complete
// (barrier.ChannelStateComplete); an aligned one, with the channel state
// collected while it aligned (batches overtaken on blocked channels).
func (t *task) snapshot(ctx context.Context, id checkpoint.ID, unaligned bool) bool {
	start := t.now()
	parts := &snapshotParts{unaligned: unaligned}
	if tr := t.traces[id]; tr != nil {
		parts.align, parts.arrivals = start.Sub(tr.first), tr.arrivals
	}
	parts.asyncs = make([]operator.Async, 0, len(t.ops))
	for i, op := range t.ops {
		a, err := op.Snapshot(id)
		if err != nil {
			delete(t.pending, id)
			t.send(ctx, Report{Kind: ReportDecline, ID: id, Err: fmt.Errorf("%s: snapshot: %w", t.contexts[i].UID, err)})
			return false
		}
		if a != nil {
			parts.asyncs = append(parts.asyncs, a)
		}
	}
	parts.sync = t.now().Sub(start)
	if unaligned {
		t.pendingOf(id).snapshot = parts
		return true
	}
	p := t.pending[id]
	delete(t.pending, id)
	t.write(ctx, id, parts, p)
	return true
}

// decline declines checkpoint id for err. The stack of a panic (a
// state.PanicError) goes to the log here, once, and the decline says where
// to find it: the decline's message is quoted by every warning, event and
// status of the checkpoint, and in a cluster crosses to the coordinator.
func (t *task) decline(ctx context.Context, id checkpoint.ID, err error) {
	var p *state.PanicError
	if errors.As(err, &p) {
		t.contexts[0].Logger.Error("a snapshot panicked; the checkpoint is declined", "checkpoint", id, "task", t.id, "err", err, "stack", string(p.Stack))
		err = fmt.Errorf("%w (the stack is in the log of task %s)", err, t.id)
	}
	t.send(ctx, Report{Kind: ReportDecline, ID: id, Err: err})
}

// write hands a snapshot's asynchronous part, and its channel state (p,
// if any), to the pool, which acknowledges or declines.
func (t *task) write(ctx context.Context, id checkpoint.ID, parts *snapshotParts, p *pendingState) {
	var blob []byte
	if p != nil {
		blob = p.encode(t.channels)
	}
	var w operator.Writer = storageWriter{store: t.store, id: id}
	if t.local != nil {
		w = t.local.Writer(id, storageWriter{store: t.store, id: id})
	}
	head := t.contexts[0]
	t.pool.submit(ctx, func() {
		defer func() {
			// A panic of the asynchronous part (a state codec's) declines
			// the checkpoint: on the pool's goroutine it would end the
			// process.
			if p := recover(); p != nil {
				err, ok := p.(error)
				if !ok {
					err = fmt.Errorf("%v", p)
				}
				t.decline(ctx, id, &state.PanicError{Err: fmt.Errorf("the snapshot's asynchronous part panicked: %w", err), Stack: debug.Stack()})
			}
		}()
		asyncStart := t.now()
		var handles []checkpoint.Handle
		for _, a := range parts.asyncs {
			hs, err := a(w)
			if err != nil {
				t.decline(ctx, id, err)
				return
			}
			handles = append(handles, hs...)
		}
		if blob != nil {
			h, err := w.Write(checkpoint.Handle{Operator: head.UID, Subtask: head.Subtask, Parallelism: head.Parallelism, Kind: KindChannelState}, blob)
			if err != nil {
				t.send(ctx, Report{Kind: ReportDecline, ID: id, Err: fmt.Errorf("channel state: %w", err)})
				return
			}
			handles = append(handles, h)
		}
		if t.local != nil {
			t.local.Referenced(id, handles)
			if err := t.local.WriteErr(); err != nil {
				head.Logger.Warn("checkpoint written; its local copy is incomplete, and a restore will read what it misses from checkpoint storage", "checkpoint", id, "err", err)
			}
		}
		t.send(ctx, Report{Kind: ReportAck, ID: id, Handles: handles, Sync: parts.sync, Align: parts.align, Async: t.now().Sub(asyncStart), Arrivals: parts.arrivals,
			Unaligned: parts.unaligned, Switched: parts.unaligned && t.alignedTO, ChannelState: int64(len(blob))})
	})
}

type storageWriter struct {
	store storage.Storage
	id    checkpoint.ID
}

func (w storageWriter) Write(h checkpoint.Handle, data []byte) (checkpoint.Handle, error) {
	return w.store.WriteState(w.id, h, data)
}

func (w storageWriter) WriteShared(h checkpoint.Handle, r io.Reader) (checkpoint.Handle, error) {
	return w.store.WriteShared(w.id, h, r)
}

// endInput handles the end of the task's input, in Flink's FLIP-147 order:
// every operator of the chain finishes, head first (emitting what it
// buffered; timers stop), and end of data goes downstream. Everything
// emitted so far precedes the barrier of the final checkpoint, which covers
// it. Without checkpoints the task ends here.
func (t *task) endInput(ctx context.Context) error {
	// The input is over: event time is too. Every event-time timer and
	// window fires, and the output is covered by the final checkpoint.
	if err := t.advanceTo(operator.MaxTime); err != nil {
		return err
	}
	for i, op := range t.ops {
		if err := op.Finish(); err != nil {
			return fmt.Errorf("task %s: %s: finish: %w", t.id, t.contexts[i].UID, err)
		}
		if err := t.outputErr(); err != nil {
			return err
		}
	}
	if err := t.broadcast(Event{Kind: KindEndOfData}); err != nil {
		return err
	}
	t.inputEnded = true
	if !t.checkpointing {
		t.finished = true
		t.send(ctx, Report{Kind: ReportFinished})
	}
	return nil
}

func (t *task) flush() error {
	for _, o := range t.outputs {
		if err := o.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// flushChannels sends what the outputs' channels hold (Flusher) before
// the task waits; unlike flush, it leaves the records not pushed yet
// where they are (an unaligned barrier may take them as its tail).
func (t *task) flushChannels() {
	for _, o := range t.outputs {
		o.FlushChannels()
	}
}

func (t *task) outputErr() error {
	for _, o := range t.outputs {
		if err := o.Err(); err != nil {
			return err
		}
	}
	return nil
}

func (t *task) broadcast(e Event) error {
	for _, o := range t.outputs {
		if err := o.Broadcast(e); err != nil {
			return err
		}
	}
	return nil
}

// overtake sends barrier b on every output channel ahead of what is
// queued there (Output.Overtake).
func (t *task) overtake(b Event) error {
	for _, o := range t.outputs {
		if err := o.Overtake(b); err != nil {
			return err
		}
	}
	return nil
}

// advance moves the task's watermark to what its watermark source or its
// inputs now say, and tells downstream of a change of idleness.
func (t *task) advance() error {
	var wm int64
	idle := false
	switch {
	case t.wmSource != nil:
		wm, idle = t.wmSource.Watermark()
		if wm > t.wm && !idle && !t.idle && wm != operator.MaxTime && t.now().Before(t.wmNext) {
			return nil // at most one watermark per interval; an idle task says at once that it is active again
		}
	case len(t.chanWM) > 0:
		// Idle channels do not hold the watermark back. When every channel
		// is idle, a task whose operators fire nothing by event time (map,
		// filter, a union) goes idle too, as in Flink: what it passes on
		// when an input is active again is late downstream just as an idle
		// source's records are. One with windows or event-time timers keeps
		// its watermark and does not go idle (note 27): they fire when its
		// watermark moves on, and were it idle, its consumers would move on
		// without it, and what it fires then would be late for them.
		// A channel whose input ended (its watermark MaxTime) holds
		// nothing back, and says nothing of where event time is: with the
		// others idle, the task is idle, not at the end (its watermark at
		// MaxTime, a window of theirs would fire early and their records
		// after the pause be late: FLINK-38477). It moves to the least
		// watermark of those others, which none of them will send records
		// behind.
		wm = operator.MaxTime
		open := int64(operator.MaxTime) // the least of the channels not ended
		all, ended := true, true
		for c, w := range t.chanWM {
			if w == operator.MaxTime && !t.endedAsActive {
				continue
			}
			ended, open = false, min(open, w)
			if !t.chanIdle[c] {
				wm, all = min(wm, w), false
			}
		}
		if all && !ended {
			wm, idle = open, len(t.eventTimed) == 0
		}
	default:
		return nil // a source without event time
	}
	if wm > t.wm {
		if err := t.advanceTo(wm); err != nil {
			return err
		}
	}
	if idle != t.idle {
		t.idle = idle
		if idle {
			return t.broadcast(Event{Kind: KindIdle})
		}
		return t.broadcast(Event{Kind: KindWatermark, Time: t.wm}) // active again
	}
	return nil
}

// advanceTo moves the watermark to wm: the operators fire what is due, in
// chain order, and downstream hears of it after their output.
func (t *task) advanceTo(wm int64) error {
	if wm <= t.wm {
		return nil
	}
	t.wm, t.idle = wm, false
	t.stats.setWatermark(wm)
	if t.wmSource != nil {
		t.wmNext = t.now().Add(t.wmInterval)
	}
	for _, op := range t.eventTimed {
		if err := op.AdvanceWatermark(wm); err != nil {
			return fmt.Errorf("task %s: watermark: %w", t.id, err)
		}
		if err := t.outputErr(); err != nil {
			return err
		}
	}
	return t.broadcast(Event{Kind: KindWatermark, Time: wm})
}
