package web

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/browsertest"
	"github.com/weirstream/weir/internal/runtime"
)

// inflightStory is a job of a source and two counters with checkpoint 5
// completed, checkpoint 6 in progress and savepoint 7 just triggered, as
// of 10:00:02: of 6, the source acknowledged, count#0 is through its
// barriers and writes its state, count#1 aligns (1 of its 2 barriers came
// 1.5 s ago); of 7 nothing came yet, but the source took the trigger.
// Its feeds are the driver's and the tasks' as the runtime publishes
// them; set changes them as a test goes on.
type inflightStory struct {
	s   *Server
	now time.Time

	mu      sync.Mutex
	pending []checkpoint.PendingCheckpoint
	stats   []runtime.SubtaskStats
}

var (
	storySrc    = checkpoint.TaskID{Vertex: "source"}
	storyCount0 = checkpoint.TaskID{Vertex: "count"}
	storyCount1 = checkpoint.TaskID{Vertex: "count", Subtask: 1}
)

func newInflightStory(t *testing.T) *inflightStory {
	t.Helper()
	st := &inflightStory{now: time.Date(2026, 12, 2, 10, 0, 2, 0, time.UTC)}
	t0 := st.now.Add(-2 * time.Second)
	st.pending = []checkpoint.PendingCheckpoint{
		{ID: 6, Triggered: t0, Tasks: []checkpoint.PendingTask{
			{Task: storyCount0}, {Task: storyCount1}, {Task: storySrc, Acknowledged: true, At: t0.Add(20 * time.Millisecond)}}},
		{ID: 7, Savepoint: true, Triggered: st.now.Add(-100 * time.Millisecond), Tasks: []checkpoint.PendingTask{
			{Task: storyCount0}, {Task: storyCount1}, {Task: storySrc}}},
	}
	st.stats = []runtime.SubtaskStats{
		{Task: storyCount0, Attempt: 1, Barrier: runtime.BarrierProgress{ID: 6, Since: t0.Add(30 * time.Millisecond), Barriers: 1, Channels: 1, Done: true}},
		{Task: storyCount1, Attempt: 1, Barrier: runtime.BarrierProgress{ID: 6, Since: t0.Add(500 * time.Millisecond), Barriers: 1, Channels: 2}},
		{Task: storySrc, Attempt: 1, Barrier: runtime.BarrierProgress{ID: 7, Since: st.now.Add(-90 * time.Millisecond)}},
	}
	feeds := Feeds{Operators: func() []Operator { return nil },
		Graph: Graph{Vertices: []Vertex{{ID: "source", Parallelism: 1, MaxParallelism: 128, Operators: []GraphOperator{{UID: "source", Name: "source", Kind: "source"}}},
			{ID: "count", Parallelism: 2, MaxParallelism: 128, Operators: []GraphOperator{{UID: "count", Name: "count", Kind: "process"}}}},
			Edges: []Edge{{From: "source", To: "count", Partition: "hash"}}},
		Config:   map[string]any{"mode": "exactly-once", "checkpointAlignment": "aligned"},
		Subtasks: func() []runtime.SubtaskStats { st.mu.Lock(); defer st.mu.Unlock(); return st.stats },
		Pending:  func() []checkpoint.PendingCheckpoint { st.mu.Lock(); defer st.mu.Unlock(); return st.pending }}
	st.s = New("demo", feeds, Control{}, func() time.Time { return st.now })
	st.s.Observe(runtime.JobEvent{Kind: runtime.EventRunning, Attempt: 1})
	st.s.Observe(runtime.JobEvent{Kind: runtime.EventCheckpointCompleted, Attempt: 1, ID: 5, Duration: 300 * time.Millisecond,
		Tasks: []runtime.TaskTrace{{Task: storySrc}, {Task: storyCount0}, {Task: storyCount1}}})
	return st
}

func (st *inflightStory) set(pending []checkpoint.PendingCheckpoint) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.pending = pending
}

