package runtime

import (
	"math"
	"time"
)

// Buffer debloating (Flink's FLIP-183): a task sizes its input channels so
// that what they hold takes about a target time to drain at the rate the
// task handles events when it works, not the capacity it was configured
// with. In-flight data then stays small, which makes aligned barriers
// arrive sooner and unaligned checkpoints persist less.

// DebloatPeriod is how often a debloating task measures its throughput and
// resizes its input channels, as Flink's buffer-debloat period.
const DebloatPeriod = 200 * time.Millisecond

const (
	// debloatSamples smooths the measured throughput over about this many
	// periods (an exponential moving average), as Flink's 20 samples.
	debloatSamples = 20
	// debloatThreshold: a new capacity differing from the current one by
	// less than this fraction is not applied (Flink's 25%), so that the
	// window does not flap; reaching the maximum or the minimum always is.
	debloatThreshold = 0.25
)

// Debloater decides a task's input channel capacity from its throughput.
// It is pure: the task tells it the events it took and the time it worked
// in each period.
type Debloater struct {
	target time.Duration
	max    int
	// rate is the smoothed throughput, events per second of work; 0 before
	// the first measurement.
	rate     float64
	capacity int
}

// NewDebloater returns a debloater aiming at target time to drain the
// channels, each of capacity at most max events (and at least 1).
func NewDebloater(target time.Duration, max int) *Debloater {
	return &Debloater{target: target, max: max, capacity: max}
}

// Capacity is the capacity decided last (max before any).
func (d *Debloater) Capacity() int { return d.capacity }

// Observe takes one period's measurement: events taken from channels
// channels while working for busy (the period less the time the task
// waited for input or for room downstream). It returns the capacity per
// channel and whether it changed. A period without work says nothing of
// the throughput and changes nothing.
func (d *Debloater) Observe(events, channels int, busy time.Duration) (int, bool) {
	if busy <= 0 || channels <= 0 {
		return d.capacity, false
	}
	rate := float64(events) / busy.Seconds()
	if d.rate == 0 {
		d.rate = rate
	} else {
		const alpha = 2.0 / (debloatSamples + 1)
		d.rate += alpha * (rate - d.rate)
	}
	want := int(math.Ceil(d.rate * d.target.Seconds() / float64(channels)))
	want = min(max(want, 1), d.max)
	if want == d.capacity {
		return want, false
	}
	if want != 1 && want != d.max && math.Abs(float64(want-d.capacity)) < debloatThreshold*float64(d.capacity) {
		return d.capacity, false
	}
	d.capacity = want
	return want, true
}
