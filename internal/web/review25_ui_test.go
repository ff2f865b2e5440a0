package web

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/browsertest"
	"github.com/weirstream/weir/internal/runtime"
)

// review25Refreshed waits until the page has refreshed once more (its
// status line says the time of the last refresh, to the second; a refresh
// comes every 2 s): what a press, release or click set off has happened.
func review25Refreshed(t *testing.T, ctx context.Context) {
	t.Helper()
	before, err := chromedp.Run(ctx, chromedp.Text(`#updated`))
	if err == nil {
		err = chromedp.Do(ctx, chromedp.Poll[chromedp.Void](fmt.Sprintf(`document.getElementById('updated').textContent !== %q`, before), chromedp.WithPollingInterval(50*time.Millisecond)))
	}
	if err != nil {
		t.Fatalf("wait for a refresh: %v", err)
	}
}

// recordEvents starts recording the page's pointer events and clicks in
// window.seen, for a failure to show.
var recordEvents = chromedp.Evaluate[chromedp.Void](`window.seen = []; for (const k of ['pointerdown','pointerup','pointercancel','click']) document.addEventListener(k, (e) => window.seen.push(k + ':' + e.pointerType + ':' + e.target.tagName + ':' + (e.target.closest && e.target.closest('[data-id]')?.dataset.id)), true); undefined`)

// TestReview25ATapAcrossARefreshPicks is TestAClickAcrossARefreshPicks
// with a finger: a touch on the vertex, held across a refresh, released.
func TestReview25ATapAcrossARefreshPicks(t *testing.T) {
	ctx := browsertest.Start(t, time.Minute)
	srv := httptest.NewServer(alignmentStory(t).Handler())
	defer srv.Close()
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(`#graph .vertex[data-id="count"]`)); err != nil {
		t.Fatal(err)
	}
	sel := `#graph .vertex[data-id="count"]`
	x, y := centreOf(t, ctx, sel)
	touch := func(typ input.DispatchTouchEventType, points []*input.TouchPoint) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, input.DispatchTouchEvent, input.DispatchTouchEventParams{Type: typ, TouchPoints: points})
			return err
		})
	}
	one := 1.0
	zero := 0.0
	if err := chromedp.Do(ctx,
		recordEvents,
		touch(input.DispatchTouchEventTypeTouchStart, []*input.TouchPoint{{X: x, Y: y, RadiusX: &one, RadiusY: &one, Force: &one, ID: &zero}}),
		replaced(sel),
		touch(input.DispatchTouchEventTypeTouchEnd, []*input.TouchPoint{})); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := chromedp.Do(c, chromedp.WaitVisible(`#graph .vertex.selected[data-id="count"]`)); err != nil {
		seen, _ := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.seen`))
		t.Fatalf("a tap across a refresh did not pick the vertex: %v; events: %v", err, seen)
	}
}

// TestReview25ADragInFromOutsidePicksNothing: a press on a vertex released
// outside the graph leaves onPick's pressed id behind; a later press
// outside the graph, dragged onto that vertex and released there, then
// picks it. No click would have (the old onclick did not): a drag that
// began elsewhere is no click on the vertex.
func TestReview25ADragInFromOutsidePicksNothing(t *testing.T) {
	ctx := browsertest.Start(t, time.Minute)
	srv := httptest.NewServer(alignmentStory(t).Handler())
	defer srv.Close()
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(`#graph .vertex[data-id="count"]`)); err != nil {
		t.Fatal(err)
	}
	x, y := centreOf(t, ctx, `#graph .vertex[data-id="count"]`)
	// a point outside #graph: the page's heading.
	out, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`(() => { const r = document.querySelector('h2').getBoundingClientRect(); return [r.x + 5, r.y + r.height / 2]; })()`))
	if err != nil {
		t.Fatal(err)
	}
	if inGraph, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`document.getElementById('graph').contains(document.elementFromPoint(%v, %v))`, out[0], out[1]))); inGraph {
		t.Fatal("the outside point is in the graph")
	}
	left := []chromedp.MouseOption{chromedp.ButtonLeft, chromedp.ClickCount(1)}
	if err := chromedp.Do(ctx, recordEvents); err != nil {
		t.Fatal(err)
	}
	move := func(x, y float64) chromedp.Action[chromedp.Void] {
		return chromedp.MouseEvent(chromedp.MouseMoved, x, y, chromedp.ButtonLeft)
	}
	if err := chromedp.Do(ctx,
		// press the vertex, drag off the graph, release: no pick
		chromedp.MouseEvent(chromedp.MousePressed, x, y, left...), move(out[0], out[1]), chromedp.MouseEvent(chromedp.MouseReleased, out[0], out[1], left...),
		// (no text left selected, which a press would drag instead)
		chromedp.Evaluate[chromedp.Void](`getSelection().removeAllRanges()`),
		// press outside, drag onto the vertex, release
		chromedp.MouseEvent(chromedp.MousePressed, out[0], out[1], left...), move(x, y), chromedp.MouseEvent(chromedp.MouseReleased, x, y, left...)); err != nil {
		t.Fatal(err)
	}
	review25Refreshed(t, ctx)
	seen, _ := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.seen`))
	t.Logf("events: %v", seen)
	if picked, _ := chromedp.Run(ctx, chromedp.Evaluate[bool](`!!document.querySelector('#graph .vertex.selected')`)); picked {
		seen, _ := chromedp.Run(ctx, chromedp.Evaluate[[]string](`window.seen`))
		t.Logf("events: %v", seen)
		t.Fatal("a drag from outside the graph onto a vertex picked it (the press of an earlier drag, released outside, was still remembered)")
	}
}

// TestReview25AClickAcrossARefreshOfALiveTable: in a running job the
// checkpoint table changes between refreshes (a checkpoint completes, one
// starts: the newest row is on top), so the pressed row moves from under
// the pointer. A click whose press and release straddle such a refresh is
// was still lost by the first version of onPick.
func TestReview25AClickAcrossARefreshOfALiveTable(t *testing.T) {
	ctx := browsertest.Start(t, time.Minute)
	s := alignmentStory(t)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(`#checkpoints tbody tr[data-id="2"]`)); err != nil {
		t.Fatal(err)
	}
	sel := `#checkpoints tbody tr[data-id="2"]`
	x, y := centreOf(t, ctx, sel)
	press := []chromedp.MouseOption{chromedp.ButtonLeft, chromedp.ClickCount(1)}
	if err := chromedp.Do(ctx, chromedp.MouseEvent(chromedp.MousePressed, x, y, press...)); err != nil {
		t.Fatal(err)
	}
	// a checkpoint completes while the button is down, as in any job
	// that checkpoints more often than every 2 s
	s.Observe(runtime.JobEvent{Kind: runtime.EventCheckpointCompleted, Attempt: 1, ID: checkpoint.ID(5), Duration: 300 * time.Millisecond, Size: 500,
		Tasks: []runtime.TaskTrace{{Task: checkpoint.TaskID{Vertex: "source"}, Acked: 300 * time.Millisecond, Bytes: 500}}})
	if err := chromedp.Do(ctx, chromedp.WaitVisible(`#checkpoints tbody tr[data-id="5"]`), replaced(sel),
		chromedp.MouseEvent(chromedp.MouseReleased, x, y, press...)); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := chromedp.Do(c, chromedp.WaitVisible(`#checkpoints tbody tr.selected[data-id="2"]`)); err != nil {
		sel, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#checkpoints tbody tr.selected')?.dataset.id ?? 'none'`))
		t.Fatalf("the checkpoint pressed (2) is not picked after a refresh that added a row; selected: %s (%v)", sel, err)
	}
}

