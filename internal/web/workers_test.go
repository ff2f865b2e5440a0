package web

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/runtime"
)

// getBody answers GET path from h.
func getBody(t *testing.T, h http.Handler, path string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// TestWorkersInOneProcess: a process that runs the whole job answers no
// workers, says it is no cluster and why, and exports no worker metrics.
func TestWorkersInOneProcess(t *testing.T) {
	h := New("demo", Feeds{Operators: func() []Operator { return nil }}, Control{}, nil).Handler()
	var ws Workers
	if err := json.Unmarshal([]byte(getBody(t, h, "/api/v1/workers")), &ws); err != nil {
		t.Fatal(err)
	}
	if ws.Cluster || ws.Workers == nil || len(ws.Workers) != 0 || !strings.Contains(ws.Note, "runs the whole job") {
		t.Fatalf("workers in one process: %+v", ws)
	}
	if m := getBody(t, h, "/metrics"); strings.Contains(m, "weir_worker_") {
		t.Fatalf("worker metrics in one process:\n%s", m)
	}
}

// TestWorkersOfACluster: the coordinator's workers, as its feed reads
// them, in the API and as metrics per worker.
func TestWorkersOfACluster(t *testing.T) {
	workers := []Worker{
		{Name: "w-1", DataAddress: "10.0.0.1:7000", Session: 3, Slots: 4, SlotsUsed: 3, SlotsFree: 1, HeartbeatAge: 0.25, State: "alive", Tasks: []string{"a#0", "b#0"},
			Process: &Process{HeapBytes: 5 << 20, HeapObjects: 1000, MemoryBytes: 20 << 20, GCCycles: 7, GCCPUSeconds: 0.5, GCPauseSeconds: 0.002, Goroutines: 40, CPUSeconds: 3, GoVersion: "go1.26", UptimeSeconds: 60}},
		{Name: "w-2", Slots: 2, SlotsFree: 2, HeartbeatAge: 3, State: "suspect", Tasks: []string{}},
		{Name: "w-3", Slots: 2, State: "lost", LostReason: "no heartbeat within the timeout", LostSecondsAgo: 4, Tasks: []string{}},
	}
	h := New("demo", Feeds{Operators: func() []Operator { return nil }, Workers: func() []Worker { return workers }}, Control{}, nil).Handler()
	var ws Workers
	if err := json.Unmarshal([]byte(getBody(t, h, "/api/v1/workers")), &ws); err != nil {
		t.Fatal(err)
	}
	if !ws.Cluster || ws.Note != "" || len(ws.Workers) != 3 || ws.Workers[2].LostReason == "" || ws.Workers[0].Process.HeapBytes != 5<<20 || ws.Workers[1].Process != nil || ws.Workers[1].State != "suspect" {
		t.Fatalf("workers: %+v", ws)
	}
	m := getBody(t, h, "/metrics")
	for _, want := range []string{
		`weir_worker_heap_bytes{job="demo",worker="w-1"} 5.24288e+06`,
		`weir_worker_heartbeat_age_seconds{job="demo",worker="w-1"} 0.25`,
		`weir_worker_heartbeat_age_seconds{job="demo",worker="w-2"} 3`,
		`weir_worker_slots{job="demo",state="used",worker="w-1"} 3`,
		`weir_worker_slots{job="demo",state="free",worker="w-1"} 1`,
		`weir_worker_slots{job="demo",state="free",worker="w-2"} 2`,
		`weir_worker_suspect{job="demo",worker="w-2"} 1`,
		`weir_worker_gc_cycles_total{job="demo",worker="w-1"} 7`,
		`weir_worker_gc_pause_seconds_total{job="demo",worker="w-1"} 0.002`,
		`weir_worker_goroutines{job="demo",worker="w-1"} 40`,
		`weir_worker_cpu_seconds_total{job="demo",worker="w-1"} 3`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(m, `weir_worker_heap_bytes{job="demo",worker="w-2"}`) {
		t.Errorf("a worker that sent no heartbeat yet has a heap:\n%s", m)
	}
	if strings.Contains(m, `worker="w-3"`) {
		t.Errorf("a lost worker has series:\n%s", m)
	}
	// An empty list between terms of leadership is [], not null.
	h = New("demo", Feeds{Operators: func() []Operator { return nil }, Workers: func() []Worker { return nil }}, Control{}, nil).Handler()
	if body := getBody(t, h, "/api/v1/workers"); !strings.Contains(body, `"workers": []`) || !strings.Contains(body, `"cluster": true`) {
		t.Fatalf("no workers yet: %s", body)
	}
}

// TestSubtasksSayTheirBytes: the bytes a subtask's channels to other
// processes carried, in the API and as metrics; 0 where it has none.
func TestSubtasksSayTheirBytes(t *testing.T) {
	now := time.Now()
	stats := []runtime.SubtaskStats{
		{Task: checkpoint.TaskID{Vertex: "a", Subtask: 0}, Uptime: time.Second, BytesOut: 4096},
		{Task: checkpoint.TaskID{Vertex: "b", Subtask: 0}, Uptime: time.Second, BytesIn: 4000},
	}
	h := New("demo", Feeds{Operators: func() []Operator { return nil }, Subtasks: func() []runtime.SubtaskStats { return stats }}, Control{}, func() time.Time { return now }).Handler()
	var ss []Subtask
	if err := json.Unmarshal([]byte(getBody(t, h, "/api/v1/subtasks")), &ss); err != nil {
		t.Fatal(err)
	}
	if len(ss) != 2 || ss[0].BytesOut != 4096 || ss[0].BytesIn != 0 || ss[1].BytesIn != 4000 {
		t.Fatalf("subtasks: %+v", ss)
	}
	if body := getBody(t, h, "/api/v1/subtasks"); !strings.Contains(body, `"bytesIn": 0`) {
		t.Fatalf("a subtask without bytes in does not say 0: %s", body)
	}
	m := getBody(t, h, "/metrics")
	for _, want := range []string{
		`weir_subtask_bytes_out_total{job="demo",subtask="0",vertex="a"} 4096`,
		`weir_subtask_bytes_in_total{job="demo",subtask="0",vertex="b"} 4000`,
		`weir_subtask_bytes_in_total{job="demo",subtask="0",vertex="a"} 0`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
