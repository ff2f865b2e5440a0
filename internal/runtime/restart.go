package runtime

import (
	"fmt"
	"time"
)

// Failures is the history a RestartStrategy decides on.
type Failures struct {
	// Consecutive counts the failures since the last completed checkpoint
	// (or the start of the run), this one included.
	Consecutive int
	// Times are the times of the run's recent failures, oldest first, this
	// one last; at most MaxFailureHistory.
	Times []time.Time
}

// MaxFailureHistory bounds Failures.Times.
const MaxFailureHistory = 1000

// RestartStrategy decides whether and when a failed job restarts.
type RestartStrategy interface {
	// Next is asked after each failure a restart might fix; it returns the
	// delay before the restart, or false to give up.
	Next(f Failures) (time.Duration, bool)
	// String says what the strategy allows, for the error that gives up.
	String() string
	// MaxDelay is the longest delay before a restart; sinks whose
	// transactions must outlive a restart check against it.
	MaxDelay() time.Duration
}

// NoRestart fails the job at its first failure.
type NoRestart struct{}

func (NoRestart) Next(Failures) (time.Duration, bool) { return 0, false }
func (NoRestart) String() string                      { return "no restart" }
func (NoRestart) MaxDelay() time.Duration             { return 0 }

// FixedDelay restarts after Delay, at most MaxAttempts times in a row: a
// completed checkpoint resets the count.
type FixedDelay struct {
	Delay       time.Duration
	MaxAttempts int
}

func (f FixedDelay) Next(h Failures) (time.Duration, bool) {
	return f.Delay, h.Consecutive <= f.MaxAttempts
}

func (f FixedDelay) MaxDelay() time.Duration { return f.Delay }

func (f FixedDelay) String() string {
	return fmt.Sprintf("fixed delay %v, at most %d attempts in a row", f.Delay, f.MaxAttempts)
}

// ExponentialBackoff restarts after Initial, doubling (times Multiplier) up
// to Max, at most MaxAttempts times in a row (0: no limit). A completed
// checkpoint resets the count: the job made progress.
type ExponentialBackoff struct {
	Initial, Max time.Duration
	Multiplier   float64
	MaxAttempts  int
}

func (e ExponentialBackoff) Next(h Failures) (time.Duration, bool) {
	if e.MaxAttempts > 0 && h.Consecutive > e.MaxAttempts {
		return 0, false
	}
	m := e.Multiplier
	if m < 1 {
		m = 2
	}
	d := float64(e.Initial)
	for i := 1; i < h.Consecutive && d < float64(e.Max); i++ {
		d *= m
	}
	return min(time.Duration(d), e.Max), true
}

func (e ExponentialBackoff) MaxDelay() time.Duration { return e.Max }

func (e ExponentialBackoff) String() string {
	s := fmt.Sprintf("exponential back-off from %v to %v", e.Initial, e.Max)
	if e.MaxAttempts > 0 {
		s += fmt.Sprintf(", at most %d attempts in a row", e.MaxAttempts)
	}
	return s
}

// FailureRate restarts after Delay as long as at most MaxFailures failures
// fall within any Interval, as Flink's failure-rate strategy does. Unlike
// the others it is not reset by completed checkpoints, so a job that fails
// again soon after every restore gives up even if it checkpoints between
// the failures.
type FailureRate struct {
	MaxFailures int
	Interval    time.Duration
	Delay       time.Duration
}

func (f FailureRate) Next(h Failures) (time.Duration, bool) {
	if len(h.Times) == 0 {
		return f.Delay, true
	}
	last := h.Times[len(h.Times)-1]
	n := 0
	for _, t := range h.Times {
		if last.Sub(t) < f.Interval {
			n++
		}
	}
	return f.Delay, n <= f.MaxFailures
}

func (f FailureRate) MaxDelay() time.Duration { return f.Delay }

func (f FailureRate) String() string {
	return fmt.Sprintf("failure rate: at most %d failures within %v, delay %v", f.MaxFailures, f.Interval, f.Delay)
}

// validateRestart checks a strategy's settings.
func validateRestart(r RestartStrategy) error {
	switch r := r.(type) {
	case FixedDelay:
		if r.Delay < 0 || r.MaxAttempts < 0 {
			return fmt.Errorf("restart strategy %v: delay and attempts must not be negative", r)
		}
	case ExponentialBackoff:
		if r.Initial <= 0 || r.Max < r.Initial {
			return fmt.Errorf("restart strategy %v: need 0 < initial ≤ max", r)
		}
	case FailureRate:
		if r.MaxFailures < 1 || r.Interval <= 0 || r.Delay < 0 {
			return fmt.Errorf("restart strategy %v: need at least 1 failure, an interval above 0 and a delay not negative", r)
		}
	}
	return nil
}
