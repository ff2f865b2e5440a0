package weir_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/stdio"
	"github.com/weirstream/weir/internal/web"
)

// holdable is a gate that the held job's slow operator waits at, per
// record, while it is held: the subtask that holds the records stops
// reading its input, and the barriers queued there with it.
type holdable struct{ gate atomic.Pointer[chan struct{}] }

func (h *holdable) wait() {
	if g := h.gate.Load(); g != nil {
		<-*g
	}
}

func (h *holdable) hold() {
	g := make(chan struct{})
	h.gate.Store(&g)
}

// release lets the operator go on; releasing twice is harmless.
func (h *holdable) release() {
	if g := h.gate.Swap(nil); g != nil {
		close(*g)
	}
}

// buildHeld builds the held job: two sources of a few records a second,
// all keyed to one subtask of "slow", which waits at h, then "count"
// keyed over both of its subtasks. NB: the sources are slow so that,
// once slow stops reading, they take a trigger and acknowledge before
// its input channels fill and they are back-pressured.
func buildHeld(t *testing.T, env *weir.Environment, h *holdable) {
	t.Helper()
	src, err := newRateLimited(20, 0)
	if err != nil {
		t.Fatal(err)
	}
	slow := weir.Reduce(weir.KeyBy(weir.Source(env, "numbers", src), func(int64) int64 { return 0 }), "slow", func(a, b int64) int64 {
		h.wait()
		return a + b
	})
	counts := weir.Reduce(weir.KeyBy(slow, func(i int64) int64 { return i % 7 }), "count", func(a, b int64) int64 { return a + b })
	weir.Sink(counts, "discard", stdio.Print(io.Discard, func(dst []byte, i int64) []byte { return dst }))
}

// heldCheckpoint holds the held job served at base until a checkpoint is
// in progress with the tasks as they must be: the sources and one
// subtask of slow acknowledged, the other, which waits at h, not, and
// the counters aligning with one barrier of their two channels (from the
// acknowledged slow subtask). It returns that checkpoint as the API tells
// it.
func heldCheckpoint(t *testing.T, base string, h *holdable) web.Checkpoint {
	return heldCheckpointAligning(t, base, h, "aligned")
}

// heldCheckpointAligning is heldCheckpoint with the counters' snapshots
// going as alignment says: aligned, unaligned or switched.
func heldCheckpointAligning(t *testing.T, base string, h *holdable, alignment string) web.Checkpoint {
	t.Helper()
	h.hold()
	var last string // what the API said last, to tell why
	deadline := time.Now().Add(30 * time.Second)
	for {
		var list []web.Checkpoint
		getJSON(t, base+"/api/v1/checkpoints", &list)
		for _, c := range list {
			if c.Status != "in_progress" {
				break
			}
			var one web.Checkpoint
			getJSON(t, fmt.Sprint(base, "/api/v1/checkpoints/", c.ID), &one)
			if one.Status != "in_progress" {
				continue // it completed since
			}
			why := heldAsExpected(one, alignment)
			if why == "" {
				return one
			}
			last = fmt.Sprintf("checkpoint %d: %s: %+v", one.ID, why, one.Progress)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint in progress held by one subtask of slow within 30 s; the last seen: %s", last)
		}
		time.Sleep(20 * time.Millisecond) // polls the API for a condition
	}
}

// heldAsExpected says what in c is not as heldCheckpoint wants it; "" if
// all is.
func heldAsExpected(c web.Checkpoint, alignment string) string {
	acked, slowAcked, slowNot, aligning := 0, 0, 0, 0
	for _, p := range c.Progress {
		switch vertex, _, _ := strings.Cut(p.Task, "#"); {
		case vertex == "numbers" && p.State != "acknowledged":
			return p.Task + " has not acknowledged"
		case vertex == "slow" && p.State == "acknowledged":
			slowAcked++
		case vertex == "slow" && (p.State == "waiting" || p.State == "aligning"):
			slowNot++
		case vertex == "slow":
			return p.Task + " is " + p.State
		case vertex == "count" && p.State == "aligning" && p.Barriers == 1 && p.Channels == 2 && p.AlignSince != nil && p.Alignment == alignment:
			aligning++
		case vertex == "count":
			return fmt.Sprintf("%s is %s (%s) with %d of %d barriers", p.Task, p.State, p.Alignment, p.Barriers, p.Channels)
		}
		if p.State == "acknowledged" {
			acked++
		}
	}
	switch {
	case slowAcked != 1 || slowNot != 1:
		return fmt.Sprintf("%d subtasks of slow acknowledged, %d not", slowAcked, slowNot)
	case aligning != 2:
		return fmt.Sprintf("%d counters aligning", aligning)
	case c.AckedTasks != acked || c.TotalTasks != len(c.Progress) || c.Age <= 0:
		return fmt.Sprintf("%d of %d acknowledged, %v s old", c.AckedTasks, c.TotalTasks, c.Age)
	}
	return ""
}

