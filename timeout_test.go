package weir_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
)

type stall struct{ stalled bool }

// Process stalls once, in fake time, for longer than the checkpoint timeout.
func (s *stall) Process(_ *weir.KeyedContext[int64], v int64, out weir.Collector[int64]) error {
	if v == 500 && !s.stalled {
		s.stalled = true
		time.Sleep(1500 * time.Millisecond)
	}
	out.Collect(v)
	return nil
}

// TestCheckpointTimeoutInFakeTime: an operator that stalls past the
// checkpoint timeout makes the pending checkpoint expire; with one failure
// tolerated, the job carries on, a later checkpoint completes, and the
// output is whole. The clock is synctest's, so the test takes no real time.
//
// NB: the stall is shorter than two timeouts. A longer one also expires the
// next checkpoint: the source, back-pressured by the stalled task, cannot
// inject its barrier — the cost of aligned checkpoints under back-pressure.
func TestCheckpointTimeoutInFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var events []weir.JobEvent
		e := weir.New(weir.Config{
			Checkpoint: weir.CheckpointConfig{Interval: 100 * time.Millisecond, Timeout: time.Second, TolerableFailures: 1},
			Restart:    weir.NoRestart{},
			OnEvent:    func(ev weir.JobEvent) { events = append(events, ev) },
		})
		g, err := newRateLimited(1000, 2000)
		if err != nil {
			t.Fatal(err)
		}
		nums := weir.Source(e, "nums", g)
		out := weir.Process(weir.KeyBy(nums, func(v int64) int64 { return v % 4 }), "stall",
			func() weir.KeyedProcessFunction[int64, int64, int64] { return &stall{} })
		var c collect[int64]
		weir.Sink(out, "out", c.sink())
		if _, err := e.Execute(context.Background()); err != nil {
			t.Fatal(err)
		}
		expired := slices.IndexFunc(events, func(ev weir.JobEvent) bool {
			return ev.Kind == weir.EventCheckpointAborted && ev.Reason == checkpoint.ReasonExpired
		})
		if expired < 0 {
			t.Fatalf("no checkpoint expired: %v", events)
		}
		if !slices.ContainsFunc(events[expired:], func(ev weir.JobEvent) bool { return ev.Kind == weir.EventCheckpointCompleted }) {
			t.Fatal("no checkpoint completed after the expiry")
		}
		if got := c.values(); len(got) != 2000 {
			t.Fatalf("%d records out, want 2000", len(got))
		}
	})
}
