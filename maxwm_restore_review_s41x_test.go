package weir_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state"
)

// s41xEnd is the event time of an end-of-stream marker: the watermark
// strategy maps it to the end of event time (MaxTime), as a punctuated
// "end of stream" watermark does in Flink, while the input goes on.
const s41xEnd = 1_000_000

type s41xShared struct {
	failAt  atomic.Int64 // fail once this checkpoint completed (-1: now)
	crashed atomic.Bool
}

// s41xReader reads k@100, the end marker, and (once a checkpoint that
// covers those completed) k@200, which is late: the watermark is at the
// end of event time. Then, if the test asks, it fails once, and after the
// restore reads on from the checkpoint's position (k@200 again), then
// ends.
type s41xReader struct {
	operator.Base
	sh    *s41xShared
	ctx   *operator.Context
	pos   int64
	crash bool
}

func (r *s41xReader) Open(ctx *operator.Context) error {
	r.ctx = ctx
	if ctx.Restore == nil {
		return nil
	}
	items, err := state.RestoreList(ctx.Restore.Handles, ctx.Restore.Read, state.Union, "pos", ctx.Subtask, ctx.Parallelism)
	if err != nil {
		return err
	}
	for _, it := range items {
		r.pos, _ = binary.Varint(it)
	}
	return nil
}

func (r *s41xReader) wait() (operator.PollResult, error) {
	return operator.PollResult{IdleUntil: r.ctx.Now().Add(time.Millisecond)}, nil
}

func (r *s41xReader) Read(out weir.Collector[s41ev]) (operator.PollResult, error) {
	switch {
	case r.pos == 0:
		out.Collect(s41ev{"k", 100, 1})
		out.Collect(s41ev{"end", s41xEnd, 0})
		r.pos = 2
		return r.wait()
	case r.pos == 2 && r.sh.failAt.Load() == -1:
		out.Collect(s41ev{"k", 200, 1}) // late
		r.pos = 3
		return r.wait()
	case r.pos == 2:
		return r.wait() // for a checkpoint that covers the first two
	case r.pos == 3 && r.crash && !r.sh.crashed.Load():
		time.Sleep(20 * time.Millisecond) // k@200 reaches the window
		r.sh.crashed.Store(true)
		return operator.PollResult{}, errors.New("review: a transient failure after a checkpoint")
	}
	return operator.PollResult{Exhausted: true}, nil
}

func (r *s41xReader) Snapshot(id checkpoint.ID) (operator.Async, error) {
	if r.pos == 2 && r.sh.failAt.Load() == 0 {
		r.sh.failAt.Store(int64(id))
	}
	return r.ctx.SnapshotList(state.Union, "pos", [][]byte{binary.AppendVarint(nil, r.pos)}), nil
}

func (r *s41xReader) NotifyComplete(id checkpoint.ID) error {
	if at := r.sh.failAt.Load(); at > 0 && int64(id) >= at {
		r.sh.failAt.Store(-1)
	}
	return nil
}

func s41xMaxWatermarkJob(t *testing.T, crash bool) ([]string, *s41xShared) {
	sh := &s41xShared{}
	e := env(weir.Config{Parallelism: 1, WatermarkInterval: time.Millisecond, Logger: s41Log,
		Restart: weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: 5}})
	strategy := weir.WatermarkStrategy[s41ev]{Timestamp: s41At, Watermark: func(max time.Time) time.Time {
		if max.UnixMilli() >= s41xEnd {
			return time.UnixMilli(math.MaxInt64) // the end marker: event time is over
		}
		return max.Add(-time.Millisecond)
	}}
	src := weir.Source(e, "events", func() weir.SourceReader[s41ev] { return &s41xReader{sh: sh, crash: crash} },
		weir.Watermarks(strategy))
	data := weir.Filter(src, "data", func(e s41ev) bool { return e.Key != "end" })
	c := weir.WindowAggregate(weir.Window(weir.KeyBy(data, func(e s41ev) string { return e.Key }), weir.Tumbling(time.Second)),
		"count", weir.Count[s41ev]())
	var got collect[string]
	weir.Sink(weir.Map(c, "fmt", func(r weir.WindowResult[string, int64]) string {
		return fmt.Sprintf("%s [%d,%d) %d", r.Key, r.Window.Start.UnixMilli(), r.Window.End.UnixMilli(), r.Value)
	}), "out", got.sink())
	execute(t, e)
	out := got.values()
	slices.Sort(out)
	return out, sh
}

// A watermark at the end of event time that is not the end of the input
// (an end-of-stream marker mapped to MaxTime by the watermark strategy,
// the input going on): the window fires [0,1000) with k@100, and k@200,
// after the marker, is late and dropped. A failure after a checkpoint
// taken at that watermark restores the window at the watermark it had
// before (99), since the checkpoint records it as if the input had
// ended (keyed.go takes wm == MaxTime for the end): the replayed k@200 is
// on time, opens [0,1000) again, and the end fires it a second time.
// Without the failure the output is one window; with it, two: a failure
// changed the output ("nothing that was late becomes on time",
// snapshotWatermark's promise, does not hold).
func TestS41xMaxWatermarkBeforeTheEndRestoresBehindIt(t *testing.T) {
	want, _ := s41xMaxWatermarkJob(t, false)
	if !slices.Equal(want, []string{"k [0,1000) 1"}) {
		t.Fatalf("without a failure: %q", want)
	}
	got, sh := s41xMaxWatermarkJob(t, true)
	if !sh.crashed.Load() {
		t.Fatal("the job did not fail and restore as planned")
	}
	if !slices.Equal(got, want) {
		t.Errorf("with a failure and a restore: %q, without: %q", got, want)
	}
}
