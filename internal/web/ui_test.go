package web

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
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

// TestUIShowsHowCheckpointsAligned loads the UI of alignmentStory: the
// overview says the configured alignment, the checkpoint table each
// checkpoint's, and the timeline of the newest completed one (3) marks
// and labels the subtask that switched to unaligned, with its channel
// state; checkpoint 2's timeline, picked in the table, its unaligned ones.
func TestUIShowsHowCheckpointsAligned(t *testing.T) {
	ctx := browsertest.Start(t, time.Minute)
	srv := httptest.NewServer(alignmentStory(t).Handler())
	defer srv.Close()
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(`#timeline .tl-row[data-task="count#0"][data-alignment="switched"] .tl-switch`)); err != nil {
		t.Fatal(err)
	}
	read := func(js string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return v
	}
	if got := read(`document.querySelector('[data-card="Alignment"] .value').textContent`); got != "aligned, unaligned after 250 ms" {
		t.Errorf("the overview's alignment: %q", got)
	}
	if got := read(`[...document.querySelectorAll('#checkpoints tbody tr')].map(r => r.dataset.id + ': ' + r.querySelector('td.alignment').textContent + ', ' + r.querySelector('td.alignment').nextSibling.textContent).join('; ')`); got != "4: , ; 3: switched 1/4, 4.0 KiB; 2: unaligned 3/4, 2.9 KiB; 1: aligned, 0 B" {
		t.Errorf("the checkpoint table's alignment and channel state: %q", got)
	}
	if got := read(`[...document.querySelectorAll('#timeline .tl-row')].map(r => r.dataset.task + ' ' + r.dataset.alignment + ' ' + r.dataset.channelState + ' ' + (r.querySelector('.tl-how')?.textContent ?? '-')).join('; ')`); got != "source#0 aligned 0 -; count#0 switched 4096 switched after 250 ms · 4.0 KiB; count#1 aligned 0 -; count#2 aligned 0 -" {
		t.Errorf("checkpoint 3's timeline: %q", got)
	}
	if got := read(`document.getElementById('timeline-title').textContent`); got != "— checkpoint 3, 300 ms, 4 subtasks, switched 1/4, 4.0 KiB of channel state; held by source#0 for 297 ms" {
		t.Errorf("checkpoint 3's timeline title: %q", got)
	}
	switchedPNG, err := chromedp.Run(ctx, chromedp.Screenshot(`#timeline-section`, chromedp.NodeVisible))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(`#checkpoints tbody tr[data-id="2"]`),
		chromedp.WaitVisible(`#timeline .tl-row[data-task="count#1"][data-alignment="unaligned"] .tl-how`)); err != nil {
		t.Fatal(err)
	}
	if got := read(`[...document.querySelectorAll('#timeline .tl-row')].map(r => r.dataset.task + ' ' + (r.querySelector('.tl-how')?.textContent ?? '-')).join('; ')`); got != "source#0 -; count#0 unaligned · 1000 B; count#1 unaligned · 2.0 KiB; count#2 unaligned · 0 B" {
		t.Errorf("checkpoint 2's timeline: %q", got)
	}
	unalignedPNG, err := chromedp.Run(ctx, chromedp.Screenshot(`#timeline-section`, chromedp.NodeVisible))
	if err != nil {
		t.Fatal(err)
	}
	dir := browsertest.Artifacts(t)
	for name, b := range map[string][]byte{"ui-timeline-switched.png": switchedPNG, "ui-timeline-unaligned.png": unalignedPNG} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", dir)
}

// TestAClickAcrossARefreshPicks: the page draws its graph and its
// checkpoint table anew at every refresh (every 2 s). A click whose press
// comes before a refresh and whose release after it (a slow click, or a
// busy page) still picks the vertex or the checkpoint pressed; before,
// the browser sent it to the container and it was lost.
func TestAClickAcrossARefreshPicks(t *testing.T) {
	ctx := browsertest.Start(t, time.Minute)
	srv := httptest.NewServer(alignmentStory(t).Handler())
	defer srv.Close()
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(`#graph .vertex[data-id="count"]`),
		chromedp.WaitVisible(`#checkpoints tbody tr[data-id="2"]`)); err != nil {
		t.Fatal(err)
	}
	// slowClick scrolls to what selector names, presses its middle, waits
	// until a refresh has replaced it, and releases.
	slowClick := func(selector string) {
		t.Helper()
		x, y := centreOf(t, ctx, selector)
		press := []chromedp.MouseOption{chromedp.ButtonLeft, chromedp.ClickCount(1)}
		if err := chromedp.Do(ctx,
			chromedp.MouseEvent(chromedp.MousePressed, x, y, press...),
			replaced(selector),
			chromedp.MouseEvent(chromedp.MouseReleased, x, y, press...)); err != nil {
			t.Fatalf("a click on %s across a refresh: %v", selector, err)
		}
	}
	slowClick(`#graph .vertex[data-id="count"]`)
	if err := chromedp.Do(ctx, chromedp.WaitVisible(`#graph .vertex.selected[data-id="count"]`), chromedp.WaitVisible(`#vertex table#subtasks`)); err != nil {
		t.Fatalf("the vertex clicked across a refresh is not selected: %v", err)
	}
	slowClick(`#checkpoints tbody tr[data-id="2"]`)
	if err := chromedp.Do(ctx, chromedp.WaitVisible(`#checkpoints tbody tr.selected[data-id="2"]`),
		chromedp.WaitVisible(`#timeline .tl-row[data-task="count#1"][data-alignment="unaligned"]`)); err != nil {
		t.Fatalf("the checkpoint clicked across a refresh is not picked: %v", err)
	}
}

// centreOf scrolls selector's element into view, remembers it (for
// replaced), and returns its centre in the viewport.
func centreOf(t *testing.T, ctx context.Context, selector string) (x, y float64) {
	t.Helper()
	at, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](fmt.Sprintf(`(() => {
		const e = document.querySelector(%q);
		e.scrollIntoView({block: 'center'});
		window.pressed = e;
		const r = e.getBoundingClientRect();
		return [r.x + r.width / 2, r.y + r.height / 2];
	})()`, selector)))
	if err != nil {
		t.Fatalf("find %s: %v", selector, err)
	}
	return at[0], at[1]
}

// replaced waits until a refresh has replaced the element of selector
// that centreOf found.
func replaced(selector string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](fmt.Sprintf(`document.querySelector(%q) !== window.pressed`, selector), chromedp.WithPollingInterval(20*time.Millisecond))
}
