package barrier

import (
	"fmt"
	"slices"

	"github.com/weirstream/weir/checkpoint"
)

// Mode is how a task aligns barriers.
type Mode int

const (
	// ExactlyOnce blocks channels that delivered barrier n until all have.
	ExactlyOnce Mode = iota + 1
	// AtLeastOnce never blocks.
	AtLeastOnce
)

func (m Mode) String() string {
	switch m {
	case ExactlyOnce:
		return "exactly-once"
	case AtLeastOnce:
		return "at-least-once"
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
	// Snapshot: take the task's snapshot for checkpoint ID.
	Snapshot struct{ ID checkpoint.ID }
	// Forward: emit barrier ID on every output channel.
	Forward struct{ ID checkpoint.ID }
	// Decline: tell the coordinator the task will not take checkpoint ID.
	Decline struct {
		ID    checkpoint.ID
		Cause error
	}
	// ForwardCancel: emit a cancel marker for ID on every output channel.
	ForwardCancel struct{ ID checkpoint.ID }
)

func (Block) isAction()         {}
func (UnblockAll) isAction()    {}
func (Snapshot) isAction()      {}
func (Forward) isAction()       {}
func (Decline) isAction()       {}
func (ForwardCancel) isAction() {}

func (a Block) String() string         { return fmt.Sprintf("block %d", a.Channel) }
func (UnblockAll) String() string      { return "unblock-all" }
func (a Snapshot) String() string      { return fmt.Sprintf("snapshot %d", a.ID) }
func (a Forward) String() string       { return fmt.Sprintf("forward %d", a.ID) }
func (a Decline) String() string       { return fmt.Sprintf("decline %d: %v", a.ID, a.Cause) }
func (a ForwardCancel) String() string { return fmt.Sprintf("forward-cancel %d", a.ID) }

// maxTracked bounds the checkpoints tracked at once in at-least-once mode
// (beyond it the oldest is declined), and the ids remembered as over.
const maxTracked = 64

// progress is one checkpoint's alignment: which channels delivered its
// barrier.
type progress struct {
	id   checkpoint.ID
	seen []bool
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
	// exactly-once mode, at most maxTracked in at-least-once mode.
	tracked []progress
	out     []Action
}

// New builds an Aligner over channels input channels (at least one).
func New(mode Mode, channels int) *Aligner {
	if channels < 1 {
		panic(fmt.Sprintf("barrier: %d input channels", channels))
	}
	if mode != ExactlyOnce && mode != AtLeastOnce {
		panic(fmt.Sprintf("barrier: invalid %v", mode))
	}
	return &Aligner{mode: mode, blocked: make([]bool, channels)}
}

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

// OnBarrier handles barrier id read from channel c. NB: the returned slice is
// reused by the next call.
func (a *Aligner) OnBarrier(c int, id checkpoint.ID) []Action {
	a.out = a.out[:0]
	a.checkChannel(c)
	a.passed(c, id)
	if a.isOver(id) {
		return a.out
	}
	if a.mode == ExactlyOnce && len(a.tracked) > 0 && id < a.tracked[0].id {
		// Obsolete: a channel already delivered a newer barrier without
		// this one, so this checkpoint cannot be aligned here.
		return a.out
	}
	p := a.track(id)
	if p == nil || p.seen[c] {
		return a.out // duplicate barrier on one channel
	}
	p.seen[c] = true
	if a.mode == ExactlyOnce && !a.complete(p) {
		a.blocked[c] = true
		a.out = append(a.out, Block{Channel: c})
	}
	a.finishComplete()
	return a.out
}

// OnCancel handles a cancel marker for id read from channel c: its upstream
// declined id. The alignment of id is released and the marker is forwarded
// once.
func (a *Aligner) OnCancel(c int, id checkpoint.ID) []Action {
	a.out = a.out[:0]
	a.checkChannel(c)
	a.passed(c, id)
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
	for i := 0; i < len(a.tracked); {
		p := a.tracked[i]
		if p.id >= id || p.seen[c] {
			i++
			continue
		}
		a.tracked = slices.Delete(a.tracked, i, i+1)
		a.markOver(p.id)
		a.out = append(a.out, Decline{ID: p.id, Cause: fmt.Errorf("channel %d passed it with checkpoint %d: %w", c, id, checkpoint.ErrSubsumedAtTask)})
		if a.mode == ExactlyOnce {
			// Downstream tasks may be blocked on it: release them now.
			a.out = append(a.out, ForwardCancel{ID: p.id})
			a.unblockAll()
		}
	}
}

// track returns the alignment of id, starting it if need be. When
// maxTracked are in alignment, the oldest of them and id is declined; nil
// means that was id.
func (a *Aligner) track(id checkpoint.ID) *progress {
	i, found := slices.BinarySearchFunc(a.tracked, id, func(p progress, id checkpoint.ID) int {
		return cmpID(p.id, id)
	})
	if found {
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
	a.tracked = slices.Insert(a.tracked, i, progress{id: id, seen: make([]bool, len(a.blocked))})
	return &a.tracked[i]
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
		a.lastDone = p.id
		keep := 0
		for keep < len(a.over) && a.over[keep] <= p.id {
			keep++
		}
		a.over = a.over[keep:]
		a.out = append(a.out, Snapshot{ID: p.id}, Forward{ID: p.id})
		a.unblockAll()
		return
	}
}

// drop forgets the alignment of id, if any. Only exactly-once blocks, and it
// tracks one checkpoint: blocked channels belonged to it.
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
