package runtime

import (
	"testing"
	"time"
)

// Review 3. Observe's doc (and note 77) says "A period without work says
// nothing of the throughput and changes nothing". But a task's measured
// busy time is never exactly 0: each turn of runInputs spends a few
// microseconds between debloat.tick and wait (congested, fireTimers, Poll,
// flush), and handling a barrier, a watermark or a checkpoint notification
// is work without a batch. A period that took no batch but some such work
// is measured as a throughput of 0 batches a second: it drags the average
// down (a fresh debloater drops straight to one event per channel), though
// the task did nothing that says how fast it drains a batch.
func TestDebloaterPeriodWithoutBatchesChangesNothing_review3(t *testing.T) {
	// A fresh task whose upstream has not produced yet: the first period
	// holds a barrier's snapshot and loop turns, 50 µs of "work".
	d := NewDebloater(100*time.Millisecond, 16)
	if c, changed := d.Observe(0, 2, 50*time.Microsecond); c != 16 || changed {
		t.Errorf("fresh debloater, a period without batches: capacity %d (changed %v), want 16 unchanged", c, changed)
	}

	// A fast task (2,000 batches a second of work: 100 in flight over 2
	// channels drain in 100 ms, beyond the maximum), then 5 s of lull in
	// which it only takes barriers (a few µs of work each period).
	d = NewDebloater(100*time.Millisecond, 16)
	if c, _ := d.Observe(400, 2, 200*time.Millisecond); c != 16 {
		t.Fatalf("fast task: capacity %d, want 16", c)
	}
	for i := range 25 {
		if c, changed := d.Observe(0, 2, 20*time.Microsecond); changed {
			t.Fatalf("lull period %d (no batch, 20 µs of loop turns): capacity changed to %d; a period without batches should change nothing", i+1, c)
		}
	}
}
