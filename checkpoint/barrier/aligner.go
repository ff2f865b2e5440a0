package barrier

import (
	"fmt"

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
	// EndOfInput: every input channel has ended.
	EndOfInput struct{}
)

func (Block) isAction()         {}
func (UnblockAll) isAction()    {}
func (Snapshot) isAction()      {}
func (Forward) isAction()       {}
func (Decline) isAction()       {}
func (ForwardCancel) isAction() {}
func (EndOfInput) isAction()    {}

func (a Block) String() string         { return fmt.Sprintf("block %d", a.Channel) }
func (UnblockAll) String() string      { return "unblock-all" }
func (a Snapshot) String() string      { return fmt.Sprintf("snapshot %d", a.ID) }
func (a Forward) String() string       { return fmt.Sprintf("forward %d", a.ID) }
func (a Decline) String() string       { return fmt.Sprintf("decline %d: %v", a.ID, a.Cause) }
func (a ForwardCancel) String() string { return fmt.Sprintf("forward-cancel %d", a.ID) }
func (EndOfInput) String() string      { return "end-of-input" }

// maxTracked bounds the checkpoints tracked at once in at-least-once mode;
// beyond it the oldest is declined.
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
	mode     Mode
	ended    []bool
	live     int
	blocked  []bool
	lastDone checkpoint.ID // highest id snapshotted, declined, cancelled or aborted here
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
	return &Aligner{mode: mode, ended: make([]bool, channels), live: channels, blocked: make([]bool, channels)}
}

// Blocked reports whether channel c must not be read now.
func (a *Aligner) Blocked(c int) bool { return a.blocked[c] }

// Aligning is the newest checkpoint whose alignment is in progress.
func (a *Aligner) Aligning() (checkpoint.ID, bool) {
	if n := len(a.tracked); n > 0 {
		return a.tracked[n-1].id, true
	}
	return 0, false
}

// OnBarrier handles barrier id read from channel c. NB: the returned slice is
// reused by the next call.
func (a *Aligner) OnBarrier(c int, id checkpoint.ID) []Action {
	a.out = a.out[:0]
	a.checkChannel(c)
	if id <= a.lastDone || a.ended[c] {
		return a.out // obsolete: its checkpoint is over here
	}
	if a.mode == ExactlyOnce {
		if cur, ok := a.Aligning(); ok && id < cur {
			return a.out // obsolete: a newer checkpoint is being aligned
		} else if ok && id > cur {
			a.release(cur, fmt.Errorf("barrier %d on channel %d during alignment of %d: %w", id, c, cur, checkpoint.ErrSubsumedAtTask))
		}
	}
	p := a.track(id)
	if p.seen[c] {
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
// declined id. The alignment of id (and of any older checkpoint) is
// released, and the marker is forwarded once.
func (a *Aligner) OnCancel(c int, id checkpoint.ID) []Action {
	a.out = a.out[:0]
	a.checkChannel(c)
	if id <= a.lastDone {
		return a.out
	}
	a.dropUpTo(id, true)
	a.lastDone = id
	a.out = append(a.out, ForwardCancel{ID: id})
	return a.out
}

// Abort handles the coordinator's announcement that checkpoint id was
// aborted: its alignment, and any older one, is released.
func (a *Aligner) Abort(id checkpoint.ID) []Action {
	a.out = a.out[:0]
	if id <= a.lastDone {
		return a.out
	}
	a.dropUpTo(id, false)
	a.lastDone = id
	return a.out
}

// OnEndOfInput handles the end of channel c. It counts as having delivered
// every later barrier; when every channel has ended, EndOfInput follows.
func (a *Aligner) OnEndOfInput(c int) []Action {
	a.out = a.out[:0]
	a.checkChannel(c)
	if a.ended[c] {
		return a.out
	}
	a.ended[c] = true
	a.blocked[c] = false
	a.live--
	a.finishComplete()
	if a.live == 0 {
		a.out = append(a.out, EndOfInput{})
	}
	return a.out
}

func (a *Aligner) checkChannel(c int) {
	if c < 0 || c >= len(a.ended) {
		panic(fmt.Sprintf("barrier: channel %d of %d", c, len(a.ended)))
	}
}

func (a *Aligner) track(id checkpoint.ID) *progress {
	for i := range a.tracked {
		if a.tracked[i].id == id {
			return &a.tracked[i]
		}
	}
	if len(a.tracked) == maxTracked {
		old := a.tracked[0]
		a.tracked = a.tracked[1:]
		a.out = append(a.out, Decline{ID: old.id, Cause: fmt.Errorf("more than %d checkpoints in alignment: %w", maxTracked, checkpoint.ErrSubsumedAtTask)})
	}
	// Ids arrive in increasing order per channel, but across channels a
	// lower id can be new here; keep tracked sorted.
	i := len(a.tracked)
	for i > 0 && a.tracked[i-1].id > id {
		i--
	}
	a.tracked = append(a.tracked, progress{})
	copy(a.tracked[i+1:], a.tracked[i:])
	a.tracked[i] = progress{id: id, seen: make([]bool, len(a.ended))}
	return &a.tracked[i]
}

func (a *Aligner) complete(p *progress) bool {
	for c, seen := range p.seen {
		if !seen && !a.ended[c] {
			return false
		}
	}
	return true
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
		a.out = append(a.out, Snapshot{ID: p.id}, Forward{ID: p.id})
		a.unblockAll()
		return
	}
}

// release abandons the alignment of id in exactly-once mode: decline it and
// tell downstream.
func (a *Aligner) release(id checkpoint.ID, cause error) {
	a.tracked = a.tracked[:0]
	a.lastDone = id
	a.out = append(a.out, Decline{ID: id, Cause: cause}, ForwardCancel{ID: id})
	a.unblockAll()
}

// dropUpTo forgets the alignments of every id ≤ upTo. With decline set (a
// cancel marker), the ones below upTo are declined as subsumed; the
// coordinator already knows upTo itself failed.
func (a *Aligner) dropUpTo(upTo checkpoint.ID, decline bool) {
	keep := a.tracked[:0]
	dropped := false
	for _, p := range a.tracked {
		switch {
		case p.id > upTo:
			keep = append(keep, p)
			continue
		case decline && p.id < upTo:
			a.out = append(a.out, Decline{ID: p.id, Cause: fmt.Errorf("cancel marker %d: %w", upTo, checkpoint.ErrSubsumedAtTask)})
		}
		dropped = true
	}
	a.tracked = keep
	if dropped {
		// Only exactly-once blocks, and it tracks one checkpoint: the
		// blocked channels belonged to a dropped one.
		a.unblockAll()
	}
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
