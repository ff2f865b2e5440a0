package web

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/browsertest"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/operator"
)

// TestUIWithAThousandSubtasks loads the UI of a job of 4 vertices at
// parallelism 250, all-to-all: a checkpoint's timeline has 1,000 rows,
// each of a task with 250 input channels. It logs how long the page took
// to show it, to redraw the timeline, and to show a vertex's subtasks.
func TestUIWithAThousandSubtasks(t *testing.T) {
	ctx := browsertest.Start(t, 3*time.Minute)
	const vertices, parallelism = 4, 250
	var g Graph
	var readings []runtime.SubtaskStats
	var tasks []runtime.TaskTrace
	for v := range vertices {
		id := fmt.Sprintf("op%d", v)
		g.Vertices = append(g.Vertices, Vertex{ID: id, Parallelism: parallelism, MaxParallelism: 1024, Operators: []GraphOperator{{UID: id, Name: id, Kind: "map"}}})
		if v > 0 {
			g.Edges = append(g.Edges, Edge{From: fmt.Sprintf("op%d", v-1), To: id, Partition: "hash"})
		}
		for s := range parallelism {
			task := checkpoint.TaskID{Vertex: id, Subtask: s}
			readings = append(readings, runtime.SubtaskStats{Task: task, Attempt: 1, Uptime: time.Minute, In: 1000, Out: 1000,
				Idle: time.Duration(s%60) * time.Second, BackPressured: time.Duration(v*s%20) * time.Second, Watermark: operator.MinTime})
			tr := runtime.TaskTrace{Task: task, Acked: time.Duration(200+s) * time.Millisecond, Align: time.Duration(s%50) * time.Millisecond,
				Sync: time.Millisecond, Async: 5 * time.Millisecond, Bytes: 1 << 20}
			if v > 0 {
				for c := range parallelism {
					tr.Arrivals = append(tr.Arrivals, time.Duration((c*7+s)%50)*time.Millisecond)
				}
			}
			tasks = append(tasks, tr)
		}
	}
	s := New("big", Feeds{Operators: func() []Operator { return nil }, Subtasks: func() []runtime.SubtaskStats { return readings }, Graph: g}, Control{}, nil)
	s.Observe(runtime.JobEvent{Kind: runtime.EventRunning, Attempt: 1})
	for id := range 100 {
		s.Observe(runtime.JobEvent{Kind: runtime.EventCheckpointCompleted, Attempt: 1, ID: checkpoint.ID(id + 1), Duration: 450 * time.Millisecond, Size: 1 << 30, Tasks: tasks})
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()

	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil { // the browser starts
		t.Fatal(err)
	}
	start := time.Now()
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(`#timeline .tl-row[data-task="op0#0"]`), chromedp.WaitVisible(`#graph .vertex[data-id="op3"]`)); err != nil {
		t.Fatal(err)
	}
	loaded := time.Since(start)
	timings, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`performance.getEntriesByType('resource').filter(e => e.name.includes('/api/v1/checkpoints/')).map(e => Math.round(e.duration) + ' ms, ' + e.transferSize + ' bytes')`))
	if err != nil {
		t.Fatal(err)
	}
	// The timeline draws the rows in view: scrolled to the end, the last
	// subtask's row is drawn. A redraw of the whole timeline (choosing
	// "all vertices" again) is timed in the page, with its layout.
	if err := chromedp.Do(ctx,
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#timeline .tl-scroll').scrollTop = 1e9`),
		chromedp.WaitVisible(`#timeline .tl-row[data-task="op3#249"]`)); err != nil {
		t.Fatal(err)
	}
	redraw, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`(() => {
		const t0 = performance.now();
		document.getElementById('timeline-vertex').dispatchEvent(new Event('change'));
		document.body.getBoundingClientRect();
		return performance.now() - t0;
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	// A click on a vertex, timed in the page: its subtasks' table drawn.
	refresh, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`(async () => {
		const t0 = performance.now();
		document.getElementById('graph').querySelector('.vertex[data-id="op1"]').dispatchEvent(new MouseEvent('click', {bubbles: true}));
		return performance.now() - t0;
	})()`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	subtaskRows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#subtasks tbody tr').length`))
	if err != nil || subtaskRows != parallelism {
		t.Fatalf("%d rows in the clicked vertex's subtask table (%v), want %d", subtaskRows, err, parallelism)
	}
	t.Logf("1,000 subtasks: the page showed the graph, 100 checkpoints and the timeline %v after loading (the checkpoint's JSON: %v); "+
		"the timeline redrew in %.0f ms; a click drew a vertex's 250 subtasks in %.0f ms", loaded.Round(time.Millisecond), timings, redraw, refresh)
}
