// Package operator holds the contracts between the runtime and the operators
// it runs: life cycle, snapshots, notifications and restore.
//
// One instance of an operator serves one subtask; the task goroutine calls
// every method, so an operator needs no locks for its own state. The
// asynchronous part of a snapshot (Async) runs on another goroutine and must
// touch only what Snapshot froze for it.
package operator

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
)

// Context is what an operator instance gets at Open.
type Context struct {
	Job            string
	UID            string
	Subtask        int
	Parallelism    int
	MaxParallelism int
	KeyGroups      keygroup.Range // the key groups this subtask owns
	// Restore is the state to start from; nil when the operator starts
	// without state (a fresh start, or a restored checkpoint that holds no
	// state of this operator's UID).
	Restore *Restore
	// Rewind is set on a source opened by a verification rerun (weir
	// verify): Restore is where a checkpoint recorded the source, and the
	// source reads its input again from the start up to that position (what
	// the checkpoint consumed), then ends. Only sources that implement
	// weir.Rewinder are opened so.
	Rewind bool
	// Resumed is the checkpoint the run restored, 0 if none: set for every
	// operator, Restore or not. Output an earlier run of the job left is
	// then what this run resumes: a checkpoint of an older version, or of a
	// sink that keeps no state, gives a sink no Restore.
	Resumed checkpoint.ID
	// StartOver is set when Restore is nil and what earlier runs of the job
	// wrote may be deleted: the user asked to start over (--fresh), or an
	// earlier attempt of this run started from nothing too. Without it, a
	// sink that finds committed output of an earlier run refuses to start
	// rather than add to it.
	StartOver bool
	// RunID names the run: one value for every subtask and every attempt
	// of a run, another for each run of the job (drawn at random where the
	// run starts: by the driver, in a cluster the coordinator's). Sinks
	// write it into the records of the output they commit, so that the
	// running attempt's records are told from an earlier run's whatever
	// order its subtasks open in. Empty: unknown (a context made by hand);
	// a sink's records then look like those written before run ids.
	RunID string
	// Attempt numbers the run's attempts from 1, the same in every
	// process. With RunID it tells the records an earlier attempt of this
	// run wrote, whose output an attempt that starts over (StartOver)
	// writes again, from those of this attempt's other subtasks.
	Attempt int
	// Lineage names the chain of runs whose output this run continues: its
	// RunID when it restores no checkpoint, else the restored checkpoint's
	// (checkpoint.Metadata.Lineage; empty for a checkpoint of Weir before
	// lineages). A sink that starts a lineage in its output (restores no
	// state) records it there; one that restores state checks that no later
	// lineage has written (and maybe deleted, with --fresh) the output its
	// checkpoint counts on since.
	Lineage string
	// CheckpointingEnabled is false in mode none: sinks then commit at the
	// end of input only.
	CheckpointingEnabled bool
	// CommitWait bounds how long a transaction a sink pre-commits at a
	// snapshot may wait for its commit; a sink whose transactions expire
	// sooner must refuse to start.
	CommitWait CommitWait
	Logger     *slog.Logger
	// Now is the processing-time clock.
	Now func() time.Time
	// Acquire holds a resource (a lock) for the rest of the run, across
	// attempts: open runs once per key for the whole run, and every later
	// call with that key returns the first call's error. The run closes
	// what open returned when it ends. Safe for concurrent use.
	Acquire func(key string, open func() (io.Closer, error)) error
}

// CommitWait is the longest a transaction pre-committed at checkpoint n
// waits for its commit while the job stays within its settings: n and the
// tolerated failures after it time out (each a cycle: an interval, a min
// pause and a timeout), then the job fails, waits for the restart
// strategy's longest delay, and the restore commits it.
type CommitWait struct {
	Interval, MinPause, Timeout time.Duration
	TolerableFailures           int
	RestartDelay                time.Duration
}

// cycle bounds the time from one checkpoint's trigger to the end of the
// next one.
func (w CommitWait) cycle() time.Duration { return w.Interval + w.MinPause + w.Timeout }

func (w CommitWait) cycleTerms() string {
	if w.MinPause > 0 {
		return fmt.Sprintf("checkpoint interval %v + checkpoint min pause %v + checkpoint timeout %v", w.Interval, w.MinPause, w.Timeout)
	}
	return fmt.Sprintf("checkpoint interval %v + checkpoint timeout %v", w.Interval, w.Timeout)
}

// Total is the bound.
func (w CommitWait) Total() time.Duration {
	return time.Duration(w.TolerableFailures+1)*w.cycle() + w.RestartDelay
}

