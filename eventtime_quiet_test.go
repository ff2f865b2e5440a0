package weir_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/operator"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// tev is a keyed record with an event time (ms).
type tev struct {
	Key string
	At  int64
}

func tevAt(e tev) time.Time { return time.UnixMilli(e.At) }

// quietReader emits its batches, one a Read (each flushed on its own: the
// reader idles briefly after each), then stays quiet, neither emitting nor
// ending, until done is set or its deadline passes; it records which.
type quietReader struct {
	operator.Base
	batches  [][]tev
	step     int
	done     *atomic.Bool
	deadline time.Time
	timedOut *atomic.Bool
}

func (r *quietReader) Read(out weir.Collector[tev]) (operator.PollResult, error) {
	if r.step < len(r.batches) {
		for _, e := range r.batches[r.step] {
			out.Collect(e)
		}
		r.step++
		return operator.PollResult{IdleUntil: time.Now().Add(2 * time.Millisecond)}, nil
	}
	if r.done.Load() {
		return operator.PollResult{Exhausted: true}, nil
	}
	if time.Now().After(r.deadline) {
		r.timedOut.Store(true)
		return operator.PollResult{Exhausted: true}, nil
	}
	return operator.PollResult{IdleUntil: time.Now().Add(5 * time.Millisecond)}, nil
}

// quietRig runs sources that go quiet after their batches, and a sink of
// tumbling-window counts that ends the sources once it has seen the window
// [0,10): it tells whether that window fired while the input was still
// running, or only when the sources gave up waiting and ended the input.
type quietRig struct {
	done, timedOut atomic.Bool
	deadline       time.Time
	mu             sync.Mutex
	results        []weir.WindowResult[string, int64]
}

// newQuietRig's sources wait 30 s at most: a correct run ends once the
// window fires, within a watermark interval or two.
func newQuietRig() *quietRig { return &quietRig{deadline: time.Now().Add(30 * time.Second)} }

func (q *quietRig) reader(batches ...[]tev) func() weir.SourceReader[tev] {
	return func() weir.SourceReader[tev] {
		return &quietReader{batches: batches, done: &q.done, deadline: q.deadline, timedOut: &q.timedOut}
	}
}

// sink counts s in tumbling windows of 10 ms by key, into q.results.
func (q *quietRig) sink(s *weir.Stream[tev]) {
	counts := weir.WindowAggregate(weir.Window(weir.KeyBy(s, func(e tev) string { return e.Key }), weir.Tumbling(10*time.Millisecond)),
		"count", weir.Count[tev]())
	weir.Sink(counts, "results", weir.SinkFunc(func(r weir.WindowResult[string, int64]) error {
		q.mu.Lock()
		q.results = append(q.results, r)
		q.mu.Unlock()
		if r.Window.End.UnixMilli() == 10 {
			q.done.Store(true)
		}
		return nil
	}))
}

// sinkBeside sinks the union of quiet and a source whose watermark moves
// on to 29.
func (q *quietRig) sinkBeside(e *weir.Environment, quiet *weir.Stream[tev]) {
	moving := weir.Source(e, "moving", q.reader([]tev{{"k", 30}}), weir.Watermarks(weir.Monotonous(tevAt)))
	q.sink(weir.Union(quiet, "both", []*weir.Stream[tev]{moving}))
}

func (q *quietRig) check(t *testing.T, e *weir.Environment, why string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
	defer cancel()
	if _, err := e.Execute(ctx); err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var fired []string
	for _, r := range q.results {
		fired = append(fired, r.Window.Start.UTC().Format("05.000")+"-"+r.Window.End.UTC().Format("05.000"))
	}
	if q.timedOut.Load() {
		t.Errorf("window [0,10) did not fire while the input ran (until %s); it fired only at the end of the input (results %v): %s", q.deadline.Format("15:04:05.000"), fired, why)
	}
}

// TestAssignWatermarksOnAQuietInput: AssignWatermarks throttles its
// watermarks to one per WatermarkInterval; one it held back is sent at the
// next interval while its input is quiet, as Flink's periodic watermark
// emitter does, and the window fires. It was computed again only when a
// batch came (found by an outside review, session 32).
func TestAssignWatermarksOnAQuietInput(t *testing.T) {
	q := newQuietRig()
	e := env(weir.Config{WatermarkInterval: 500 * time.Millisecond, Logger: quietLog})
	src := weir.Source(e, "plain", q.reader([]tev{{"k", 5}}, []tev{{"k", 25}}))
	timed := weir.AssignWatermarks(src, "stamp", weir.Monotonous(tevAt))
	q.sink(timed)
	q.check(t, e, "the watermark 24 that the second batch (record at 25) makes was held back by the interval and never sent")
}

