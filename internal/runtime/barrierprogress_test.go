package runtime

import (
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// TestBarrierProgress: what a task publishes of its way through its
// newest checkpoint, as its barriers and snapshots come, and what a
// reading of Stats says of it.
func TestBarrierProgress(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	task := checkpoint.TaskID{Vertex: "count"}
	r := NewStats()
	s := r.start(task, 1, t0, nil, nil)
	read := func() BarrierProgress { return r.Read(ms(100))[0].Barrier }
	if got := read(); got != (BarrierProgress{}) {
		t.Fatalf("before any barrier: %+v", got)
	}
	for _, step := range []struct {
		what string
		do   func()
		want BarrierProgress
	}{
		{"checkpoint 3's first barrier", func() { s.barrierArrived(3, 2, ms(10)) },
			BarrierProgress{ID: 3, Since: ms(10), Barriers: 1, Channels: 2}},
		{"a late barrier of aborted checkpoint 2", func() { s.barrierArrived(2, 2, ms(11)) },
			BarrierProgress{ID: 3, Since: ms(10), Barriers: 1, Channels: 2}},
		{"its second", func() { s.barrierArrived(3, 2, ms(20)) },
			BarrierProgress{ID: 3, Since: ms(10), Barriers: 2, Channels: 2}},
		{"its aligned snapshot", func() { s.snapshotted(3, false, false, true) },
			BarrierProgress{ID: 3, Since: ms(10), Barriers: 2, Channels: 2, Done: true}},
		{"checkpoint 4's first barrier, switched to unaligned", func() {
			s.barrierArrived(4, 2, ms(30))
			s.snapshotted(4, true, true, false)
		}, BarrierProgress{ID: 4, Since: ms(30), Barriers: 1, Channels: 2, Unaligned: true, Switched: true}},
		{"its channel state complete", func() { s.barrierArrived(4, 2, ms(40)); s.barriersDone(4) },
			BarrierProgress{ID: 4, Since: ms(30), Barriers: 2, Channels: 2, Unaligned: true, Switched: true, Done: true}},
	} {
		step.do()
		if got := read(); got != step.want {
			t.Fatalf("after %s: %+v, want %+v", step.what, got, step.want)
		}
	}
	var none *Stats
	if none.Pending() != nil {
		t.Fatal("a nil Stats has checkpoints in flight")
	}
	none.setPending([]checkpoint.PendingCheckpoint{{ID: 1}}) // no panic
}
