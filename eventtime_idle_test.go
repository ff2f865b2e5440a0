package weir_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/operator"
)

// sleepyReader emits its batches one a Read, back to back, then has
// nothing to emit until its deadline (a rate-limited or scheduled source:
// PollResult.IdleUntil far ahead), unless done is set first.
type sleepyReader struct {
	operator.Base
	q       *quietRig
	batches [][]tev
}

func (r *sleepyReader) Read(out weir.Collector[tev]) (operator.PollResult, error) {
	if len(r.batches) > 0 {
		for _, e := range r.batches[0] {
			out.Collect(e)
		}
		r.batches = r.batches[1:]
		return operator.PollResult{}, nil // more at once
	}
	if r.q.done.Load() {
		return operator.PollResult{Exhausted: true}, nil
	}
	if !time.Now().Before(r.q.deadline) {
		r.q.timedOut.Store(true)
		return operator.PollResult{Exhausted: true}, nil
	}
	return operator.PollResult{IdleUntil: r.q.deadline}, nil
}

// TestSourceSendsHeldBackWatermarkWhileReaderWaits: a source's watermark
// that the WatermarkInterval held back is sent at the next interval, as
// Flink's periodic watermark emitter (a processing-time timer of the
// SourceOperator, ProgressiveTimestampsAndWatermarks) does, even while
// the reader has nothing to read. Weir's source task computes its
// watermark only after a Poll (internal/runtime/task.go runSource ->
// advance), and waited until the reader's IdleUntil without a wake-up for
// the watermark; it now wakes at watermarkCheck too, as runInputs does. A reader that says "nothing for a while" (a
// rate limit, a schedule) holds the watermark, and every window, that
// long: here the window [0,10) waited for the record at 25's watermark (24),
// held back 1 s by the interval, until the reader's deadline. Found by an
// outside review (session 34).
func TestSourceSendsHeldBackWatermarkWhileReaderWaits(t *testing.T) {
	// A correct run fires [0,10) about an interval (1 s) after the second
	// record; the reader waits 4 s.
	q := &quietRig{deadline: time.Now().Add(4 * time.Second)}
	// Checkpoints (every 5 ms in these tests' env) wake the source task's
	// wait and hide the defect; a job's usual interval is far above a
	// watermark interval.
	e := env(weir.Config{WatermarkInterval: time.Second, Logger: quietLog, Checkpoint: weir.CheckpointConfig{Interval: time.Hour}})
	src := weir.Source(e, "sleepy", func() weir.SourceReader[tev] {
		return &sleepyReader{q: q, batches: [][]tev{{{"k", 5}}, {{"k", 25}}}}
	}, weir.Watermarks(weir.Monotonous(tevAt)))
	q.sink(src)
	q.check(t, e, "the watermark 24 that the record at 25 makes was held back by the interval, and the source task computes it again only at the next Poll, after the reader's IdleUntil")
}

// TestSourceGoesIdleWhileReaderWaits: the same cause for idleness. A
// source with WithIdleness(20ms) whose reader has nothing to read for a
// while (IdleUntil far ahead) is idle after 20 ms, and a union with a
// stream whose watermark moves on follows that stream (Flink's
// WatermarksWithIdleness is checked by the periodic emitter). Weir checked
// the source's idleness only after a Poll, so the union waited the
// reader's whole IdleUntil. (TestSourceGoesIdle passes only because its
// reader polls every 5 ms.)
func TestSourceGoesIdleWhileReaderWaits(t *testing.T) {
	// A correct run fires [0,10) about 20 ms in; the reader waits 2 s (and
	// the job ends then, as an idle source's task waits for its reader).
	q := &quietRig{deadline: time.Now().Add(2 * time.Second)}
	e := env(weir.Config{WatermarkInterval: 5 * time.Millisecond, Logger: quietLog, Checkpoint: weir.CheckpointConfig{Interval: time.Hour}})
	quiet := weir.Source(e, "sleepy", func() weir.SourceReader[tev] {
		return &sleepyReader{q: q, batches: [][]tev{{{"k", 0}}}}
	}, weir.Watermarks(weir.Monotonous(tevAt).WithIdleness(20*time.Millisecond)))
	q.sinkBeside(e, quiet)
	q.check(t, e, "the sleepy source is idle after 20 ms, but its task asks its clock only after a Poll, after the reader's IdleUntil")
}