// TestCheckpointsInProgress: the API lists the checkpoints in progress,
// newest first, before the history, with their age and acknowledgements,
// and tells of one each task's part: acknowledged, snapshotting,
// aligning (since when, barriers of channels) or waiting; a gauge counts
// them. Once one completes, it is a row of the history only.
func TestCheckpointsInProgress(t *testing.T) {
	st := newInflightStory(t)
	h := st.s.Handler()
	var list []Checkpoint
	if err := json.Unmarshal([]byte(get(t, h, "/api/v1/checkpoints")), &list); err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, c := range list {
		rows = append(rows, c.Status+" "+strconvU(c.ID))
	}
	if got, want := strings.Join(rows, ", "), "in_progress 7, in_progress 6, completed 5"; got != want {
		t.Fatalf("checkpoints: %s, want %s", got, want)
	}
	six := list[1]
	if six.Age != 2 || six.AckedTasks != 1 || six.TotalTasks != 3 || six.Savepoint || !six.At.Equal(st.now.Add(-2*time.Second)) ||
		six.Triggered == nil || !six.Triggered.Equal(six.At) || six.Attempt != 1 || six.Progress != nil {
		t.Fatalf("checkpoint 6 in the list: %+v", six)
	}
	if seven := list[0]; !seven.Savepoint || seven.AckedTasks != 0 || seven.TotalTasks != 3 || seven.Age != 0.1 {
		t.Fatalf("savepoint 7 in the list: %+v", seven)
	}

	body := get(t, h, "/api/v1/checkpoints/6")
	var c Checkpoint
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		t.Fatal(err)
	}
	byTask := map[string]TaskProgress{}
	for _, tp := range c.Progress {
		byTask[tp.Task] = tp
	}
	if c.Status != "in_progress" || len(c.Progress) != 3 {
		t.Fatalf("checkpoint 6: %s", body)
	}
	if src := byTask["source#0"]; src.State != "acknowledged" || src.Acked == nil || *src.Acked != 0.02 {
		t.Errorf("source#0 of 6: %+v, want acknowledged after 20 ms", src)
	}
	if c0 := byTask["count#0"]; c0.State != "snapshotting" || c0.Barriers != 1 || c0.Channels != 1 || c0.Acked != nil {
		t.Errorf("count#0 of 6: %+v, want snapshotting", c0)
	}
	c1 := byTask["count#1"]
	if c1.State != "aligning" || c1.Barriers != 1 || c1.Channels != 2 || c1.Align != 1.5 || c1.AlignSince == nil ||
		!c1.AlignSince.Equal(st.now.Add(-1500*time.Millisecond)) || c1.Alignment != "aligned" {
		t.Errorf("count#1 of 6: %+v, want aligning for 1.5 s, 1 of 2 barriers", c1)
	}
	// The JSON names the fields as documented.
	for _, want := range []string{`"status": "in_progress"`, `"ageSeconds": 2`, `"acknowledgedTasks": 1`, `"totalTasks": 3`,
		`"state": "aligning"`, `"barriersReceived": 1`, `"inputChannels": 2`, `"alignSeconds": 1.5`, `"ackedSeconds": 0.02`} {
		if !strings.Contains(body, want) {
			t.Errorf("checkpoint 6 has no %s: %s", want, body)
		}
	}
	var sp Checkpoint
	if err := json.Unmarshal([]byte(get(t, h, "/api/v1/checkpoints/7")), &sp); err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, tp := range sp.Progress {
		states[tp.Task] = tp.State
	}
	// The counters' newest barrier is of 6: they wait for 7's. The source
	// took 7's trigger and snapshots.
	if want := map[string]string{"source#0": "snapshotting", "count#0": "waiting", "count#1": "waiting"}; !maps.Equal(states, want) {
		t.Errorf("savepoint 7's tasks: %v, want %v", states, want)
	}
	if got := inProgressGauge(t, h); got != "2" {
		t.Errorf("weir_checkpoints_in_progress = %v, want 2", got)
	}

	// 6 completes: the driver tells the server before it publishes what
	// is in flight, so for a moment the feed still holds it.
	st.s.Observe(runtime.JobEvent{Kind: runtime.EventCheckpointCompleted, Attempt: 1, ID: 6, Duration: 2 * time.Second,
		Tasks: []runtime.TaskTrace{{Task: storySrc}, {Task: storyCount0}, {Task: storyCount1}}})
	rows = nil
	list = nil
	if err := json.Unmarshal([]byte(get(t, h, "/api/v1/checkpoints")), &list); err != nil {
		t.Fatal(err)
	}
	for _, c := range list {
		rows = append(rows, c.Status+" "+strconvU(c.ID))
	}
	if got, want := strings.Join(rows, ", "), "in_progress 7, completed 5, completed 6"; got != want {
		t.Fatalf("checkpoints after 6 completed: %s, want %s", got, want)
	}
	var done Checkpoint
	if err := json.Unmarshal([]byte(get(t, h, "/api/v1/checkpoints/6")), &done); err != nil || done.Status != "completed" || done.Progress != nil {
		t.Fatalf("checkpoint 6 after it completed: %+v (%v)", done, err)
	}
	st.set(st.pending[1:])
	if got := inProgressGauge(t, h); got != "1" {
		t.Errorf("weir_checkpoints_in_progress = %v after 6 completed, want 1", got)
	}
	st.set(nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/v1/checkpoints/7", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("savepoint 7, neither in progress nor in the history: %d, want 404", rec.Code)
	}
}

