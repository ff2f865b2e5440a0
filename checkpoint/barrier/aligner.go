package barrier

import (
	"fmt"
	"slices"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// Mode is how a task aligns barriers.
type Mode int

const (
	// ExactlyOnce blocks channels that delivered barrier n until all have.
	ExactlyOnce Mode = iota + 1
	// AtLeastOnce never blocks.
	AtLeastOnce
	// Unaligned is exactly-once without alignment (Flink's FLIP-76): the
	// first barrier n is handled at once, and the records that cross the
	// cut are persisted as channel state. Savepoints and the final
	// checkpoint align as in ExactlyOnce (OnAlignedBarrier).
	Unaligned
)

func (m Mode) String() string {
	switch m {
	case ExactlyOnce:
		return "exactly-once"
	case AtLeastOnce:
		return "at-least-once"
	case Unaligned:
		return "unaligned"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// Action is a decision of the Aligner; see the package doc.
type Action interface{ isAction() }

type (
	// Block: stop reading Channel.
	Block struct{ Channel int }
	// UnblockAll: read every channel again.
	UnblockAll struct{}
	// Snapshot: take the task's snapshot for checkpoint ID. Unaligned: an
	// unaligned snapshot; the records queued on the output channels, which
	// the following Forward overtakes, are its output channel state, and
	// the task acknowledges ID only at ChannelStateComplete.
	Snapshot struct {
		ID        checkpoint.ID
		Unaligned bool
	}
	// Forward: emit barrier ID on every output channel; Overtake: in front
	// of each channel's queued records and end of data, not behind them
	// (behind its queued barriers and cancel markers, which keep their
	// order).
	Forward struct {
		ID       checkpoint.ID
		Overtake bool
	}
	// PersistInput: persist the records read from Channel from now on,
	// until EndPersist, as input channel state of checkpoint ID; they are
	// processed as usual too.
	PersistInput struct {
		Channel int
		ID      checkpoint.ID
	}
	// EndPersist: stop persisting Channel's records for checkpoint ID. Its
	// barrier ID came, or the checkpoint is over here (a Decline or
	// ForwardCancel of ID in the same actions, or the coordinator's abort
	// of ID, says so: its channel state is then discarded).
	EndPersist struct {
		Channel int
		ID      checkpoint.ID
	}
	// ChannelStateComplete: every input channel's state of unaligned
	// checkpoint ID is complete; the task acknowledges ID once its
	// snapshot and all its channel state are durable.
	ChannelStateComplete struct{ ID checkpoint.ID }
	// Decline: tell the coordinator the task will not take checkpoint ID.
	Decline struct {
		ID    checkpoint.ID
		Cause error
	}
	// ForwardCancel: emit a cancel marker for ID on every output channel.
	ForwardCancel struct{ ID checkpoint.ID }
)

func (Block) isAction()                {}
func (UnblockAll) isAction()           {}
func (Snapshot) isAction()             {}
func (Forward) isAction()              {}
func (Decline) isAction()              {}
func (ForwardCancel) isAction()        {}
func (PersistInput) isAction()         {}
func (EndPersist) isAction()           {}
func (ChannelStateComplete) isAction() {}

func (a Block) String() string    { return fmt.Sprintf("block %d", a.Channel) }
func (UnblockAll) String() string { return "unblock-all" }
func (a Snapshot) String() string {
	if a.Unaligned {
		return fmt.Sprintf("snapshot %d unaligned", a.ID)
	}
	return fmt.Sprintf("snapshot %d", a.ID)
}
func (a Forward) String() string {
	if a.Overtake {
		return fmt.Sprintf("forward %d overtaking", a.ID)
	}
	return fmt.Sprintf("forward %d", a.ID)
}
func (a PersistInput) String() string { return fmt.Sprintf("persist-input %d of %d", a.Channel, a.ID) }
func (a EndPersist) String() string   { return fmt.Sprintf("end-persist %d of %d", a.Channel, a.ID) }
func (a ChannelStateComplete) String() string {
	return fmt.Sprintf("channel-state-complete %d", a.ID)
}
func (a Decline) String() string       { return fmt.Sprintf("decline %d: %v", a.ID, a.Cause) }
func (a ForwardCancel) String() string { return fmt.Sprintf("forward-cancel %d", a.ID) }

// maxTracked bounds the checkpoints tracked at once in at-least-once mode
// (beyond it the oldest is declined), and the ids remembered as over.
const maxTracked = 64

// progress is one checkpoint's alignment, or its persistence after an
// unaligned snapshot: which channels delivered its barrier, whether it must
// align (OnAlignedBarrier), and when its alignment started.
type progress struct {
	id        checkpoint.ID
	seen      []bool
	mustAlign bool
	start     time.Time
}

// Option configures an Aligner; see AlignedTimeout.
type Option interface{ apply(*Aligner) }

type optionFunc func(*Aligner)

func (f optionFunc) apply(a *Aligner) { f(a) }

// AlignedTimeout switches a checkpoint (never one fed with OnAlignedBarrier:
// a savepoint or the final checkpoint) from aligned to unaligned at this
// task when its alignment has lasted longer than d, as Flink's
// aligned-checkpoint timeout does. Only with ExactlyOnce; zero, the
// default, never switches. Time is what Tick passes in.
func AlignedTimeout(d time.Duration) Option {
	return optionFunc(func(a *Aligner) { a.timeout = d })
}

// Aligner aligns barriers for one task. The zero value is not usable; build
// one with New. See the package doc.
type Aligner struct {
	mode    Mode
	blocked []bool
	// lastDone is the newest checkpoint snapshotted here; every id up to it
	// is over.
	lastDone checkpoint.ID
	// over holds ids above lastDone that are over here: declined, cancelled
	// or aborted. Ascending, at most maxTracked (the oldest is forgotten).
	over []checkpoint.ID
	// tracked holds checkpoints in alignment, ascending: at most one in
	// exactly-once and unaligned mode, at most maxTracked in at-least-once
	// mode.
	tracked []progress
	// persisting holds the unaligned checkpoints snapshotted here whose
	// barrier has not come on every channel yet, ascending, at most
	// maxTracked: the channels that have not delivered it are persisted.
	persisting []progress
	// timeout is the aligned-checkpoint timeout (0: none); now is the
	// time the last Tick passed in.
	timeout time.Duration
	now     time.Time
	out     []Action
}

// New builds an Aligner over channels input channels (at least one).
func New(mode Mode, channels int, opts ...Option) *Aligner {
	if channels < 1 {
		panic(fmt.Sprintf("barrier: %d input channels", channels))
	}
	if mode != ExactlyOnce && mode != AtLeastOnce && mode != Unaligned {
		panic(fmt.Sprintf("barrier: invalid %v", mode))
	}
	a := &Aligner{mode: mode, blocked: make([]bool, channels)}
	for _, o := range opts {
		o.apply(a)
	}
	if a.timeout < 0 || (a.timeout > 0 && mode != ExactlyOnce) {
		panic(fmt.Sprintf("barrier: aligned timeout %v in %v mode", a.timeout, mode))
	}
	return a
}

// aligns says whether the mode aligns (and blocks) at all: exactly-once, and
// the barriers fed with OnAlignedBarrier in unaligned mode.
func (a *Aligner) aligns() bool { return a.mode != AtLeastOnce }

// Blocked reports whether channel c must not be read now.
func (a *Aligner) Blocked(c int) bool { return a.blocked[c] }

// Aligning lists the checkpoints whose alignment is in progress, ascending.
func (a *Aligner) Aligning() []checkpoint.ID {
	ids := make([]checkpoint.ID, len(a.tracked))
	for i, p := range a.tracked {
		ids[i] = p.id
	}
	return ids
}

// Persisting lists the unaligned checkpoints whose input channel state is
// being persisted, ascending.
func (a *Aligner) Persisting() []checkpoint.ID {
	ids := make([]checkpoint.ID, len(a.persisting))
	for i, p := range a.persisting {
		ids[i] = p.id
	}
	return ids
}

// OnBarrier handles barrier id of a checkpoint read from channel c. NB: the
// returned slice is reused by the next call.
func (a *Aligner) OnBarrier(c int, id checkpoint.ID) []Action {
	return a.onBarrier(c, id, false, time.Time{})
}

// OnBarrierTriggered is OnBarrier (mustAlign false) or OnAlignedBarrier
// (true) for a barrier that says when its checkpoint was triggered: an
// alignment it starts counts from then, not from the last Tick, so that
// the aligned-checkpoint timeout counts the time its barriers spent in
// flight, as Flink's does. NB: the returned slice is reused by the next
// call.
func (a *Aligner) OnBarrierTriggered(c int, id checkpoint.ID, triggered time.Time, mustAlign bool) []Action {
	return a.onBarrier(c, id, mustAlign, triggered)
}

// OnAlignedBarrier handles barrier id, read from channel c, of a checkpoint
// that always aligns: a savepoint, or the final checkpoint after the end of
// input (its barrier must follow end of data on every channel, FLIP-147;
// an unaligned snapshot would forward it ahead of the task's own end of
// data). In other modes than Unaligned and with no timeout it is OnBarrier.
// NB: the returned slice is reused by the next call.
func (a *Aligner) OnAlignedBarrier(c int, id checkpoint.ID) []Action {
	return a.onBarrier(c, id, true, time.Time{})
}

func (a *Aligner) onBarrier(c int, id checkpoint.ID, mustAlign bool, triggered time.Time) []Action {
	a.out = a.out[:0]
	a.checkChannel(c)
	a.passed(c, id)
	if a.arrived(c, id) || a.isOver(id) {
		return a.out
	}
	if a.aligns() && len(a.tracked) > 0 && id < a.tracked[0].id {
		// Obsolete: a channel already delivered a newer barrier without
		// this one, so this checkpoint cannot be aligned here; nor later,
		// should the newer one end (abort, cancel marker) before another
		// copy of this one comes (review of 8246a71: it started then).
		a.markOver(id)
		return a.out
	}
	// NB: the first copy of a barrier decides whether its checkpoint
	// aligns: a copy that must align makes it so, and one that need not
	// joins an alignment under way.
	_, aligning := a.find(id)
	if a.mode == Unaligned && !mustAlign && !aligning {
		seen := make([]bool, len(a.blocked))
		seen[c] = true
		a.snapshotUnaligned(id, seen)
		return a.out
	}
	p := a.track(id, mustAlign, triggered)
	if p == nil || p.seen[c] {
		return a.out // duplicate barrier on one channel
	}
	p.seen[c] = true
	if a.aligns() && !a.complete(p) {
		a.blocked[c] = true
		a.out = append(a.out, Block{Channel: c})
	}
	a.finishComplete()
	return a.out
}

// Tick tells the aligner the time: an alignment starts at the time of the
// last Tick before its first barrier (or at the first Tick, if none came
// before), and with AlignedTimeout a checkpoint
// whose alignment has lasted longer than the timeout at now switches to
// unaligned: snapshot at once, forward overtaking, persist the channels
// that have not delivered its barrier, unblock. The driver calls it as its
// clock moves (and before it feeds an event, for a precise start). NB: the
// returned slice is reused by the next call.
func (a *Aligner) Tick(now time.Time) []Action {
	a.out = a.out[:0]
	a.now = now
	if a.timeout == 0 || len(a.tracked) == 0 {
		return a.out
	}
	// Exactly-once tracks one checkpoint at most.
	p := a.tracked[0]
	if p.start.IsZero() {
		// It started before the first Tick: it starts now.
		a.tracked[0].start = now
		return a.out
	}
	if p.mustAlign || now.Sub(p.start) <= a.timeout {
		return a.out
	}
	a.tracked = slices.Delete(a.tracked, 0, 1)
	a.snapshotUnaligned(p.id, p.seen)
	a.unblockAll()
	return a.out
}

// Deadline is when the checkpoint in alignment switches to unaligned, if
// one does: Tick switches it once the time is past this.
func (a *Aligner) Deadline() (time.Time, bool) {
	if a.timeout == 0 || len(a.tracked) == 0 {
		return time.Time{}, false
	}
	p := a.tracked[0]
	if p.mustAlign || p.start.IsZero() {
		return time.Time{}, false
	}
	return p.start.Add(a.timeout), true
}

// snapshotUnaligned takes the unaligned snapshot of id, whose barrier the
// channels in seen delivered, and persists the others until theirs comes.
func (a *Aligner) snapshotUnaligned(id checkpoint.ID, seen []bool) {
	if len(a.persisting) == maxTracked {
		old := a.persisting[0].id
		a.stopPersisting(0)
		a.out = append(a.out, Decline{ID: old, Cause: fmt.Errorf("more than %d unaligned checkpoints persist channel state: %w", maxTracked, checkpoint.ErrSubsumedAtTask)}, ForwardCancel{ID: old})
	}
	a.setDone(id)
	a.out = append(a.out, Snapshot{ID: id, Unaligned: true}, Forward{ID: id, Overtake: true})
	p := progress{id: id, seen: seen}
	for c, s := range seen {
		if !s {
			a.out = append(a.out, PersistInput{Channel: c, ID: id})
		}
	}
	if a.complete(&p) {
		a.out = append(a.out, ChannelStateComplete{ID: id})
		return
	}
	// Ids only grow past lastDone: the list stays ascending.
	a.persisting = append(a.persisting, p)
}

// arrived handles barrier id on channel c of a checkpoint whose channel
// state is being persisted: persistence of c ends, and with the last
// channel the channel state is complete. It reports whether id was one.
func (a *Aligner) arrived(c int, id checkpoint.ID) bool {
	i := a.persistingIndex(id)
	if i < 0 {
		return false
	}
	p := &a.persisting[i]
	if !p.seen[c] {
		p.seen[c] = true
		a.out = append(a.out, EndPersist{Channel: c, ID: id})
	}
	if a.complete(p) {
		a.persisting = slices.Delete(a.persisting, i, i+1)
		a.out = append(a.out, ChannelStateComplete{ID: id})
	}
	return true
}

func (a *Aligner) persistingIndex(id checkpoint.ID) int {
	return slices.IndexFunc(a.persisting, func(p progress) bool { return p.id == id })
}

// stopPersisting ends the persistence of a.persisting[i] before its
// barriers all came: the checkpoint is over here.
func (a *Aligner) stopPersisting(i int) {
	p := a.persisting[i]
	for c, s := range p.seen {
		if !s {
			a.out = append(a.out, EndPersist{Channel: c, ID: p.id})
		}
	}
	a.persisting = slices.Delete(a.persisting, i, i+1)
}

// setDone records the snapshot of id: every id up to it is over here,
// except those still persisting channel state.
func (a *Aligner) setDone(id checkpoint.ID) {
	a.lastDone = id
	keep := 0
	for keep < len(a.over) && a.over[keep] <= id {
		keep++
	}
	a.over = a.over[keep:]
}

// OnCancel handles a cancel marker for id read from channel c: its upstream
// declined id. The alignment of id is released and the marker is forwarded
// once.
func (a *Aligner) OnCancel(c int, id checkpoint.ID) []Action {
	a.out = a.out[:0]
	a.checkChannel(c)
	a.passed(c, id)
	if i := a.persistingIndex(id); i >= 0 {
		a.stopPersisting(i)
		a.out = append(a.out, ForwardCancel{ID: id})
		return a.out
	}
	if a.isOver(id) {
		return a.out
	}
	a.drop(id)
	a.markOver(id)
	a.out = append(a.out, ForwardCancel{ID: id})
	return a.out
}

// Abort handles the coordinator's announcement that checkpoint id was
// aborted: its alignment, and only its, is released. Every task hears of
// the abort from the coordinator, so nothing is forwarded or declined.
func (a *Aligner) Abort(id checkpoint.ID) []Action {
	a.out = a.out[:0]
	if i := a.persistingIndex(id); i >= 0 {
		a.stopPersisting(i)
		return a.out
	}
	if a.isOver(id) {
		return a.out
	}
	a.drop(id)
	a.markOver(id)
	return a.out
}

func (a *Aligner) checkChannel(c int) {
	if c < 0 || c >= len(a.blocked) {
		panic(fmt.Sprintf("barrier: channel %d of %d", c, len(a.blocked)))
	}
}

func (a *Aligner) isOver(id checkpoint.ID) bool {
	_, found := slices.BinarySearch(a.over, id)
	return id <= a.lastDone || found
}

func (a *Aligner) markOver(id checkpoint.ID) {
	i, found := slices.BinarySearch(a.over, id)
	if id <= a.lastDone || found {
		return
	}
	a.over = slices.Insert(a.over, i, id)
	if len(a.over) > maxTracked {
		a.over = slices.Delete(a.over, 0, 1)
	}
}

// passed handles channel c delivering a barrier or cancel marker for id:
// channels are FIFO and ids grow, so c will never deliver a barrier older
// than id that it has not delivered yet. Such alignments can never complete
// here; they are declined rather than left to time out.
func (a *Aligner) passed(c int, id checkpoint.ID) {
	for i := 0; i < len(a.persisting); {
		p := a.persisting[i]
		if p.id >= id || p.seen[c] {
			i++
			continue
		}
		a.stopPersisting(i)
		a.out = append(a.out, Decline{ID: p.id, Cause: fmt.Errorf("channel %d passed it with checkpoint %d: %w", c, id, checkpoint.ErrSubsumedAtTask)}, ForwardCancel{ID: p.id})
	}
	for i := 0; i < len(a.tracked); {
		p := a.tracked[i]
		if p.id >= id || p.seen[c] {
			i++
			continue
		}
		a.tracked = slices.Delete(a.tracked, i, i+1)
		a.markOver(p.id)
		a.out = append(a.out, Decline{ID: p.id, Cause: fmt.Errorf("channel %d passed it with checkpoint %d: %w", c, id, checkpoint.ErrSubsumedAtTask)})
		if a.aligns() {
			// Downstream tasks may be blocked on it: release them now.
			a.out = append(a.out, ForwardCancel{ID: p.id})
			a.unblockAll()
		}
	}
}

// track returns the alignment of id, starting it if need be. When
// maxTracked are in alignment, the oldest of them and id is declined; nil
// means that was id.
func (a *Aligner) track(id checkpoint.ID, mustAlign bool, triggered time.Time) *progress {
	i, found := a.find(id)
	if found {
		a.tracked[i].mustAlign = a.tracked[i].mustAlign || mustAlign
		return &a.tracked[i]
	}
	if len(a.tracked) == maxTracked {
		oldest := id
		if i > 0 {
			oldest = a.tracked[0].id
			a.tracked = slices.Delete(a.tracked, 0, 1)
			i--
		}
		a.markOver(oldest)
		a.out = append(a.out, Decline{ID: oldest, Cause: fmt.Errorf("more than %d checkpoints in alignment: %w", maxTracked, checkpoint.ErrSubsumedAtTask)})
		if oldest == id {
			return nil
		}
	}
	start := a.now
	if !triggered.IsZero() && (start.IsZero() || triggered.Before(start)) {
		start = triggered
	}
	a.tracked = slices.Insert(a.tracked, i, progress{id: id, seen: make([]bool, len(a.blocked)), mustAlign: mustAlign, start: start})
	return &a.tracked[i]
}

// find returns where id's alignment is in tracked, or would be, and
// whether it is there.
func (a *Aligner) find(id checkpoint.ID) (int, bool) {
	return slices.BinarySearchFunc(a.tracked, id, func(p progress, id checkpoint.ID) int {
		return cmpID(p.id, id)
	})
}

func cmpID(x, y checkpoint.ID) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func (a *Aligner) complete(p *progress) bool {
	return !slices.Contains(p.seen, false)
}

// finishComplete snapshots the newest tracked checkpoint whose barriers have
// all arrived; older ones are declined as subsumed.
func (a *Aligner) finishComplete() {
	for i := len(a.tracked) - 1; i >= 0; i-- {
		p := a.tracked[i]
		if !a.complete(&p) {
			continue
		}
		for _, old := range a.tracked[:i] {
			a.out = append(a.out, Decline{ID: old.id, Cause: fmt.Errorf("checkpoint %d aligned first: %w", p.id, checkpoint.ErrSubsumedAtTask)})
		}
		a.tracked = append(a.tracked[:0], a.tracked[i+1:]...)
		a.setDone(p.id)
		a.out = append(a.out, Snapshot{ID: p.id}, Forward{ID: p.id})
		a.unblockAll()
		return
	}
}

// drop forgets the alignment of id, if any. Only exactly-once and unaligned
// mode block, and they track one checkpoint: blocked channels belonged to it.
func (a *Aligner) drop(id checkpoint.ID) {
	i := slices.IndexFunc(a.tracked, func(p progress) bool { return p.id == id })
	if i < 0 {
		return
	}
	a.tracked = slices.Delete(a.tracked, i, i+1)
	a.unblockAll()
}

func (a *Aligner) unblockAll() {
	any := false
	for c, b := range a.blocked {
		if b {
			a.blocked[c] = false
			any = true
		}
	}
	if any {
		a.out = append(a.out, UnblockAll{})
	}
}
