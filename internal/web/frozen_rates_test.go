package web

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/operator"
)

// TestFrozenReadingShowsNoRate: in a cluster a subtask's reading
// comes with its worker's heartbeats; when the worker is killed, or the
// job finished (the final heartbeat carries no readings), the coordinator
// keeps serving the last reading, unchanged. Two readings a few seconds
// apart with the same uptime and counters mean no record moved between
// them, yet the API answers the subtask's lifetime average as its current
// rate (the uptime did not advance, so the previous reading is dropped and
// the rate is taken since the start): a lost worker's subtask shows
// ~940k records/s while the job waits to restart.
func TestFrozenReadingShowsNoRate(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	task := checkpoint.TaskID{Vertex: "count", Subtask: 0}
	frozen := []runtime.SubtaskStats{{Task: task, Attempt: 1, Uptime: 8 * time.Second, In: 7_500_000, Out: 0,
		Idle: 0, Watermark: operator.MinTime}}
	s := New("wordcount", Feeds{Operators: func() []Operator { return nil }, Subtasks: func() []runtime.SubtaskStats { return frozen }},
		Control{}, func() time.Time { return now })
	h := s.Handler()
	get(t, h, "/api/v1/subtasks")  // the reading its last heartbeat brought
	now = now.Add(5 * time.Second) // nothing since: the worker is gone
	var sts []Subtask
	if err := json.Unmarshal([]byte(get(t, h, "/api/v1/subtasks")), &sts); err != nil {
		t.Fatal(err)
	}
	if got := sts[0].InPerSecond; got != 0 {
		t.Errorf("recordsInPerSecond = %.0f over 5 s in which the counters did not move; want 0", got)
	}
	if got := sts[0].Busy; got != 0 {
		t.Errorf("busyRatio = %v over 5 s in which the subtask did nothing; want 0", got)
	}
}