// releaseHeld releases h and waits until held completes: the API lists it
// completed, and in progress no more.
func releaseHeld(t *testing.T, base string, h *holdable, held web.Checkpoint) {
	t.Helper()
	h.release()
	waitFor(t, fmt.Sprintf("completion of checkpoint %d once released", held.ID), 30*time.Second, func() bool {
		var list []web.Checkpoint
		getJSON(t, base+"/api/v1/checkpoints", &list)
		completed, inProgress := false, false
		for _, c := range list {
			if c.ID == held.ID {
				completed = completed || c.Status == "completed"
				inProgress = inProgress || c.Status == "in_progress"
			}
		}
		return completed && !inProgress
	})
}

var inProgressGauge = regexp.MustCompile(`(?m)^weir_checkpoints_in_progress\{job="held"\} 1$`)

// TestWebShowsACheckpointInProgress: while one subtask holds a checkpoint,
// the API lists it in progress with the tasks that acknowledged and those
// that did not (the one holding it, not acknowledged; the counters
// downstream aligning, one barrier of two), and the gauge counts it; once
// released, it completes.
func TestWebShowsACheckpointInProgress(t *testing.T) {
	h, base := startHeld(t, weir.CheckpointConfig{Interval: 50 * time.Millisecond})
	held := heldCheckpoint(t, base, h)
	metrics := getText(t, base+"/metrics")
	if !inProgressGauge.MatchString(metrics) {
		t.Errorf("checkpoint %d is held, but the metrics say:\n%s", held.ID, grepLines(metrics, "weir_checkpoints_in_progress"))
	}
	t.Logf("checkpoint %d held: %+v", held.ID, held.Progress)
	releaseHeld(t, base, h, held)
}

// TestWebShowsUnalignedTasksInProgress: with unaligned checkpoints, and
// with aligned ones the aligned-checkpoint timeout switches, the counters
// held waiting for the held subtask's barrier say so.
func TestWebShowsUnalignedTasksInProgress(t *testing.T) {
	for _, tc := range []struct {
		alignment string
		config    weir.CheckpointConfig
	}{
		{"unaligned", weir.CheckpointConfig{Interval: 50 * time.Millisecond, Alignment: weir.Unaligned}},
		{"switched", weir.CheckpointConfig{Interval: 50 * time.Millisecond, AlignedTimeout: 20 * time.Millisecond}},
	} {
		t.Run(tc.alignment, func(t *testing.T) {
			h, base := startHeld(t, tc.config)
			held := heldCheckpointAligning(t, base, h, tc.alignment)
			t.Logf("checkpoint %d held: %+v", held.ID, held.Progress)
			releaseHeld(t, base, h, held)
		})
	}
}

// TestClusterWebShowsACheckpointInProgress: on a cluster the tasks run on
// the workers, and the coordinator's API tells where each is in the held
// checkpoint: their progress through it comes with the workers'
// heartbeats.
func TestClusterWebShowsACheckpointInProgress(t *testing.T) {
	h := &holdable{}
	addr, _ := webCluster{job: "held", checkpoints: 50 * time.Millisecond, heartbeat: 100 * time.Millisecond, timeout: 3 * time.Second,
		build: func(env *weir.Environment) error { buildHeld(t, env, h); return nil }}.start(t)
	t.Cleanup(h.release) // before the cluster's processes are cancelled
	base := "http://" + addr
	held := heldCheckpoint(t, base, h)
	t.Logf("checkpoint %d held: %+v", held.ID, held.Progress)
	releaseHeld(t, base, h, held)
}

// getText is what GET url answers.
func getText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// grepLines are the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// startHeld runs the held job (buildHeld) with checkpoints cc and a web
// server until the test ends, and returns its hold and the server's base
// URL.
func startHeld(t *testing.T, cc weir.CheckpointConfig) (*holdable, string) {
	t.Helper()
	h := &holdable{}
	addrs := make(chan string, 1)
	env := weir.New(weir.Config{Job: "held", Parallelism: 2, Checkpoint: cc, Web: "127.0.0.1:0", OnWeb: func(addr string) { addrs <- addr }})
	buildHeld(t, env, h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := env.Execute(ctx)
		done <- err
	}()
	t.Cleanup(func() {
		h.release()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("the held job ended with %v, want cancelled", err)
		}
	})
	select {
	case addr := <-addrs:
		return h, "http://" + addr
	case err := <-done:
		done <- err
		t.Fatalf("the job ended (%v) before it served", err)
		return nil, ""
	}
}
