package weir_test

import (
	"testing"
	"time"

	"github.com/weirstream/weir"
)

// TestBufferDebloatLetsAlignedCheckpointsComplete: behind an operator slowed
// to a crawl, aligned barriers wait behind its channels' backlog, 16
// batches each, over a second to drain: checkpoints with a 1 s timeout
// expire. With buffer debloating at a 100 ms target the channels shrink to
// what the operator drains in about that long, and the same checkpoints
// complete.
func TestBufferDebloatLetsAlignedCheckpointsComplete(t *testing.T) {
	count := func(evs []weir.JobEvent) (completed, expired int) {
		for _, ev := range evs {
			switch {
			case ev.Kind == weir.EventCheckpointCompleted:
				completed++
			case ev.Kind == weir.EventCheckpointAborted && ev.Reason.String() == "expired":
				expired++
			}
		}
		return completed, expired
	}
	cc := weir.CheckpointConfig{Timeout: time.Second}
	without := crawl(t, weir.Config{Checkpoint: cc}, func(evs []weir.JobEvent) bool {
		_, expired := count(evs)
		return expired >= 3
	})
	t.Logf("without debloating: %v", summary(without))
	with := crawl(t, weir.Config{Checkpoint: cc, BufferDebloat: 100 * time.Millisecond}, func(evs []weir.JobEvent) bool {
		completed, _ := count(evs)
		return completed >= 5
	})
	t.Logf("debloating to 100 ms: %v", summary(with))
	if completed, _ := count(without); completed > 0 {
		t.Errorf("without debloating %d aligned checkpoints completed behind the crawl: the test's premise is gone", completed)
	}
}
