package checkpoint

import (
	"fmt"
	"time"
)

// Config holds the checkpoint settings Flink users know. The zero value of a
// field means its default, given on the field.
type Config struct {
	// Interval between the triggers of periodic checkpoints. Zero disables
	// periodic checkpoints (savepoints and the final checkpoint of a bounded
	// job are still taken).
	Interval time.Duration
	// MinPause is the least time from the completion of one checkpoint to the
	// trigger of the next. Default 0. A MinPause above zero requires
	// MaxConcurrent 1.
	MinPause time.Duration
	// Timeout aborts a checkpoint that has not been acknowledged by every task
	// this long after its trigger. Default 5 minutes (Flink: 10), so that
	// a Kafka sink's transaction, open up to two checkpoints before its
	// commit, fits the broker's default cap of 15 minutes.
	Timeout time.Duration
	// MaxConcurrent is how many periodic checkpoints may be pending at once.
	// Default 1.
	MaxConcurrent int
	// TolerableFailures is how many consecutive checkpoint failures the job
	// survives; one more fails the job over. Default 0. Negative is invalid.
	TolerableFailures int
	// Retained is how many completed checkpoints are kept; older ones are
	// discarded. Default 1.
	Retained int
	// RetainOnCancel keeps completed checkpoints when the job is cancelled;
	// otherwise they are discarded. Savepoints are always kept.
	RetainOnCancel bool
	// Unaligned makes exactly-once checkpoints unaligned (Flink's
	// FLIP-76): a task handles the first barrier of a checkpoint at once,
	// its barriers overtake the data queued on its outputs, and the
	// records in flight are persisted as channel state. Savepoints and the
	// final checkpoint still align.
	Unaligned bool
	// AlignedTimeout starts exactly-once checkpoints aligned and switches
	// a task's checkpoint to unaligned when its alignment has lasted this
	// long (Flink's aligned-checkpoint timeout). Zero never switches; it
	// excludes Unaligned, which is unaligned from the first barrier.
	AlignedTimeout time.Duration
	// AtLeastOnce: the tasks do not align barriers (the job's mode is
	// at-least-once). The coordinator only records it in the metadata:
	// such a checkpoint's committed output may hold records twice after a
	// restore (weir verify refuses it).
	AtLeastOnce bool
}

// Defaults of Config fields whose zero value means "default".
const (
	DefaultTimeout       = 5 * time.Minute
	DefaultMaxConcurrent = 1
	DefaultRetained      = 1
)

// MaxRetained bounds Config.Retained and MaxConcurrentLimit bounds
// MaxConcurrent: every set the coordinator keeps has a limit.
const (
	MaxRetained        = 1000
	MaxConcurrentLimit = 64
)

// Normalize returns c with defaults filled in and checks it. The error names
// the setting at fault and why.
func (c Config) Normalize() (Config, error) {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = DefaultMaxConcurrent
	}
	if c.Retained == 0 {
		c.Retained = DefaultRetained
	}
	switch {
	case c.Interval < 0:
		return c, fmt.Errorf("checkpoint interval %v is negative; use 0 to disable periodic checkpoints", c.Interval)
	case c.MinPause < 0:
		return c, fmt.Errorf("checkpoint min pause %v is negative", c.MinPause)
	case c.Timeout < 0:
		return c, fmt.Errorf("checkpoint timeout %v is negative", c.Timeout)
	case c.MaxConcurrent < 0 || c.MaxConcurrent > MaxConcurrentLimit:
		return c, fmt.Errorf("max concurrent checkpoints %d is outside 1..%d", c.MaxConcurrent, MaxConcurrentLimit)
	case c.TolerableFailures < 0:
		return c, fmt.Errorf("tolerable checkpoint failures %d is negative", c.TolerableFailures)
	case c.Retained < 0 || c.Retained > MaxRetained:
		return c, fmt.Errorf("retained checkpoints %d is outside 1..%d", c.Retained, MaxRetained)
	case c.AlignedTimeout < 0:
		return c, fmt.Errorf("aligned checkpoint timeout %v is negative; use 0 to never switch to unaligned", c.AlignedTimeout)
	case c.AlignedTimeout > 0 && c.Unaligned:
		return c, fmt.Errorf("aligned checkpoint timeout %v with unaligned checkpoints: the timeout switches aligned checkpoints to unaligned, and unaligned ones are unaligned from the first barrier; choose one", c.AlignedTimeout)
	case c.MinPause > 0 && c.MaxConcurrent > 1:
		return c, fmt.Errorf("checkpoint min pause %v needs max concurrent checkpoints 1, not %d: a pause between checkpoints cannot hold while several run at once", c.MinPause, c.MaxConcurrent)
	}
	return c, nil
}