func (w CommitWait) String() string {
	return fmt.Sprintf("(%s) × (tolerable checkpoint failures %d + 1) + the restart strategy's longest delay %v = %v",
		w.cycleTerms(), w.TolerableFailures, w.RestartDelay, w.Total())
}

// Open bounds how long a transaction opened with the first record after a
// snapshot stays open before the next snapshot pre-commits it: one cycle.
// A transaction that expires counted from its opening (Kafka's) must
// outlast Open plus Total.
func (w CommitWait) Open() time.Duration { return w.cycle() }

// OpenString describes Open.
func (w CommitWait) OpenString() string { return fmt.Sprintf("%s = %v", w.cycleTerms(), w.Open()) }

// FitTimeout is the checkpoint timeout, the other settings as they are,
// below which Open plus Total stays below limit; not positive if none.
func (w CommitWait) FitTimeout(limit time.Duration) time.Duration {
	return (limit-w.RestartDelay)/time.Duration(w.TolerableFailures+2) - w.Interval - w.MinPause
}

// Restore is the state an operator restarts from.
type Restore struct {
	Checkpoint checkpoint.ID
	// Handles are every handle this operator's UID wrote, from every
	// subtask of the run that took the checkpoint (its parallelism may
	// differ from the current one).
	Handles []checkpoint.Handle
	Read    func(checkpoint.Handle) ([]byte, error)
	// Open streams a handle's state; nil: Read serves.
	Open func(checkpoint.Handle) (io.ReadCloser, error)
	// Owned: the checkpoint is the job's own, not a savepoint; its shared
	// files may be referenced by the next checkpoints (state.Restored).
	Owned bool
}

// Reader is r as a state.Reader.
func (r *Restore) Reader() state.Reader { return restoreReader{r} }

type restoreReader struct{ r *Restore }

func (rr restoreReader) Read(h checkpoint.Handle) ([]byte, error) { return rr.r.Read(h) }