// TestProgressOfUnalignedAndSwitchedTasks: a task says how its snapshot
// goes while it waits for its barriers.
func TestProgressOfUnalignedAndSwitchedTasks(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	p := checkpoint.PendingCheckpoint{ID: 3, Triggered: now.Add(-time.Second)}
	for _, tc := range []struct {
		b                runtime.BarrierProgress
		state, alignment string
	}{
		{runtime.BarrierProgress{ID: 3, Since: now, Barriers: 1, Channels: 3, Unaligned: true}, "aligning", "unaligned"},
		{runtime.BarrierProgress{ID: 3, Since: now, Barriers: 2, Channels: 3, Unaligned: true, Switched: true}, "aligning", "switched"},
		{runtime.BarrierProgress{ID: 3, Since: now, Barriers: 3, Channels: 3, Unaligned: true, Done: true}, "snapshotting", "unaligned"},
		{runtime.BarrierProgress{ID: 4, Since: now, Barriers: 1, Channels: 3}, "snapshotting", ""},
		{runtime.BarrierProgress{ID: 2, Since: now, Barriers: 3, Channels: 3, Done: true}, "waiting", ""},
		{runtime.BarrierProgress{}, "waiting", ""},
	} {
		got := progress(p, checkpoint.PendingTask{Task: storyCount0}, tc.b, now)
		if got.State != tc.state || got.Alignment != tc.alignment {
			t.Errorf("%+v: %s, %q; want %s, %q", tc.b, got.State, got.Alignment, tc.state, tc.alignment)
		}
	}
}

// TestCheckpointsCommandShowsInProgress: weir checkpoints lists the
// checkpoints in progress first, with their acknowledgements and age.
func TestCheckpointsCommandShowsInProgress(t *testing.T) {
	srv := httptest.NewServer(newInflightStory(t).s.Handler())
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
		`(?m)^7 +savepoint +in_progress +10:00:01.900 +100ms +- +- +- +acks 0/3, age 100ms$`,
		`(?m)^6 +checkpoint +in_progress +10:00:00.000 +2000ms +- +- +- +acks 1/3, age 2s$`,
		`(?m)^5 +checkpoint +completed `,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("no line matching %s in:\n%s", want, out.String())
		}
	}
	if i, j := strings.Index(out.String(), "\n7 "), strings.Index(out.String(), "\n5 "); i < 0 || j < i {
		t.Errorf("the checkpoints in progress come first:\n%s", out.String())
	}
}

func strconvU(id uint64) string { return strconv.FormatUint(id, 10) }

