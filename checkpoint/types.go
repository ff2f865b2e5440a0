package checkpoint

import (
	"errors"
	"fmt"

	"github.com/weirstream/weir/internal/keygroup"
)

// ID identifies a checkpoint. Ids start at 1 and only grow, across restarts
// too; 0 means "none".
type ID uint64

// TaskID names one task: the UID of the vertex (a chain of operators) it runs
// and its subtask index.
type TaskID struct {
	Vertex  string `json:"vertex"`
	Subtask int    `json:"subtask"`
}

func (t TaskID) String() string { return fmt.Sprintf("%s#%d", t.Vertex, t.Subtask) }

func (t TaskID) less(o TaskID) bool {
	if t.Vertex != o.Vertex {
		return t.Vertex < o.Vertex
	}
	return t.Subtask < o.Subtask
}

// Handle points at one piece of state a task wrote for a checkpoint. State is
// either Inline (small state kept in the metadata itself) or in a file at
// Path, relative to the job's checkpoint directory.
type Handle struct {
	// Operator is the UID of the operator whose state this is.
	Operator string `json:"operator"`
	// Subtask and Parallelism say which subtask wrote it, and of how many.
	Subtask     int `json:"subtask"`
	Parallelism int `json:"parallelism"`
	// Kind names the state within the operator: "keyed" state is split by
	// KeyGroups; any other kind is operator state, redistributed as a list.
	Kind      string         `json:"kind"`
	KeyGroups keygroup.Range `json:"keyGroups"`
	Path      string         `json:"path,omitempty"`
	Inline    []byte         `json:"inline,omitempty"`
	SizeBytes int64          `json:"sizeBytes"`
	// File is the name the state backend gives this piece locally (a
	// Pebble database's file), when it restores files by name.
	File string `json:"file,omitempty"`
	// CRC32C, when set, is the Castagnoli checksum of the file, checked
	// when it is restored.
	CRC32C uint32 `json:"crc32c,omitempty"`
}

// KindKeyed is the Handle.Kind of keyed state.
const KindKeyed = "keyed"

// Reason says why a checkpoint was aborted.
type Reason int

// Reasons for aborting a checkpoint. Only Expired, Declined and PersistFailed
// count towards Config.TolerableFailures, as in Flink: the others are either
// harmless (a newer checkpoint subsumed it) or already a failure of the job.
const (
	ReasonExpired Reason = iota + 1
	ReasonDeclined
	ReasonSubsumed
	ReasonPersistFailed
	ReasonTaskFailed
	ReasonTaskFinished
	ReasonJobFailing
	ReasonCancelled
)

var reasonNames = map[Reason]string{
	ReasonExpired:       "expired",
	ReasonDeclined:      "declined",
	ReasonSubsumed:      "subsumed",
	ReasonPersistFailed: "persist-failed",
	ReasonTaskFailed:    "task-failed",
	ReasonTaskFinished:  "task-finished",
	ReasonJobFailing:    "job-failing",
	ReasonCancelled:     "cancelled",
}

func (r Reason) String() string {
	if s, ok := reasonNames[r]; ok {
		return s
	}
	return fmt.Sprintf("reason(%d)", int(r))
}

// AfterAbortedStop says what becomes of a job whose savepoint to stop with
// (stop-with-savepoint) was aborted for reason r.
func (r Reason) AfterAbortedStop() string {
	switch r {
	case ReasonCancelled:
		return "the job was cancelled before it completed"
	case ReasonJobFailing, ReasonTaskFailed:
		return "the job is failing over, and runs on if it restarts"
	}
	return "the job runs on"
}

// Counts reports whether an abort for this reason counts towards the
// tolerable consecutive failures.
func (r Reason) Counts() bool {
	return r == ReasonExpired || r == ReasonDeclined || r == ReasonPersistFailed
}

// ErrSubsumedAtTask is the cause a task gives when it declines n because a
// barrier or cancel marker of a newer checkpoint overtook n's alignment. Such
// a decline does not count as a failure.
var ErrSubsumedAtTask = errors.New("a newer checkpoint overtook the alignment")

// AckResult classifies an acknowledgement, as Flink does.
type AckResult int

const (
	// AckOK: the acknowledgement was recorded.
	AckOK AckResult = iota + 1
	// AckDuplicate: the task had already acknowledged this checkpoint, or it
	// is complete or being persisted. Its state is in use: do not delete it.
	AckDuplicate
	// AckDiscarded: the checkpoint was aborted recently; a DiscardState
	// action tells the driver to delete the late state.
	AckDiscarded
	// AckUnknown: no such checkpoint or no such task; its state is discarded
	// as for AckDiscarded.
	AckUnknown
)

func (r AckResult) String() string {
	switch r {
	case AckOK:
		return "ok"
	case AckDuplicate:
		return "duplicate"
	case AckDiscarded:
		return "discarded"
	case AckUnknown:
		return "unknown"
	}
	return fmt.Sprintf("ack(%d)", int(r))
}
