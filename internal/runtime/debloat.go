package runtime

import (
	"math"
	"time"
)

// Buffer debloating (Flink's FLIP-183): a task sizes its input channels so
// that what they hold takes about a target time to drain at the rate the
// task takes events while it has input, not the capacity it was configured
// with. In-flight data then stays small, which makes aligned barriers
// arrive sooner and unaligned checkpoints persist less. Time spent waiting
// for input does not count; time waiting for room downstream does, as in
// Flink: a back-pressured task drains its inputs at the rate its
// downstream lets it, and that is how long its backlog takes.

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
// It is pure: the task tells it the events it took and the time it had
// input in each period.
type Debloater struct {
	target time.Duration
	max    int
	// rate is the smoothed throughput, events per second of the time the
	// task had input; measured says whether there was a measurement yet.
	rate     float64
	measured bool
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
// channels in busy, the period less the time the task waited for input. It
// returns the capacity per channel and whether it changed. A period
// without events says nothing of the throughput and changes nothing (the
// task measures on until it took one: see debloat.tick).
func (d *Debloater) Observe(events, channels int, busy time.Duration) (int, bool) {
	if events <= 0 || busy <= 0 || channels <= 0 {
		return d.capacity, false
	}
	rate := float64(events) / busy.Seconds()
	if !d.measured {
		d.rate, d.measured = rate, true
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
