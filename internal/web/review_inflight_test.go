package web

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/runtime"
)

// TestCheckpointListedOnceWhileItCompletes: GET /api/v1/checkpoints reads
// the checkpoints in progress and the history under two separate locks; a
// completion folded in between lists the checkpoint twice, in progress
// and completed. The driver's order (the completion told before the view
// without it is published) does not help: the history is read after.
// Checkpoints complete one after another as the driver does it while
// the list is read; no answer may hold an id twice.
func TestCheckpointListedOnceWhileItCompletes(t *testing.T) {
	var mu sync.Mutex
	var pending []checkpoint.PendingCheckpoint
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	feeds := Feeds{Operators: func() []Operator { return nil },
		Pending: func() []checkpoint.PendingCheckpoint { mu.Lock(); defer mu.Unlock(); return pending }}
	s := New("demo", feeds, Control{}, func() time.Time { return t0 })
	s.Observe(runtime.JobEvent{Kind: runtime.EventRunning, Attempt: 1})
	h := s.Handler()
	const n = 3000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for id := checkpoint.ID(1); id <= n; id++ {
			mu.Lock()
			// id and the next ones are in flight (a savepoint and periodic
			// checkpoints; many, so that a reading takes a while).
			pending = pending[:0:0]
			for k := range checkpoint.ID(64) {
				pending = append(pending, checkpoint.PendingCheckpoint{ID: id + k, Triggered: t0, Tasks: []checkpoint.PendingTask{{Task: checkpoint.TaskID{Vertex: "v"}}}})
			}
			mu.Unlock()
			// The driver: the completion first, then the view without it.
			s.Observe(runtime.JobEvent{Kind: runtime.EventCheckpointCompleted, Attempt: 1, ID: id})
			mu.Lock()
			pending = pending[1:]
			mu.Unlock()
		}
	}()
	for {
		select {
		case <-done:
			return
		default:
		}
		var list []Checkpoint
		if err := json.Unmarshal([]byte(get(t, h, "/api/v1/checkpoints")), &list); err != nil {
			t.Fatal(err)
		}
		seen := map[uint64]string{}
		for _, c := range list {
			if st, ok := seen[c.ID]; ok {
				<-done
				t.Fatalf("checkpoint %d listed twice: %s and %s", c.ID, st, c.Status)
			}
			seen[c.ID] = c.Status
		}
	}
}

// TestCheckpointFoundWhileItCompletes: GET /api/v1/checkpoints/{id} looks
// for id in the history, then, under another reading, among those in
// progress: a checkpoint completing in between is in neither reading, and
// the answer is 404 for a checkpoint that was in progress before and
// completed after.
func TestCheckpointFoundWhileItCompletes(t *testing.T) {
	var mu sync.Mutex
	var pending []checkpoint.PendingCheckpoint
	var current atomic.Uint64
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	feeds := Feeds{Operators: func() []Operator { return nil },
		Pending: func() []checkpoint.PendingCheckpoint { mu.Lock(); defer mu.Unlock(); return pending }}
	s := New("demo", feeds, Control{}, func() time.Time { return t0 })
	s.Observe(runtime.JobEvent{Kind: runtime.EventRunning, Attempt: 1})
	h := s.Handler()
	const n = 3000
	set := func(id checkpoint.ID) {
		mu.Lock()
		pending = []checkpoint.PendingCheckpoint{{ID: id, Triggered: t0, Tasks: []checkpoint.PendingTask{{Task: checkpoint.TaskID{Vertex: "v"}}}}}
		mu.Unlock()
		current.Store(uint64(id))
	}
	set(1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for id := checkpoint.ID(1); id <= n; id++ {
			// The driver: the completion first, then the view without it
			// (and with the next one).
			s.Observe(runtime.JobEvent{Kind: runtime.EventCheckpointCompleted, Attempt: 1, ID: id})
			set(id + 1)
		}
	}()
	for {
		select {
		case <-done:
			return
		default:
		}
		id := current.Load() // in progress now, or completed since
		if code, body := request(h, "/api/v1/checkpoints/"+strconv.FormatUint(id, 10), ""); code != http.StatusOK {
			if current.Load() > id+maxHistory/2 {
				continue // it left the history since (the last 100)
			}
			<-done
			t.Fatalf("GET /api/v1/checkpoints/%d: %d %s", id, code, body)
		}
	}
}
