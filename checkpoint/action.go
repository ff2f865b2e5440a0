package checkpoint

import (
	"fmt"
	"time"
)

// Action is a decision of the Coordinator for its driver to carry out.
type Action interface{ isAction() }

// Trigger: reserve checkpoint ID in storage, then inject barrier ID at every
// source task. Final marks a checkpoint triggered after every source's input
// was exhausted: the bounded job may end with it (its NotifyComplete carries
// EndOfInput), so its barriers align in every mode, behind the end of data.
type Trigger struct {
	ID        ID
	Savepoint bool
	Final     bool
	At        time.Time
}

// Persist: write Metadata durably (the commit point), then report the
// outcome with Coordinator.Persisted.
type Persist struct{ Metadata *Metadata }

// NotifyComplete: tell every task that checkpoint ID is complete.
// Two-phase-commit sinks commit on it. EndOfInput is set when the checkpoint
// was triggered after every source had reported its input exhausted: its
// barriers followed end of data everywhere, so it covers every record the
// job emitted, and every task now ends (Flink's FLIP-147 order).
type NotifyComplete struct {
	ID         ID
	EndOfInput bool
}

// Abort: tell every task that checkpoint ID was aborted (they release its
// alignment, and only its) and delete what was written for it. Sink
// transactions pre-committed at ID stay pending: the next completed
// checkpoint commits them.
type Abort struct {
	ID     ID
	Reason Reason
	Cause  error
}

// Discard: delete completed checkpoint ID and its files; it is no longer
// retained.
type Discard struct{ ID ID }

// DiscardState: delete the state a task wrote for a checkpoint that is not
// pending any more (a late or unknown acknowledgement).
type DiscardState struct {
	ID      ID
	Task    TaskID
	Handles []Handle
}

// FailJob: too many consecutive checkpoint failures; fail the job over.
type FailJob struct{ Cause error }

func (Trigger) isAction()        {}
func (Persist) isAction()        {}
func (NotifyComplete) isAction() {}
func (Abort) isAction()          {}
func (Discard) isAction()        {}
func (DiscardState) isAction()   {}
func (FailJob) isAction()        {}

func (a Trigger) String() string {
	s := fmt.Sprintf("trigger %d", a.ID)
	if a.Savepoint {
		s += " savepoint"
	}
	if a.Final {
		s += " final"
	}
	return s
}
func (a Persist) String() string { return fmt.Sprintf("persist %d", a.Metadata.ID) }
func (a NotifyComplete) String() string {
	if a.EndOfInput {
		return fmt.Sprintf("notify-complete %d end-of-input", a.ID)
	}
	return fmt.Sprintf("notify-complete %d", a.ID)
}
func (a Abort) String() string {
	if a.Cause != nil {
		return fmt.Sprintf("abort %d %s: %v", a.ID, a.Reason, a.Cause)
	}
	return fmt.Sprintf("abort %d %s", a.ID, a.Reason)
}
func (a Discard) String() string      { return fmt.Sprintf("discard %d", a.ID) }
func (a DiscardState) String() string { return fmt.Sprintf("discard-state %d %s", a.ID, a.Task) }
func (a FailJob) String() string      { return fmt.Sprintf("fail-job: %v", a.Cause) }