// TestIdleSourceBehindATaskDoesNotHoldTheUnionBack: a source that goes idle
// (WithIdleness) stops holding back the watermark of what it feeds, even
// when a task stands between them (here a Map that does not chain). Flink's
// StatusWatermarkValve makes a task whose every input channel is idle emit
// WatermarkStatus.IDLE downstream, so a union/join two steps down follows
// its other, active input. Weir's task keeps its watermark and never goes
// idle itself (internal/runtime/task.go advance, "only sources do"), so the
// union waited on the quiet branch until the input ended. Now a task whose
// operators fire nothing by event time goes idle when its inputs are (note
// 27 keeps the rule for windows and timers). Found by an outside review
// (session 34).
func TestIdleSourceBehindATaskDoesNotHoldTheUnionBack(t *testing.T) {
	// A correct run fires [0,10) within a few watermark intervals; 5 s
	// bounds the wait on the broken one.
	q := &quietRig{deadline: time.Now().Add(5 * time.Second)}
	e := env(weir.Config{WatermarkInterval: 5 * time.Millisecond, Logger: quietLog})
	quiet := weir.Source(e, "quiet", q.reader([]tev{{"k", 0}}), weir.Watermarks(weir.Monotonous(tevAt).WithIdleness(20*time.Millisecond)))
	passed := weir.Map(quiet, "pass", func(v tev) tev { return v }, weir.NoChain())
	q.sinkBeside(e, passed)
	q.check(t, e, "the quiet source is idle after 20 ms, but the Map task after it never says so: the union's watermark stays at -1 while the other input's is 29")
}

// pollCounter emits one record, then waits until end (IdleUntil), counting
// the polls it gets before then.
type pollCounter struct {
	operator.Base
	end     time.Time
	emitted bool
	early   *atomic.Int64
}

func (r *pollCounter) Read(out weir.Collector[tev]) (operator.PollResult, error) {
	if !r.emitted {
		out.Collect(tev{"k", 5})
		r.emitted = true
		return operator.PollResult{}, nil
	}
	if !time.Now().Before(r.end) {
		return operator.PollResult{Exhausted: true}, nil
	}
	r.early.Add(1)
	return operator.PollResult{IdleUntil: r.end}, nil
}

// TestAWaitingReaderIsNotPolledInABusyLoop: the source task polls a reader
// that says "nothing until end" again at watermarkCheck (note 128), with
// the default 200 ms WatermarkInterval and no checkpoints to wake it: at
// most about once per interval, never in a busy loop. From an outside
// review of session 34's fixes.
func TestAWaitingReaderIsNotPolledInABusyLoop(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []weir.Option
	}{
		{"watermarks", []weir.Option{weir.Watermarks(weir.Monotonous(tevAt))}},
		{"idleness", []weir.Option{weir.Watermarks(weir.Monotonous(tevAt).WithIdleness(50 * time.Millisecond))}},
		{"no event time", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var early atomic.Int64
			const wait = time.Second
			end := time.Now().Add(wait)
			e := env(weir.Config{WatermarkInterval: 200 * time.Millisecond, Logger: quietLog, Checkpoint: weir.CheckpointConfig{Interval: time.Hour}})
			src := weir.Source(e, "idle", func() weir.SourceReader[tev] { return &pollCounter{end: end, early: &early} }, tc.opts...)
			weir.Sink(src, "drop", weir.SinkFunc(func(tev) error { return nil }))
			execute(t, e)
			n := early.Load()
			t.Logf("%s: %d polls before IdleUntil in %v (%.1f/s)", tc.name, n, wait, float64(n)/wait.Seconds())
			if n > 2*int64(wait/(200*time.Millisecond))+2 {
				t.Errorf("%d polls of a waiting reader in %v: more than one per 200 ms watermark interval", n, wait)
			}
		})
	}
}
