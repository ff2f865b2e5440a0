package web

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/runtime"
)

// TestLoopbackServerRefusesOtherHosts: a server on loopback answers
// requests naming a loopback host, and refuses those naming another (a
// DNS-rebinding page's), with 421 and the reason.
func TestLoopbackServerRefusesOtherHosts(t *testing.T) {
	s := New("demo", Feeds{Operators: func() []Operator { return nil }}, Control{}, nil)
	addr, stop, err := Serve("127.0.0.1:0", s.Handler())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	get := func(host string) int {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/job", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, host := range []string{addr, "localhost:8081", "LOCALHOST", "127.0.0.1", "127.1.2.3:9", "[::1]:8081"} {
		if code := get(host); code != http.StatusOK {
			t.Errorf("Host %q: %d, want 200", host, code)
		}
	}
	for _, host := range []string{"attacker.example:8081", "attacker.example", "10.0.0.1:8081", "localhost.attacker.example"} {
		if code := get(host); code != http.StatusMisdirectedRequest {
			t.Errorf("Host %q: %d, want 421", host, code)
		}
	}
}

// TestAcceptedAnswersAreJSON: the 202 answers of a savepoint and a cancel
// say they are JSON, and a triggered savepoint says when and in which
// attempt (they said text/plain, and the year 1, attempt 0).
func TestAcceptedAnswersAreJSON(t *testing.T) {
	now := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	ctl := Control{Token: "t", Cancel: func(string) error { return nil }, Savepoint: func(context.Context, bool) (uint64, error) { return 7, nil }}
	s := New("demo", Feeds{Operators: func() []Operator { return nil }}, ctl, func() time.Time { return now })
	s.Observe(runtime.JobEvent{Kind: runtime.EventRunning, Attempt: 3})
	h := s.Handler()
	for _, path := range []string{"/api/v1/savepoints", "/api/v1/cancel"} {
		req := httptest.NewRequest(http.MethodPost, path, nil)
		req.Header.Set("Authorization", "Bearer t")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusAccepted || rec.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("POST %s: %d, %q", path, rec.Code, rec.Header().Get("Content-Type"))
		}
		if path != "/api/v1/savepoints" {
			continue
		}
		var c Checkpoint
		if err := json.Unmarshal(rec.Body.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		if c.ID != 7 || c.Status != "triggered" || !c.At.Equal(now) || c.Attempt != 3 {
			t.Fatalf("triggered savepoint: %+v, want id 7 at %v in attempt 3", c, now)
		}
	}
}

// TestRestoresAreShown: an attempt that restored says which checkpoint or
// savepoint, where it lives and the parallelism before and now, in the
// job's state and in /api/v1/restores (issue 22 item 5).
func TestRestoresAreShown(t *testing.T) {
	now := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	feeds := Feeds{Operators: func() []Operator { return nil }, Graph: Graph{Vertices: []Vertex{{ID: "a", Parallelism: 3}, {ID: "b", Parallelism: 2}}}}
	s := New("demo", feeds, Control{}, func() time.Time { return now })
	s.Observe(runtime.JobEvent{Kind: runtime.EventRunning, Attempt: 1})
	var job Job
	if err := json.Unmarshal([]byte(get(t, s.Handler(), "/api/v1/job")), &job); err != nil || job.LastRestore != nil {
		t.Fatalf("a fresh start: %+v, %v", job.LastRestore, err)
	}
	s.Observe(runtime.JobEvent{Kind: runtime.EventRunning, Attempt: 2, RestoredFrom: 7, RestoredSavepoint: true, RestoredWhere: "/ckpt/demo/chk-7", RestoredParallelism: 2})
	want := Restore{At: now, Attempt: 2, Checkpoint: 7, Savepoint: true, Location: "/ckpt/demo/chk-7", FromParallelism: 2, Parallelism: 3}
	if err := json.Unmarshal([]byte(get(t, s.Handler(), "/api/v1/job")), &job); err != nil || job.LastRestore == nil || *job.LastRestore != want {
		t.Fatalf("after a restore the job says %+v (%v), want %+v", job.LastRestore, err, want)
	}
	var rs []Restore
	if err := json.Unmarshal([]byte(get(t, s.Handler(), "/api/v1/restores")), &rs); err != nil || len(rs) != 1 || rs[0] != want {
		t.Fatalf("restores: %+v (%v)", rs, err)
	}
}

