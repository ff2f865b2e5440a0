package web

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/operator"
)

func get(t *testing.T, h http.Handler, path string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	body, _ := io.ReadAll(rec.Body)
	return string(body)
}

// TestMetricsAndAPI feeds a story of events and reads it back from the
// API and the metrics.
func TestMetricsAndAPI(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	ops := []Operator{{UID: "source", Records: 1000}, {UID: "window", Records: 900, Late: 3}}
	// Two readings of the subtasks' counters, two seconds apart: the
	// window's subtask worked half the time and waited for room downstream
	// a quarter.
	window := checkpoint.TaskID{Vertex: "window", Subtask: 1}
	readings := [][]runtime.SubtaskStats{
		{{Task: window, Attempt: 2, Uptime: 3 * time.Second, In: 1000, Out: 100, Idle: time.Second, BackPressured: time.Second, Watermark: operator.MinTime,
			Commits: 4, CommitTime: 40 * time.Millisecond}},
		{{Task: window, Attempt: 2, State: runtime.StateFailed, Uptime: 5 * time.Second, In: 3000, Out: 500, Idle: 1500 * time.Millisecond, BackPressured: 1500 * time.Millisecond, Watermark: 1_700_000_000_000,
			Commits: 10, CommitTime: 100 * time.Millisecond}},
	}
	feeds := Feeds{
		Operators: func() []Operator { return ops },
		Subtasks:  func() []runtime.SubtaskStats { return readings[0] },
		Graph: Graph{Vertices: []Vertex{{ID: "source", Parallelism: 1}, {ID: "window", Parallelism: 2}},
			Edges: []Edge{{From: "source", To: "window", Partition: "hash"}}},
		Config: map[string]int{"parallelism": 2},
	}
	s := New("demo", feeds, Control{}, clock)
	s.Observe(runtime.JobEvent{Kind: runtime.EventRunning, Attempt: 1})
	s.Observe(runtime.JobEvent{Kind: runtime.EventCheckpointCompleted, Attempt: 1, ID: 1, Duration: 40 * time.Millisecond, Size: 2048, SyncPart: time.Millisecond,
		Slowest: checkpoint.TaskID{Vertex: "window", Subtask: 1},
		Tasks: []runtime.TaskTrace{{Task: checkpoint.TaskID{Vertex: "window", Subtask: 1}, Acked: 40 * time.Millisecond, Align: 30 * time.Millisecond,
			Sync: time.Millisecond, Async: 5 * time.Millisecond, Bytes: 2048, Arrivals: []time.Duration{0, 30 * time.Millisecond}}}})
	s.Observe(runtime.JobEvent{Kind: runtime.EventCheckpointAborted, Attempt: 1, ID: 2, Reason: checkpoint.ReasonExpired})
	s.Observe(runtime.JobEvent{Kind: runtime.EventRestarting, Attempt: 1, Err: errors.New("task window#1 panicked"), RestoredFrom: 1, Duration: time.Second})
	s.Observe(runtime.JobEvent{Kind: runtime.EventRunning, Attempt: 2, RestoredFrom: 1})
	h := s.Handler()
	get(t, h, "/api/v1/subtasks") // the first reading
	readings[0] = readings[1]
	now = now.Add(5 * time.Second)

	var job Job
	if err := json.Unmarshal([]byte(get(t, h, "/api/v1/job")), &job); err != nil {
		t.Fatal(err)
	}
	if job.State != "running" || job.Attempt != 2 || job.RestoredFrom != 1 || job.Restarts != 1 {
		t.Fatalf("job: %+v", job)
	}
	if got := get(t, h, "/api/v1/jobs/demo"); !strings.Contains(got, `"name": "demo"`) {
		t.Fatalf("jobs/demo: %s", got)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/jobs/other", nil))
	if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), `runs job "demo"`) {
		t.Fatalf("an unknown job: %d %s", rec.Code, rec.Body)
	}
	var cs []Checkpoint
	if err := json.Unmarshal([]byte(get(t, h, "/api/v1/checkpoints")), &cs); err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || cs[0].Status != "completed" || cs[0].Slowest != "window#1" || cs[1].Status != "aborted" || !strings.Contains(cs[1].Reason, "expired") {
		t.Fatalf("checkpoints: %+v", cs)
	}
	if cs[0].Tasks != nil {
		t.Fatalf("the list carries the tasks' timelines: %+v", cs[0])
	}
	var one Checkpoint
	if err := json.Unmarshal([]byte(get(t, h, "/api/v1/checkpoints/1")), &one); err != nil {
		t.Fatal(err)
	}
	if len(one.Tasks) != 1 || one.Tasks[0].Task != "window#1" || one.Tasks[0].Align != 0.03 || len(one.Tasks[0].Arrivals) != 2 || one.Tasks[0].Arrivals[1] != 0.03 {
		t.Fatalf("checkpoint 1: %+v", one)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/checkpoints/999", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("an unknown checkpoint: %d", rec.Code)
	}
	var fs []Failure
	if err := json.Unmarshal([]byte(get(t, h, "/api/v1/failures")), &fs); err != nil {
		t.Fatal(err)
	}
	if len(fs) != 1 || fs[0].Restores != 1 || !strings.Contains(fs[0].Cause, "panicked") {
		t.Fatalf("failures: %+v", fs)
	}
	if got := get(t, h, "/api/v1/config"); !strings.Contains(got, `"parallelism": 2`) {
		t.Fatalf("config: %s", got)
	}

	var g Graph
	if err := json.Unmarshal([]byte(get(t, h, "/api/v1/graph")), &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Vertices) != 2 || len(g.Edges) != 1 || g.Edges[0].Partition != "hash" {
		t.Fatalf("graph: %+v", g)
	}
	var sts []Subtask
	if err := json.Unmarshal([]byte(get(t, h, "/api/v1/subtasks?vertex=window")), &sts); err != nil {
		t.Fatal(err)
	}
	if len(sts) != 1 || sts[0].Task != "window#1" || sts[0].InPerSecond != 1000 || sts[0].OutPerSecond != 200 ||
		sts[0].Busy != 0.5 || sts[0].Idle != 0.25 || sts[0].BackPressured != 0.25 || sts[0].Watermark == nil || *sts[0].Watermark != 1_700_000_000_000 ||
		sts[0].Commits != 10 || sts[0].State != "failed" || math.Abs(sts[0].CommitLatency-0.01) > 1e-9 {
		t.Fatalf("subtasks of window: %+v", sts)
	}
	if got := get(t, h, "/api/v1/subtasks?vertex=source"); strings.TrimSpace(got) != "[]" {
		t.Fatalf("subtasks of the source: %s", got)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/subtasks?vertex=nope", nil))
	if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "not in the job graph") {
		t.Fatalf("an unknown vertex: %d %s", rec.Code, rec.Body)
	}

	metrics := get(t, h, "/metrics")
	for _, want := range []string{
		`weir_subtask_records_in_total{job="demo",subtask="1",vertex="window"} 3000`,
		`weir_subtask_busy_seconds_total{job="demo",subtask="1",vertex="window"} 2`,
		`weir_subtask_backpressured_seconds_total{job="demo",subtask="1",vertex="window"} 1.5`,
		`weir_subtask_backpressure_ratio{job="demo",subtask="1",vertex="window"} 0.25`,
		`weir_subtask_watermark_seconds{job="demo",subtask="1",vertex="window"} 1.7e+09`,
		`weir_sink_commit_duration_seconds_count{job="demo",subtask="1",vertex="window"} 10`,
		`weir_sink_commit_duration_seconds_sum{job="demo",subtask="1",vertex="window"} 0.1`,
		`weir_records_total{job="demo",operator="window"} 900`,
		`weir_late_records_dropped_total{job="demo",operator="window"} 3`,
		`weir_checkpoints_total{job="demo",result="completed"} 1`,
		`weir_checkpoints_total{job="demo",result="aborted"} 1`,
		`weir_restarts_total{job="demo"} 1`,
		`weir_restores_total{job="demo"} 1`,
		`weir_checkpoint_duration_seconds_count{job="demo"} 1`,
		`weir_checkpoint_size_bytes_sum{job="demo"} 2048`,
		`weir_checkpoint_alignment_duration_seconds_sum{job="demo"} 0.03`,
		`weir_last_checkpoint_age_seconds{job="demo"} 5`,
		`weir_attempt{job="demo"} 2`,
		`weir_job_state{job="demo",state="running"} 1`,
		`weir_job_state{job="demo",state="restarting"} 0`,
		`go_goroutines `,
		`process_resident_memory_bytes `,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("no %s in:\n%s", want, metrics)
		}
	}
	problems, err := testutil.GatherAndLint(s.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
}

