package runtime

import (
	"fmt"
	"time"
)

// RestartStrategy decides whether and when a failed job restarts.
type RestartStrategy interface {
	// Next is asked after the failures-th consecutive failure (1 for the
	// first); it returns the delay before the restart, or false to give up.
	Next(failures int) (time.Duration, bool)
	String() string
}

// NoRestart fails the job at its first failure.
type NoRestart struct{}

func (NoRestart) Next(int) (time.Duration, bool) { return 0, false }
func (NoRestart) String() string                 { return "no restart" }

// FixedDelay restarts after Delay, at most MaxAttempts times in a row.
type FixedDelay struct {
	Delay       time.Duration
	MaxAttempts int
}

func (f FixedDelay) Next(failures int) (time.Duration, bool) {
	return f.Delay, failures <= f.MaxAttempts
}

func (f FixedDelay) String() string {
	return fmt.Sprintf("fixed delay %v, at most %d attempts", f.Delay, f.MaxAttempts)
}

// ExponentialBackoff restarts after Initial, doubling (times Multiplier) up
// to Max, at most MaxAttempts times in a row (0: no limit). A completed
// checkpoint resets the count: the job made progress.
type ExponentialBackoff struct {
	Initial, Max time.Duration
	Multiplier   float64
	MaxAttempts  int
}

func (e ExponentialBackoff) Next(failures int) (time.Duration, bool) {
	if e.MaxAttempts > 0 && failures > e.MaxAttempts {
		return 0, false
	}
	m := e.Multiplier
	if m < 1 {
		m = 2
	}
	d := float64(e.Initial)
	for i := 1; i < failures && d < float64(e.Max); i++ {
		d *= m
	}
	return min(time.Duration(d), e.Max), true
}

func (e ExponentialBackoff) String() string {
	return fmt.Sprintf("exponential back-off from %v to %v", e.Initial, e.Max)
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
	}
	return nil
}
