package weir_test

// A source subtask that had read nothing when a checkpoint was taken was
// restored with another subtask's event time (found by an outside review,
// session 39).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state"
)

type rtEvent struct {
	Key string
	At  int64
}

// rtShared is what the readers of one run of the test share.
type rtShared struct {
	crashed atomic.Bool  // subtask 0 failed the first attempt once
	s0Snap  atomic.Int64 // a checkpoint subtask 0 took after it ended (attempt 2)
	s1Snap  atomic.Int64 // a checkpoint subtask 1 took after its first record (attempt 2)
	release atomic.Bool  // a checkpoint after both completed: subtask 1 reads on
	failAt  atomic.Int64 // subtask 0 fails once this checkpoint completed
}

// rtReader: subtask 0 reads ten records at 1000..1009 ms, then, once a
// checkpoint that covers them completed, fails once (transiently).
// Subtask 1 reads nothing in the first attempt (a reader whose input has
// not come yet); after the restore it reads ten records at 100..109 ms:
// the first alone, the other nine once a checkpoint completed that both
// subtasks took after subtask 0 ended and subtask 1 read its first (so
// the window has every watermark sent before then). Without the crash,
// subtask 1's watermark would hold the window at 99 at most: its records
// are on time.
type rtReader struct {
	operator.Base
	sh    *rtShared
	ctx   *operator.Context
	pos   int64
	ended bool
}

func (r *rtReader) Open(ctx *operator.Context) error {
	r.ctx = ctx
	if ctx.Restore == nil {
		return nil
	}
	items, err := state.RestoreList(ctx.Restore.Handles, ctx.Restore.Read, state.Union, "pos", ctx.Subtask, ctx.Parallelism)
	if err != nil {
		return err
	}
	for _, it := range items {
		sub, n := binary.Varint(it)
		pos, _ := binary.Varint(it[n:])
		if int(sub) == ctx.Subtask {
			r.pos = pos
		}
	}
	return nil
}

func (r *rtReader) wait() (operator.PollResult, error) {
	return operator.PollResult{IdleUntil: r.ctx.Now().Add(time.Millisecond)}, nil
}

func (r *rtReader) Read(out weir.Collector[rtEvent]) (operator.PollResult, error) {
	restored := r.ctx.Restore != nil
	switch r.ctx.Subtask {
	case 0:
		if restored {
			r.ended = true
			return operator.PollResult{Exhausted: true}, nil
		}
		if r.pos < 10 {
			for ; r.pos < 10; r.pos++ {
				out.Collect(rtEvent{Key: "k", At: 1000 + r.pos})
			}
			return r.wait()
		}
		if r.sh.failAt.Load() < 0 && !r.sh.crashed.Load() {
			r.sh.crashed.Store(true)
			return operator.PollResult{}, errors.New("review: a transient failure after a checkpoint")
		}
		return r.wait()
	default:
		if !restored {
			return r.wait() // nothing has come yet
		}
		switch {
		case r.pos == 0:
			out.Collect(rtEvent{Key: "k", At: 100})
			r.pos = 1
			return r.wait()
		case r.pos < 10 && r.sh.release.Load():
			for ; r.pos < 10; r.pos++ {
				out.Collect(rtEvent{Key: "k", At: 100 + r.pos})
			}
			return r.wait()
		case r.pos < 10:
			return r.wait()
		}
		return operator.PollResult{Exhausted: true}, nil
	}
}

func (r *rtReader) Snapshot(id checkpoint.ID) (operator.Async, error) {
	restored := r.ctx.Restore != nil
	switch {
	case r.ctx.Subtask == 0 && !restored && r.pos == 10 && r.sh.failAt.Load() == 0:
		r.sh.failAt.Store(int64(id))
	case r.ctx.Subtask == 0 && restored && r.ended && r.sh.s0Snap.Load() == 0:
		r.sh.s0Snap.Store(int64(id))
	case r.ctx.Subtask == 1 && restored && r.pos >= 1 && r.sh.s1Snap.Load() == 0:
		r.sh.s1Snap.Store(int64(id))
	}
	item := binary.AppendVarint(binary.AppendVarint(nil, int64(r.ctx.Subtask)), r.pos)
	return r.ctx.SnapshotList(state.Union, "pos", [][]byte{item}), nil
}

func (r *rtReader) NotifyComplete(id checkpoint.ID) error {
	if r.ctx.Subtask == 0 && r.ctx.Restore == nil {
		if at := r.sh.failAt.Load(); at > 0 && int64(id) >= at {
			r.sh.failAt.Store(-1) // fail on the next Read
		}
	}
	if r.ctx.Subtask == 1 && r.ctx.Restore != nil {
		s0, s1 := r.sh.s0Snap.Load(), r.sh.s1Snap.Load()
		if s0 > 0 && s1 > 0 && int64(id) >= max(s0, s1) {
			r.sh.release.Store(true)
		}
	}
	return nil
}

// TestASubtaskWithoutEventTimeIsRestoredWithout: a source
// of parallelism 2 without EnterSplit, whose subtask 1 had read nothing
// when the checkpoint was taken. The restore, at the same parallelism,
// gives subtask 1 the least of the *other* subtasks' greatest event times
// (clock.open: "the parallelism changed"), although it had none. Its
// watermark jumps to subtask 0's, and its own records at 100..109 become
// late at the window: [0,1000) counts 1 instead of 10. Without the crash
// they are all on time (subtask 1 holds the watermark back from its first
// record), so a crash changed the result: design note 19's "nothing on
// time becomes late" did not hold. Now the subtask's own split is written
// without event time, and restored so.
func TestASubtaskWithoutEventTimeIsRestoredWithout(t *testing.T) {
	sh := &rtShared{}
	e := env(weir.Config{Parallelism: 2, WatermarkInterval: time.Millisecond,
		Restart: weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: 5}})
	src := weir.Source(e, "events", func() weir.SourceReader[rtEvent] { return &rtReader{sh: sh} },
		weir.Watermarks(weir.Monotonous(func(v rtEvent) time.Time { return time.UnixMilli(v.At) })))
	counts := weir.WindowAggregate(weir.Window(weir.KeyBy(src, func(v rtEvent) string { return v.Key }), weir.Tumbling(time.Second)),
		"counts", weir.Count[rtEvent]())
	var got collect[string]
	weir.Sink(weir.Map(counts, "fmt", func(r weir.WindowResult[string, int64]) string {
		return fmt.Sprintf("%s [%d,%d) %d", r.Key, r.Window.Start.UnixMilli(), r.Window.End.UnixMilli(), r.Value)
	}), "out", got.sink())
	execute(t, e)
	var late int64
	for _, m := range e.Metrics() {
		late += m.Late
	}
	if !sh.crashed.Load() {
		t.Fatal("the job did not fail and restore as planned")
	}
	out := got.values()
	slices.Sort(out)
	want := []string{"k [0,1000) 10", "k [1000,2000) 10"}
	if !slices.Equal(out, want) {
		t.Errorf("windows %q, want %q (late records: %d): subtask 1's records became late after the restore", out, want, late)
	}
}