// TestCheckpointSummary: min, mean, max and p99 of the completed
// checkpoints' duration, size, alignment and synchronous part, aborted
// ones counted apart; each completed checkpoint says when it was
// triggered (issue 22 item 10).
func TestCheckpointSummary(t *testing.T) {
	now := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	s := New("demo", Feeds{Operators: func() []Operator { return nil }}, Control{}, func() time.Time { return now })
	empty := get(t, s.Handler(), "/api/v1/checkpoints/summary")
	var sum Summary
	if err := json.Unmarshal([]byte(empty), &sum); err != nil || sum != (Summary{}) {
		t.Fatalf("no checkpoints: %s (%v)", empty, err)
	}
	for i, d := range []time.Duration{300 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond} {
		s.Observe(runtime.JobEvent{Kind: runtime.EventCheckpointCompleted, Attempt: 1, ID: checkpoint.ID(i + 1), Duration: d, Size: int64(1000 * (i + 1)),
			SyncPart: time.Duration(i+1) * time.Millisecond, Tasks: []runtime.TaskTrace{{Align: d / 2}, {Align: d / 4}}})
	}
	s.Observe(runtime.JobEvent{Kind: runtime.EventCheckpointAborted, Attempt: 1, ID: 4, Reason: checkpoint.ReasonExpired})
	if err := json.Unmarshal([]byte(get(t, s.Handler(), "/api/v1/checkpoints/summary")), &sum); err != nil {
		t.Fatal(err)
	}
	want := Summary{Completed: 3, Aborted: 1,
		Duration: Spread{Min: 0.1, Mean: 0.2, Max: 0.3, P99: 0.3},
		Size:     Spread{Min: 1000, Mean: 2000, Max: 3000, P99: 3000},
		Align:    Spread{Min: 0.05, Mean: 0.1, Max: 0.15, P99: 0.15},
		SyncPart: Spread{Min: 0.001, Mean: 0.002, Max: 0.003, P99: 0.003}}
	near := func(a, b Spread) bool {
		d := func(x, y float64) bool { return math.Abs(x-y) < 1e-9 }
		return d(a.Min, b.Min) && d(a.Mean, b.Mean) && d(a.Max, b.Max) && d(a.P99, b.P99)
	}
	if sum.Completed != 3 || sum.Aborted != 1 || !near(sum.Duration, want.Duration) || !near(sum.Size, want.Size) || !near(sum.Align, want.Align) || !near(sum.SyncPart, want.SyncPart) {
		t.Fatalf("summary %+v, want %+v", sum, want)
	}
	var c Checkpoint
	if err := json.Unmarshal([]byte(get(t, s.Handler(), "/api/v1/checkpoints/2")), &c); err != nil || c.Triggered == nil || !c.Triggered.Equal(now.Add(-100*time.Millisecond)) || c.AckedTasks != 2 {
		t.Fatalf("checkpoint 2: triggered %v, %d tasks acknowledged (%v)", c.Triggered, c.AckedTasks, err)
	}
}

// TestHeldByNamesTheCause: in the slowed job's checkpoint, the task that
// acknowledged last (count#0) only waited for the slowed subtask; the
// barrier waited in slow#0's input, behind its backlog, for 0.531 s:
// slow#0 held the checkpoint (issue 22 item 4). The time from the last
// acknowledgement to completion is the metadata's write.
func TestHeldByNamesTheCause(t *testing.T) {
	tasks := []TaskTimeline{
		{Task: "numbers#0", Acked: 0.101, Sync: 0.001},
		{Task: "numbers#1", Acked: 0.102, Sync: 0.001},
		// Its first barrier (from numbers#1) came at 0.12, the last (from
		// numbers#0, forwarded at 0.1) at 0.63.
		{Task: "slow#0", Acked: 0.632, Sync: 0.001, Align: 0.51, Arrivals: []float64{0.51, 0}, Channels: []string{"numbers#0", "numbers#1"}},
		{Task: "slow#1", Acked: 0.13, Sync: 0.001, Align: 0.02, Arrivals: []float64{0.02, 0}, Channels: []string{"numbers#0", "numbers#1"}},
		// Blocked on slow#1's channel until slow#0's barrier came.
		{Task: "count#0", Acked: 0.64, Sync: 0.001, Align: 0.5, Arrivals: []float64{0.5, 0}, Channels: []string{"slow#0", "slow#1"}},
		{Task: "count#1", Acked: 0.635, Sync: 0.001, Align: 0.49, Arrivals: []float64{0.49, 0}, Channels: []string{"slow#0", "slow#1"}},
	}
	if held, wait := heldBy(tasks); held != "slow#0" || math.Abs(wait-0.531) > 1e-9 {
		t.Fatalf("held by %s for %.3f s, want slow#0 for 0.531 s", held, wait)
	}
	// The path ends at a source that snapshotted late: the source held it.
	late := slices.Clone(tasks)
	late[0] = TaskTimeline{Task: "numbers#0", Acked: 0.9, Sync: 0.001}
	late[2].Arrivals, late[2].Align, late[2].Acked = []float64{0.78, 0}, 0.78, 0.902
	late[4].Acked = 0.91
	if held, _ := heldBy(late); held != "numbers#0" {
		t.Fatalf("with a late source: held by %s, want numbers#0", held)
	}
	now := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	s := New("demo", Feeds{Operators: func() []Operator { return nil }, Inputs: func(task checkpoint.TaskID) []string {
		for _, tt := range tasks {
			if tt.Task == task.String() {
				return tt.Channels
			}
		}
		return nil
	}}, Control{}, func() time.Time { return now })
	var traces []runtime.TaskTrace
	for _, tt := range tasks {
		vertex, sub, _ := strings.Cut(tt.Task, "#")
		n, _ := strconv.Atoi(sub)
		tr := runtime.TaskTrace{Task: checkpoint.TaskID{Vertex: vertex, Subtask: n}, Acked: secs(tt.Acked), Align: secs(tt.Align), Sync: secs(tt.Sync)}
		for _, a := range tt.Arrivals {
			tr.Arrivals = append(tr.Arrivals, secs(a))
		}
		traces = append(traces, tr)
	}
	s.Observe(runtime.JobEvent{Kind: runtime.EventCheckpointCompleted, Attempt: 1, ID: 1, Duration: 700 * time.Millisecond, Tasks: traces})
	var c Checkpoint
	if err := json.Unmarshal([]byte(get(t, s.Handler(), "/api/v1/checkpoints/1")), &c); err != nil {
		t.Fatal(err)
	}
	if c.HeldBy != "slow#0" || math.Abs(c.HeldFor-0.531) > 1e-6 || math.Abs(c.Finalize-0.06) > 1e-6 {
		t.Fatalf("checkpoint 1: held by %s for %v, finalized in %v; want slow#0, 0.531 s, 0.06 s", c.HeldBy, c.HeldFor, c.Finalize)
	}
}

func secs(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }
