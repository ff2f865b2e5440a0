package web

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/runtime"
)

// alignmentStory is a job of a source and three counters whose first
// checkpoint is aligned, second unaligned (the counters from their first
// barrier, with records in flight), third switched at one counter (it
// aligned 250 ms before the aligned-checkpoint timeout), and fourth
// aborted.
func alignmentStory(t *testing.T) *Server {
	t.Helper()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	src := checkpoint.TaskID{Vertex: "source"}
	count := func(i int) checkpoint.TaskID { return checkpoint.TaskID{Vertex: "count", Subtask: i} }
	trace := func(task checkpoint.TaskID, unaligned, switched bool, channelState int64) runtime.TaskTrace {
		tt := runtime.TaskTrace{Task: task, Acked: 300 * time.Millisecond, Sync: time.Millisecond, Async: 2 * time.Millisecond,
			Bytes: 500 + channelState, Unaligned: unaligned, Switched: switched, ChannelState: channelState}
		if task.Vertex == "count" {
			tt.Arrivals = []time.Duration{0, -1}
		}
		return tt
	}
	feeds := Feeds{Operators: func() []Operator { return nil },
		Graph: Graph{Vertices: []Vertex{{ID: "source", Parallelism: 1, MaxParallelism: 128, Operators: []GraphOperator{{UID: "source", Name: "source", Kind: "source"}}},
			{ID: "count", Parallelism: 3, MaxParallelism: 128, Operators: []GraphOperator{{UID: "count", Name: "count", Kind: "process"}}}},
			Edges: []Edge{{From: "source", To: "count", Partition: "hash"}}},
		Config: map[string]any{"mode": "exactly-once", "checkpointAlignment": "aligned", "alignedCheckpointTimeoutNanos": int64(250 * time.Millisecond)}}
	s := New("demo", feeds, Control{}, func() time.Time { return now })
	s.Observe(runtime.JobEvent{Kind: runtime.EventRunning, Attempt: 1})
	completed := func(id checkpoint.ID, tasks ...runtime.TaskTrace) {
		var size int64
		for _, tt := range tasks {
			size += tt.Bytes
		}
		s.Observe(runtime.JobEvent{Kind: runtime.EventCheckpointCompleted, Attempt: 1, ID: id, Duration: 300 * time.Millisecond, Size: size,
			Slowest: tasks[len(tasks)-1].Task, Tasks: tasks})
	}
	completed(1, trace(src, false, false, 0), trace(count(0), false, false, 0), trace(count(1), false, false, 0), trace(count(2), false, false, 0))
	completed(2, trace(src, false, false, 0), trace(count(0), true, false, 1000), trace(count(1), true, false, 2000), trace(count(2), true, false, 0))
	switched := trace(count(0), true, true, 4096)
	switched.Align = 250 * time.Millisecond
	completed(3, trace(src, false, false, 0), switched, trace(count(1), false, false, 0), trace(count(2), false, false, 0))
	s.Observe(runtime.JobEvent{Kind: runtime.EventCheckpointAborted, Attempt: 1, ID: 4, Reason: checkpoint.ReasonExpired})
	return s
}

