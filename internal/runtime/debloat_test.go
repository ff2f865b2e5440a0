package runtime

import (
	"testing"
	"time"
)

// The debloater sizes channels so that they drain in about the target
// time at the measured throughput, between 1 and the maximum.
func TestDebloaterSizesToThroughput(t *testing.T) {
	d := NewDebloater(time.Second, 16)
	if d.Capacity() != 16 {
		t.Fatalf("capacity before any measurement: %d, want 16", d.Capacity())
	}
	// 20 batches in 200 ms of work over 4 channels: 100 batches a second,
	// 100 in flight drain in 1 s, 25 a channel: beyond the maximum.
	if c, changed := d.Observe(20, 4, 200*time.Millisecond); c != 16 || changed {
		t.Fatalf("fast task: %d, %v; want 16, unchanged", c, changed)
	}
	// A crawling task: 1 batch in 200 ms of work, 5 a second: 5 in flight,
	// 2 a channel (rounded up). The average moves towards it over a few
	// periods, then holds.
	d = NewDebloater(time.Second, 16)
	d.Observe(1, 4, 200*time.Millisecond)
	if got := d.Capacity(); got != 2 {
		t.Fatalf("crawling task's first measurement: capacity %d, want 2", got)
	}
	// A period of waiting only (no work) says nothing.
	if c, changed := d.Observe(0, 4, 0); c != 2 || changed {
		t.Fatalf("idle period: %d, %v; want 2, unchanged", c, changed)
	}
	// The throughput rises 40-fold: the capacity follows the smoothed
	// throughput up, in steps of at least a quarter, to the maximum.
	prev, steps := 2, 0
	for range 60 {
		c, changed := d.Observe(40, 4, 200*time.Millisecond)
		if changed {
			steps++
			if c != 16 && c-prev < prev/4 {
				t.Fatalf("step from %d to %d is under the threshold", prev, c)
			}
		}
		if c < prev {
			t.Fatalf("capacity fell from %d to %d while the throughput rose", prev, c)
		}
		prev = c
	}
	if prev != 16 || steps < 2 {
		t.Fatalf("after the rise: capacity %d in %d steps, want 16 in several", prev, steps)
	}
	// It never goes below one event.
	d = NewDebloater(time.Millisecond, 16)
	if c, _ := d.Observe(1, 8, time.Second); c != 1 {
		t.Fatalf("tiny target: capacity %d, want 1", c)
	}
}

// A local channel made smaller takes no more than its new capacity (what it
// already holds stays), and made larger again signals room at once.
func TestLocalChannelSetCapacity(t *testing.T) {
	ready := make(chan struct{}, 1)
	c := NewLocalChannel(4, ready)
	batch := Event{Kind: KindBatch, Batch: []string{"a"}}
	for i := range 3 {
		if ok, _ := c.TryPush(batch); !ok {
			t.Fatalf("push %d of 4 refused", i)
		}
	}
	c.SetCapacity(2)
	if ok, _ := c.TryPush(batch); ok || c.HasRoom() {
		t.Fatal("a channel holding 3 events took a fourth at capacity 2")
	}
	for range 2 {
		if _, ok := c.TryPop(); !ok {
			t.Fatal("an event pushed is gone")
		}
	}
	if ok, _ := c.TryPush(batch); !ok {
		t.Fatal("a channel holding 1 event refused one at capacity 2")
	}
	if ok, _ := c.TryPush(batch); ok {
		t.Fatal("a channel holding 2 events took a third at capacity 2")
	}
	select { // drain a signal left by the pops
	case <-c.Room():
	default:
	}
	c.SetCapacity(4)
	select {
	case <-c.Room():
	default:
		t.Fatal("growing the capacity did not signal room")
	}
	if ok, _ := c.TryPush(batch); !ok {
		t.Fatal("a channel holding 2 events refused one at capacity 4")
	}
}
