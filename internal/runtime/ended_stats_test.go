package runtime

import (
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// TestEndedSubtaskStopsAging: a subtask that ended (finished,
// failed or cancelled) does no more work: its uptime stops at its end.
// Read kept its Uptime at now-started, so its Busy time (Uptime less Idle and BackPressured) grows
// without end: the API's busySeconds, weir_subtask_busy_seconds_total and
// the busy ratio (1.0) say a dead subtask works flat out.
func TestEndedSubtaskStopsAging(t *testing.T) {
	for _, st := range []TaskState{StateFinished, StateFailed, StateCancelled} {
		t.Run(st.String(), func(t *testing.T) {
			r := NewStats()
			t0 := time.Now()
			task := checkpoint.TaskID{Vertex: "lines", Subtask: 0}
			s := r.start(task, 1, t0, nil, nil)
			s.AddIn(100)
			s.addIdle(2 * time.Second)
			s.end(st, t0.Add(10*time.Second))
			at := r.Read(t0.Add(10 * time.Second))[0]
			later := r.Read(t0.Add(time.Hour))[0]
			if at.Uptime != 10*time.Second || at.Busy() != 8*time.Second || later.Busy() != at.Busy() || later.Uptime != at.Uptime {
				t.Errorf("a %s subtask ended 10 s after its start, 2 s of it idle: uptime %v -> %v, busy %v -> %v an hour later; want 10s and 8s both times",
					st, at.Uptime, later.Uptime, at.Busy(), later.Busy())
			}
		})
	}
}