// TestMetricsAndAPIOfUnalignedCheckpoints: the API says per checkpoint how
// its tasks snapshotted and the channel state it holds, and per task in
// its timeline; the metrics count the tasks' snapshots by alignment and
// the channel state of completed checkpoints, and pass the linter.
func TestMetricsAndAPIOfUnalignedCheckpoints(t *testing.T) {
	s := alignmentStory(t)
	h := s.Handler()

	// The list, read as JSON objects: the fields are named as documented.
	var list []map[string]any
	if err := json.Unmarshal([]byte(get(t, h, "/api/v1/checkpoints")), &list); err != nil {
		t.Fatal(err)
	}
	want := []map[string]any{
		{"alignment": "aligned", "acknowledgedTasks": 4.0, "unalignedTasks": nil, "switchedTasks": nil, "channelStateBytes": nil},
		{"alignment": "unaligned", "acknowledgedTasks": 4.0, "unalignedTasks": 3.0, "switchedTasks": nil, "channelStateBytes": 3000.0},
		{"alignment": "switched", "acknowledgedTasks": 4.0, "unalignedTasks": 1.0, "switchedTasks": 1.0, "channelStateBytes": 4096.0},
		{"alignment": nil, "acknowledgedTasks": nil, "unalignedTasks": nil, "switchedTasks": nil, "channelStateBytes": nil}, // aborted
	}
	if len(list) != len(want) {
		t.Fatalf("%d checkpoints listed, want %d: %v", len(list), len(want), list)
	}
	for i, w := range want {
		for k, v := range w {
			if got := list[i][k]; got != v {
				t.Errorf("checkpoint %v: %s = %v, want %v", list[i]["id"], k, got, v)
			}
		}
	}

	// A checkpoint's timeline: each task's alignment and channel state,
	// always present; the switched task's alignment time is when the
	// timeout switched it.
	var detail struct {
		Tasks []map[string]any
	}
	if err := json.Unmarshal([]byte(get(t, h, "/api/v1/checkpoints/3")), &detail); err != nil {
		t.Fatal(err)
	}
	wantTasks := map[string][3]any{ // alignment, channelStateBytes, alignSeconds
		"source#0": {"aligned", 0.0, 0.0},
		"count#0":  {"switched", 4096.0, 0.25},
		"count#1":  {"aligned", 0.0, 0.0},
		"count#2":  {"aligned", 0.0, 0.0},
	}
	if len(detail.Tasks) != len(wantTasks) {
		t.Fatalf("checkpoint 3's tasks: %v", detail.Tasks)
	}
	for _, tk := range detail.Tasks {
		w, ok := wantTasks[tk["task"].(string)]
		if !ok || tk["alignment"] != w[0] || tk["channelStateBytes"] != w[1] || tk["alignSeconds"] != w[2] {
			t.Errorf("checkpoint 3, task %v: alignment %v, channelStateBytes %v, alignSeconds %v; want %v", tk["task"], tk["alignment"], tk["channelStateBytes"], tk["alignSeconds"], w)
		}
	}
	var unaligned Checkpoint
	if err := json.Unmarshal([]byte(get(t, h, "/api/v1/checkpoints/2")), &unaligned); err != nil {
		t.Fatal(err)
	}
	var states []int64
	var hows []string
	for _, tl := range unaligned.Tasks {
		states, hows = append(states, tl.ChannelState), append(hows, tl.Alignment)
	}
	if got := strings.Join(hows, " "); got != "aligned unaligned unaligned unaligned" || states[1] != 1000 || states[2] != 2000 || states[3] != 0 {
		t.Errorf("checkpoint 2's tasks: %s, channel state %v", got, states)
	}
	// An unaligned task's channels whose barrier came after its snapshot
	// say -1 (the runtime's -1 ns), as documented.
	if got := unaligned.Tasks[1].Arrivals; len(got) != 2 || got[0] != 0 || got[1] != -1 {
		t.Errorf("checkpoint 2, %s: barrier arrivals %v, want [0 -1]", unaligned.Tasks[1].Task, got)
	}

	metrics := get(t, h, "/metrics")
	for _, want := range []string{
		"# HELP weir_checkpoint_channel_state_bytes Completed checkpoints' channel state",
		"# TYPE weir_checkpoint_channel_state_bytes histogram",
		`weir_checkpoint_channel_state_bytes_count{job="demo"} 3`,
		`weir_checkpoint_channel_state_bytes_sum{job="demo"} 7096`,
		`weir_checkpoint_channel_state_bytes_bucket{job="demo",le="1024"} 1`,
		`weir_checkpoint_channel_state_bytes_bucket{job="demo",le="4096"} 3`, // 3000 and 4096
		"# TYPE weir_checkpoint_task_snapshots_total counter",
		`weir_checkpoint_task_snapshots_total{alignment="aligned",job="demo"} 8`,
		`weir_checkpoint_task_snapshots_total{alignment="unaligned",job="demo"} 3`,
		`weir_checkpoint_task_snapshots_total{alignment="switched",job="demo"} 1`,
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

// TestCheckpointsCommandShowsAlignment: weir checkpoints says per
// checkpoint how many tasks went unaligned or were switched, and the
// bytes of channel state.
func TestCheckpointsCommandShowsAlignment(t *testing.T) {
	srv := httptest.NewServer(alignmentStory(t).Handler())
	defer srv.Close()
	var out bytes.Buffer
	for _, cmd := range Commands() {
		if cmd.Name() != "checkpoints" {
			continue
		}
		cmd.SetArgs([]string{"--web", srv.Listener.Addr().String()})
		cmd.SetOut(&out)
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{
		`(?m)^ID +KIND +STATUS +AT +DURATION +BYTES +ALIGNMENT +CHANNEL STATE BYTES +SLOWEST TASK / REASON$`,
		`(?m)^1 +checkpoint +completed +10:00:00.000 +300ms +2000 +aligned +0 +count#2$`,
		`(?m)^2 +checkpoint +completed +10:00:00.000 +300ms +5000 +unaligned 3/4 tasks +3000 +count#2$`,
		`(?m)^3 +checkpoint +completed +10:00:00.000 +300ms +6096 +switched 1/4 tasks +4096 +count#2$`,
		`(?m)^4 +checkpoint +aborted +10:00:00.000 +0ms +0 +- +- +expired`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("no line matching %s in:\n%s", want, out.String())
		}
	}
}

// TestCheckpointsAlignmentColumn: weir checkpoints' ALIGNMENT column says
// of a mixed checkpoint (some tasks unaligned from the first barrier,
// some switched) both; of a job that does not say, "-".
func TestCheckpointsAlignmentColumn(t *testing.T) {
	for _, tc := range []struct {
		cp   Checkpoint
		want string
	}{
		{Checkpoint{Status: "completed", Alignment: "aligned", AckedTasks: 4}, "aligned"},
		{Checkpoint{Status: "completed", Alignment: "unaligned", AckedTasks: 4, UnalignedTasks: 3}, "unaligned 3/4 tasks"},
		{Checkpoint{Status: "completed", Alignment: "switched", AckedTasks: 4, UnalignedTasks: 2, SwitchedTasks: 2}, "switched 2/4 tasks"},
		{Checkpoint{Status: "completed", Alignment: "switched", AckedTasks: 4, UnalignedTasks: 3, SwitchedTasks: 1}, "unaligned 3/4 tasks, 1 switched"},
		{Checkpoint{Status: "completed"}, "-"},
		{Checkpoint{Status: "aborted"}, "-"},
	} {
		if got := alignmentOf(tc.cp); got != tc.want {
			t.Errorf("alignmentOf(%+v) = %q, want %q", tc.cp, got, tc.want)
		}
	}
}