// inProgressGauge reads weir_checkpoints_in_progress off /metrics.
func inProgressGauge(t *testing.T, h http.Handler) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^weir_checkpoints_in_progress\{job="demo"\} (\S+)$`).FindStringSubmatch(get(t, h, "/metrics"))
	if m == nil {
		t.Fatal("no weir_checkpoints_in_progress in /metrics")
	}
	return m[1]
}

// TestUIShowsCheckpointsInProgress loads the UI of inflightStory: the
// checkpoint table has rows in progress (newest first, above the history)
// with their acknowledgements, and the area below says where each task
// is; once checkpoint 6 completes, the page's poll moves it to the history.
func TestUIShowsCheckpointsInProgress(t *testing.T) {
	ctx := browsertest.Start(t, time.Minute)
	st := newInflightStory(t)
	srv := httptest.NewServer(st.s.Handler())
	defer srv.Close()
	wait, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(wait, chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(`#inflight .task[data-task="count#1"][data-state="aligning"]`)); err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("%v; the page says:\n%s", err, text)
	}
	read := func(js string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return v
	}
	if got := read(`[...document.querySelectorAll('#checkpoints tbody tr')].map(r => r.dataset.id + ' ' + r.dataset.status + (r.dataset.status === 'in_progress' ? ' ' + r.querySelector('td.acks').textContent + ' ' + r.querySelector('td.age').textContent : '')).join('; ')`); got != "7 in_progress 0/3 100 ms; 6 in_progress 1/3 2.00 s; 5 completed" {
		t.Errorf("the checkpoint table: %q", got)
	}
	if got := read(`[...document.querySelectorAll('#inflight .inflight-cp[data-id="6"] .task')].map(e => e.dataset.state + ': ' + e.textContent).join('; ')`); got != "aligning: count#1 aligning for 1.50 s, 1 of 2 barriers; snapshotting: count#0 snapshotting: writing its state; acknowledged: source#0 acknowledged after 20 ms" {
		t.Errorf("checkpoint 6's tasks: %q", got)
	}
	if got := read(`document.querySelector('#inflight .inflight-cp[data-id="7"] h3').textContent`); got != "Savepoint 7: in progress for 100 ms, 0 of 3 tasks acknowledged" {
		t.Errorf("savepoint 7's title: %q", got)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	st.s.Observe(runtime.JobEvent{Kind: runtime.EventCheckpointCompleted, Attempt: 1, ID: 6, Duration: 2 * time.Second,
		Tasks: []runtime.TaskTrace{{Task: storySrc}, {Task: storyCount0}, {Task: storyCount1}}})
	st.set(st.pending[1:])
	if err := chromedp.Do(ctx, chromedp.WaitVisible(`#checkpoints tbody tr[data-id="6"][data-status="completed"]`),
		chromedp.WaitNotPresent(`#inflight .inflight-cp[data-id="6"]`)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(browsertest.Artifacts(t), "ui-inflight.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSavepointCommandWaitsWhileInProgress: weir savepoint polls the
// checkpoints until its savepoint completed; a row that says it is in
// progress is no abort (it said "savepoint 7 was aborted" of it).
func TestSavepointCommandWaitsWhileInProgress(t *testing.T) {
	var s *Server
	var polls atomic.Int32
	pending := []checkpoint.PendingCheckpoint{{ID: 7, Savepoint: true, Triggered: time.Now(), Tasks: []checkpoint.PendingTask{{Task: storySrc}}}}
	feeds := Feeds{Operators: func() []Operator { return nil }, Pending: func() []checkpoint.PendingCheckpoint {
		// The third listing finds it completed.
		if polls.Add(1) == 3 {
			s.Observe(runtime.JobEvent{Kind: runtime.EventCheckpointCompleted, Attempt: 1, ID: 7, Savepoint: true, Tasks: []runtime.TaskTrace{{Task: storySrc}}})
		}
		return pending
	}}
	ctl := Control{Token: "tok", Savepoint: func(context.Context, bool) (uint64, error) { return 7, nil }, Location: func(id uint64) string { return "ckpt/demo/chk-" + strconvU(id) }}
	s = New("demo", feeds, ctl, nil)
	s.Observe(runtime.JobEvent{Kind: runtime.EventRunning, Attempt: 1})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	var out bytes.Buffer
	for _, cmd := range Commands() {
		if cmd.Name() != "savepoint" {
			continue
		}
		cmd.SetArgs([]string{"--web", srv.Listener.Addr().String(), "--token", "tok"})
		cmd.SetOut(&out)
		if err := cmd.Execute(); err != nil {
			t.Fatalf("%v (after %d listings)", err, polls.Load())
		}
	}
	if got := out.String(); got != "savepoint 7: ckpt/demo/chk-7\n" || polls.Load() < 3 {
		t.Fatalf("weir savepoint said %q after %d listings", got, polls.Load())
	}
}