// TestAssignWatermarksGoesIdle: an AssignWatermarks with WithIdleness goes
// idle when its input stops, as Flink's WatermarksWithIdleness does from
// the periodic emitter, and a union with a stream whose watermark moves on
// follows that stream. It looked at its idleness only when a batch came,
// and held the union back until the input ended.
func TestAssignWatermarksGoesIdle(t *testing.T) {
	q := newQuietRig()
	e := env(weir.Config{WatermarkInterval: 5 * time.Millisecond, Logger: quietLog})
	quiet := weir.AssignWatermarks(weir.Source(e, "quiet", q.reader([]tev{{"k", 0}})), "stamp",
		weir.Monotonous(tevAt).WithIdleness(20*time.Millisecond))
	q.sinkBeside(e, quiet)
	q.check(t, e, "the quiet input (idle after 20 ms) still holds the union's watermark at -1; the other input's is 29")
}

// TestSourceGoesIdle is the same job with the idleness on a source instead
// of AssignWatermarks.
func TestSourceGoesIdle(t *testing.T) {
	q := newQuietRig()
	e := env(weir.Config{WatermarkInterval: 5 * time.Millisecond, Logger: quietLog})
	quiet := weir.Source(e, "quiet", q.reader([]tev{{"k", 0}}), weir.Watermarks(weir.Monotonous(tevAt).WithIdleness(20*time.Millisecond)))
	q.sinkBeside(e, quiet)
	q.check(t, e, "the quiet source (idle after 20 ms) still holds the union's watermark at -1; the other input's is 29")
}

// scheduledReader emits each batch once its offset from the first Read
// has passed, and ends at its end offset.
type scheduledReader struct {
	operator.Base
	start   time.Time
	at      []time.Duration
	batches [][]tev
	end     time.Duration
}

func (r *scheduledReader) Read(out weir.Collector[tev]) (operator.PollResult, error) {
	if r.start.IsZero() {
		r.start = time.Now()
	}
	since := time.Since(r.start)
	for len(r.at) > 0 && since >= r.at[0] {
		for _, e := range r.batches[0] {
			out.Collect(e)
		}
		r.at, r.batches = r.at[1:], r.batches[1:]
		return operator.PollResult{IdleUntil: time.Now().Add(time.Millisecond)}, nil
	}
	if since >= r.end {
		return operator.PollResult{Exhausted: true}, nil
	}
	return operator.PollResult{IdleUntil: time.Now().Add(3 * time.Millisecond)}, nil
}

// TestSessionGapInWholeMilliseconds: Session(500µs) and Session(1500µs)
// are refused, saying that the gap must be whole milliseconds, as
// Tumbling and Sliding say of sizes (the first was refused as not above
// 0, the second taken as 1 ms).
func TestSessionGapInWholeMilliseconds(t *testing.T) {
	for _, gap := range []time.Duration{500 * time.Microsecond, 1500 * time.Microsecond} {
		e := env(weir.Config{Logger: quietLog})
		src := weir.Source(e, "s", func() weir.SourceReader[tev] {
			return &scheduledReader{at: []time.Duration{0}, batches: [][]tev{{{"k", 0}}}}
		}, weir.Watermarks(weir.Monotonous(tevAt)))
		counts := weir.WindowAggregate(weir.Window(weir.KeyBy(src, func(e tev) string { return e.Key }), weir.Session(gap)), "count", weir.Count[tev]())
		weir.Sink(counts, "out", weir.SinkFunc(func(weir.WindowResult[string, int64]) error { return nil }))
		ctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
		_, err := e.Execute(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "whole milliseconds") {
			t.Errorf("Session(%v): Execute returned %v, want an error that the gap must be whole milliseconds", gap, err)
		}
	}
}

// TestJoinTTLInWholeMilliseconds: a TTL under a millisecond, which was
// taken as 0 (forever), is refused, as is one that is not whole
// milliseconds.
func TestJoinTTLInWholeMilliseconds(t *testing.T) {
	for _, ttl := range []time.Duration{500 * time.Microsecond, 1500 * time.Microsecond} {
		e := env(weir.Config{Logger: quietLog})
		src := weir.Source(e, "s", func() weir.SourceReader[tev] {
			return &scheduledReader{at: []time.Duration{0}, batches: [][]tev{{{"k", 0}}}}
		})
		key := func(e tev) string { return e.Key }
		joined := weir.Join(weir.KeyBy(src, key), weir.KeyBy(src, key), "join", func(a, b tev) tev { return a }, weir.JoinConfig{TTL: ttl})
		weir.Sink(joined, "out", weir.SinkFunc(func(tev) error { return nil }))
		ctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
		_, err := e.Execute(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "whole milliseconds") {
			t.Errorf("Join with TTL %v: Execute returned %v, want an error that it must be whole milliseconds", ttl, err)
		}
	}
}