// TestReview25OneClickOneTimelineFetch: one mouse click on a completed
// checkpoint fetches its timeline once (pointerup and click must not both
// pick), and a click whose event is a plain MouseEvent, as browsers send
// where click is no PointerEvent (Safari before 17?, Firefox before ~126),
// must not pick twice either.
func TestReview25OneClickOneTimelineFetch(t *testing.T) {
	ctx := browsertest.Start(t, time.Minute)
	var fetches atomic.Int64
	h := alignmentStory(t).Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/checkpoints/2") {
			fetches.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(`#checkpoints tbody tr[data-id="2"]`)); err != nil {
		t.Fatal(err)
	}
	fetches.Store(0)
	if err := chromedp.Do(ctx, chromedp.Click(`#checkpoints tbody tr[data-id="2"]`), chromedp.WaitVisible(`#checkpoints tbody tr.selected[data-id="2"]`)); err != nil {
		t.Fatal(err)
	}
	review25Refreshed(t, ctx)
	if n := fetches.Load(); n != 1 {
		t.Errorf("a Chrome mouse click fetched checkpoint 2's timeline %d times", n)
	}
	// Emulate a browser whose click is a MouseEvent (no pointerType): the
	// page sees pointerdown, pointerup and a click without pointerType.
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`document.addEventListener('click', (e) => {
		if (e.pointerType && e.isTrusted) { e.stopImmediatePropagation(); e.target.dispatchEvent(new MouseEvent('click', {bubbles: true, button: 0})); }
	}, true); undefined`)); err != nil {
		t.Fatal(err)
	}
	fetches.Store(0)
	if err := chromedp.Do(ctx, chromedp.Click(`#checkpoints tbody tr[data-id="1"]`), chromedp.Click(`#checkpoints tbody tr[data-id="2"]`),
		chromedp.WaitVisible(`#checkpoints tbody tr.selected[data-id="2"]`)); err != nil {
		t.Fatal(err)
	}
	review25Refreshed(t, ctx)
	if n := fetches.Load(); n != 1 {
		t.Errorf("with click as a MouseEvent, one click fetched checkpoint 2's timeline %d times (pointerup and click both picked)", n)
	}
}
