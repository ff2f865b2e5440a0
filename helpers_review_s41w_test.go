package weir_test

// Helpers of the session-41 outside review of event time, windows and
// joins (files *_review_s41w_test.go).

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/operator"
)

// s41ev is a keyed record with an event time (ms) and a value.
type s41ev struct {
	Key string
	At  int64
	V   int64
}

func s41At(e s41ev) time.Time { return time.UnixMilli(e.At) }

// s41step is what one Read of a scripted reader does: emit records (in
// split Split if not empty), finish a split, or idle for a while.
type s41step struct {
	Split  string
	Recs   []s41ev
	Finish string
	Idle   time.Duration
	// Until, if set, holds the step (its reader idle) until it reports
	// true, or for a minute at most.
	Until func() bool
}

// s41Reader replays a script, one step a Read; the source has parallelism
// 1 (subtask 0 replays it; others end at once).
type s41Reader struct {
	operator.Base
	steps []s41step
	i     int
	sub   int
	until time.Time // a step's idling: no step before
	held  time.Time // when the step's Until began to hold it
}

func (r *s41Reader) Open(ctx *operator.Context) error { r.sub = ctx.Subtask; return nil }

func (r *s41Reader) Read(out weir.Collector[s41ev]) (operator.PollResult, error) {
	if time.Now().Before(r.until) {
		return operator.PollResult{IdleUntil: r.until}, nil // polled sooner
	}
	if r.sub != 0 || r.i >= len(r.steps) {
		return operator.PollResult{Exhausted: true}, nil
	}
	s := r.steps[r.i]
	if s.Until != nil && !s.Until() {
		if r.held.IsZero() {
			r.held = time.Now()
		}
		if time.Since(r.held) < time.Minute {
			r.until = time.Now().Add(time.Millisecond)
			return operator.PollResult{IdleUntil: r.until}, nil
		}
	}
	r.held = time.Time{}
	r.i++
	if s.Split != "" {
		weir.EnterSplit(out, s.Split)
	}
	for _, e := range s.Recs {
		out.Collect(e)
	}
	if s.Finish != "" {
		weir.FinishSplit(out, s.Finish)
	}
	pause := time.Millisecond
	if s.Idle > 0 {
		pause = s.Idle
	}
	// A short pause at least: the watermark after each step reaches the
	// consumers before the next step's records.
	r.until = time.Now().Add(pause)
	return operator.PollResult{IdleUntil: r.until}, nil
}

func s41Script(steps ...s41step) func() weir.SourceReader[s41ev] {
	return func() weir.SourceReader[s41ev] { return &s41Reader{steps: slices.Clone(steps)} }
}

// recs is one step of records of the default split.
func recs(es ...s41ev) s41step { return s41step{Recs: es} }

func s41Env(p int) *weir.Environment {
	return weir.New(weir.Config{Parallelism: p, WatermarkInterval: time.Nanosecond, Logger: s41Log,
		Checkpoint: weir.CheckpointConfig{Interval: 20 * time.Millisecond}})
}

func s41Run(t *testing.T, e *weir.Environment) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := e.Execute(ctx); err != nil {
		t.Fatal(err)
	}
}

// s41Fmt formats window results as "key [start,end) value", sorted.
func s41Fmt[V any](rs []weir.WindowResult[string, V]) []string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s [%d,%d) %v", r.Key, r.Window.Start.UnixMilli(), r.Window.End.UnixMilli(), r.Value))
	}
	slices.Sort(out)
	return out
}

func s41Diff(t *testing.T, got, want []string) {
	t.Helper()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

// s41Log discards, unless S41LOG is set.
var s41Log = func() *slog.Logger {
	if os.Getenv("S41LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return quietLog
}()