// TestServeBindsWhereToldAndStops: Serve listens on the address given and
// stops serving when told.
func TestServeBindsWhereToldAndStops(t *testing.T) {
	s := New("demo", Feeds{Operators: func() []Operator { return nil }}, Control{}, nil)
	addr, stop, err := Serve("127.0.0.1:0", s.Handler())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("listening on %s", addr)
	}
	resp, err := http.Get("http://" + addr + "/api/v1/job")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	stop()
	if _, err := http.Get("http://" + addr + "/api/v1/job"); err == nil {
		t.Fatal("still serving after stop")
	}
	if _, _, err := Serve("", s.Handler()); err == nil {
		t.Fatal("an empty address was accepted")
	}
	addr, stop, err = Serve(":0", s.Handler())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("an address without a host listens on %s, want loopback", addr)
	}
}

// TestMutationsNeedTheToken: without a token configured mutations are off;
// with one, a request without it or with another is refused, and one with
// it is carried out.
func TestMutationsNeedTheToken(t *testing.T) {
	var body string // of the latest post
	post := func(h http.Handler, path, token string) int {
		req := httptest.NewRequest(http.MethodPost, path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		body = rec.Body.String()
		return rec.Code
	}
	cancelled := 0
	ctl := Control{Cancel: func(string) error { cancelled++; return nil }, Savepoint: func(context.Context, bool) (uint64, error) { return 7, nil }}
	off := New("demo", Feeds{Operators: func() []Operator { return nil }}, ctl, nil).Handler()
	if code := post(off, "/api/v1/cancel", "anything"); code != http.StatusForbidden {
		t.Fatalf("cancel without a configured token: %d", code)
	}
	ctl.Token = "s3cret"
	on := New("demo", Feeds{Operators: func() []Operator { return nil }}, ctl, nil).Handler()
	// A request without a token is told how to give one; one with another
	// token, that it is wrong (it was told the same as without one: found
	// by an outside review, session 39).
	for tok, says := range map[string]string{"": "Authorization: Bearer <token>", "wrong": "the token given does not match"} {
		if code := post(on, "/api/v1/cancel", tok); code != http.StatusUnauthorized {
			t.Fatalf("cancel with token %q: %d", tok, code)
		}
		if !strings.Contains(body, says) {
			t.Errorf("cancel with token %q: %q, want it to say %q", tok, body, says)
		}
	}
	if cancelled != 0 {
		t.Fatal("a refused cancel cancelled")
	}
	if code := post(on, "/api/v1/savepoints", "s3cret"); code != http.StatusAccepted {
		t.Fatalf("savepoint with the token: %d", code)
	}
	if code := post(on, "/api/v1/cancel", "s3cret"); code != http.StatusAccepted || cancelled != 1 {
		t.Fatalf("cancel with the token: %d, %d cancels", code, cancelled)
	}
}

// TestServesTheUI: the page and its assets come from the binary.
func TestServesTheUI(t *testing.T) {
	h := New("demo", Feeds{Operators: func() []Operator { return nil }}, Control{}, nil).Handler()
	page := get(t, h, "/")
	if !strings.Contains(page, `<script src="assets/app.js">`) || !strings.Contains(page, `id="timeline"`) {
		t.Fatalf("the page: %s", page)
	}
	if js := get(t, h, "/assets/app.js"); !strings.Contains(js, "api/v1/") {
		t.Fatalf("app.js does not read the API (%d bytes)", len(js))
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/assets/nothing.js", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("a missing asset: %d", rec.Code)
	}
}

// TestUIAssetsAreBuiltFromTheSources: the committed ui/dist was built from
// ui/src as it is (the build records its sources' hashes in dist/SOURCES):
// after changing the UI, run `npm ci && npm run build` in ui/.
func TestUIAssetsAreBuiltFromTheSources(t *testing.T) {
	list, err := os.ReadFile("ui/dist/SOURCES")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("ui/dist/SOURCES: a line %q", line)
		}
		b, err := os.ReadFile(filepath.Join("ui", name))
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%x", sha256.Sum256(b)); got != sum {
			t.Errorf("ui/%s changed since ui/dist was built: run `npm ci && npm run build` in internal/web/ui", name)
		}
		listed[name] = true
	}
	srcs, err := filepath.Glob("ui/src/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range srcs {
		if name, _ := filepath.Rel("ui", s); !listed[name] {
			t.Errorf("ui/%s is not among the sources ui/dist was built from: run `npm ci && npm run build` in internal/web/ui", name)
		}
	}
}