func (rr restoreReader) Open(h checkpoint.Handle) (io.ReadCloser, error) {
	if rr.r.Open != nil {
		return rr.r.Open(h)
	}
	b, err := rr.r.Read(h)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// Operator is one subtask's instance of an operator.
type Operator interface {
	// Open prepares the instance, restoring its state if ctx.Restore is set.
	Open(ctx *Context) error
	// Snapshot is the synchronous part of checkpoint id, run between two
	// records: freeze the state, pre-commit transactions. It returns the
	// asynchronous part, or nil when there is nothing to write.
	Snapshot(id checkpoint.ID) (Async, error)
	// NotifyComplete: checkpoint id is durable; commit what it covers.
	NotifyComplete(id checkpoint.ID) error
	// NotifyAborted: checkpoint id will not complete.
	NotifyAborted(id checkpoint.ID)
	// Finish: every input has ended (end of data). Emit what is buffered;
	// timers fire no more. With checkpoints, the job's final checkpoint
	// follows and covers everything emitted here; a two-phase-commit sink
	// commits on its NotifyComplete, as on any other. Without checkpoints
	// (mode none) a sink commits here.
	Finish() error
	// Close releases resources, after Finish or on failure.
	Close() error
}

// ErrStartedOver is the error (wrapped, and marked permanent) of a restore
// of a checkpoint from before a run that started over: a run that restored
// no checkpoint (--fresh, or a first run) has since written the output the
// checkpoint's output builds on, deleting it (--fresh) or writing beside it.
// The runtime refuses such a restore when that run's checkpoints are in the
// job's storage (restoring would delete them); a sink that records its
// output's lineage (operator.Context.Lineage) refuses it in any case.
var ErrStartedOver = errors.New("a run that started over has written the output since the checkpoint")

// Permanent marks err as one a restart cannot fix (bad input, bad
// configuration, a bug in a user function): the job fails at once instead
// of restarting. Errors are retriable unless marked.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// IsPermanent reports whether err, or an error it wraps, was marked with
// Permanent, or says it is permanent itself (a method Permanent() bool
// that returns true, as codec.KeyError has: the codec package is below
// this one).
func IsPermanent(err error) bool {
	var p *permanentError
	if errors.As(err, &p) {
		return true
	}
	var self interface{ Permanent() bool }
	return errors.As(err, &self) && self.Permanent()
}

// Async writes the state a Snapshot froze and returns its handles.
type Async func(w Writer) ([]checkpoint.Handle, error)

// Writer writes the state of the checkpoint being taken (see
// state.Writer).
type Writer interface {
	Write(h checkpoint.Handle, data []byte) (checkpoint.Handle, error)
	WriteShared(h checkpoint.Handle, r io.Reader) (checkpoint.Handle, error)
}

// Timed is implemented by operators with processing-time timers.
type Timed interface {
	// NextTimer is the earliest registered timer.
	NextTimer() (time.Time, bool)
	// FireTimers fires every timer at or before now.
	FireTimers(now time.Time) error
}

// WriteState returns the asynchronous part of a snapshot that writes one
// piece of this subtask's state: encode runs on the writer's goroutine.
func (c *Context) WriteState(kind string, groups keygroup.Range, encode func() []byte) Async {
	return func(w Writer) ([]checkpoint.Handle, error) {
		h, err := w.Write(checkpoint.Handle{Operator: c.UID, Subtask: c.Subtask, Parallelism: c.Parallelism, Kind: kind, KeyGroups: groups}, encode())
		return []checkpoint.Handle{h}, err
	}
}

// StateWriter returns the asynchronous part that runs a state backend's:
// the handles it writes are this subtask's.
func (c *Context) StateWriter(a state.Async) Async {
	if a == nil {
		return nil
	}
	return func(w Writer) ([]checkpoint.Handle, error) { return a(ownWriter{w, c}) }
}

// ownWriter fills in the operator and subtask of the handles it writes.
type ownWriter struct {
	w Writer
	c *Context
}

func (o ownWriter) own(h checkpoint.Handle) checkpoint.Handle {
	h.Operator, h.Subtask, h.Parallelism = o.c.UID, o.c.Subtask, o.c.Parallelism
	return h
}

func (o ownWriter) Write(h checkpoint.Handle, data []byte) (checkpoint.Handle, error) {
	return o.w.Write(o.own(h), data)
}

func (o ownWriter) WriteShared(h checkpoint.Handle, r io.Reader) (checkpoint.Handle, error) {
	return o.w.WriteShared(o.own(h), r)
}

// SnapshotList returns the asynchronous part that writes operator list
// state name; restore it with state.RestoreList.
func (c *Context) SnapshotList(d state.Distribution, name string, items [][]byte) Async {
	kind, blob := state.EncodeList(d, name, items)
	return c.WriteState(kind, keygroup.Empty, func() []byte { return blob })
}

// Base implements Operator with no state and no effects; embed it.
type Base struct{}

func (Base) Open(*Context) error                   { return nil }
func (Base) Snapshot(checkpoint.ID) (Async, error) { return nil, nil }
func (Base) NotifyComplete(checkpoint.ID) error    { return nil }
func (Base) NotifyAborted(checkpoint.ID)           {}
func (Base) Finish() error                         { return nil }
func (Base) Close() error                          { return nil }

// Input is implemented by the head operator of a task that has inputs: it
// takes a batch ([]T of the input's record type) from input number input,
// with its records' event times (nil when the stream has none) and, from a
// hash edge, their key groups (nil when the sender did not carry them). It
// must not hold batch, times or groups after it returns: the task hands
// them back to the sender, which fills them with its next records.
type Input interface {
	ProcessBatch(input int, batch any, times []int64, groups []uint16) error
}

// Event time is milliseconds since the Unix epoch. MinTime is the watermark
// before any, MaxTime the one at the end of the input.
const (
	MinTime int64 = math.MinInt64
	MaxTime int64 = math.MaxInt64
)

// EventTimed is implemented by operators that act on the watermark: keyed
// operators with event-time timers, windows.
type EventTimed interface {
	// AdvanceWatermark tells that the operator's input watermark reached
	// wm (above every earlier one): fire what is due. The task calls it in
	// chain order, so what it emits reaches the next operators before
	// their watermark advances.
	AdvanceWatermark(wm int64) error
}

// WatermarkSource is implemented by a task's head that makes watermarks (a
// source with a watermark strategy, an assigner): its watermark replaces
// that of the task's inputs.
type WatermarkSource interface {
	// Watermark is the current watermark, and whether the head is idle
	// (every split it reads is idle or it reads none).
	Watermark() (wm int64, idle bool)
}

// Source is implemented by the head operator of a source task.
type Source interface {
	// Poll emits up to one batch of records downstream and says whether
	// the source has more. The task calls it between control messages, so
	// a snapshot always falls between two Polls.
	Poll() (PollResult, error)
}

// PollResult says what a source will do next.
type PollResult struct {
	// Exhausted: the source has emitted its last record.
	Exhausted bool
	// IdleUntil: nothing to emit before this time (a rate limit). The task
	// may poll sooner: for a checkpoint, or to send a watermark.
	IdleUntil time.Time
}
