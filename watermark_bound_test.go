package weir

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestBoundedOutOfOrdernessOfAnyLength: the watermark BoundedOutOfOrderness
// makes trails the greatest event time seen; it is never ahead of it. A
// bound of time.Duration(math.MaxInt64) ("any lateness") made -d -
// time.Millisecond overflow, and the watermark landed about 292 years
// after the greatest event time: every later record was late and every
// window fired at once. Found by an outside review (session 34).
func TestBoundedOutOfOrdernessOfAnyLength(t *testing.T) {
	ts := func(v int64) time.Time { return time.UnixMilli(v) }
	for _, d := range []time.Duration{math.MaxInt64, math.MaxInt64 - time.Millisecond + 1} {
		wmOf := BoundedOutOfOrderness(d, ts).watermarkOf()
		for _, max := range []int64{1000, 1_700_000_000_000} {
			if wm := wmOf(max); wm >= max {
				t.Errorf("BoundedOutOfOrderness(%v): greatest event time %d gives watermark %d, ahead of it (records at %d are late)", d, max, wm, max)
			}
		}
	}
}

// TestBoundedOutOfOrdernessRefusesANegativeBound: a negative bound puts the
// watermark ahead of the data, so the very record that made it is late.
// Flink refuses it ("maxOutOfOrderness cannot be negative",
// BoundedOutOfOrdernessWatermarks); Weir ran the job. Found by an outside
// review (session 34).
func TestBoundedOutOfOrdernessRefusesANegativeBound(t *testing.T) {
	ts := func(v int64) time.Time { return time.UnixMilli(v) }
	s := BoundedOutOfOrderness(-time.Second, ts)
	err := s.check()
	if err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("BoundedOutOfOrderness(-1s).check() = %v, want an error saying the bound is negative (the watermark for greatest event time 1000 is %d, ahead of it)", err, s.watermarkOf()(1000))
	}
}
