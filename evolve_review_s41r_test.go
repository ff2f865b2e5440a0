package weir_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/generator"
)

// s41rChannelStateRun runs v1 of a job: numbers → rebalance → "slow" (a
// stateless map slowed to a crawl) → sink, with unaligned checkpoints, until
// `want` completed checkpoints hold channel state; it returns the job's
// checkpoint directory's chk-* names.
func s41rChannelStateRun(t *testing.T, ck weir.CheckpointConfig, want int) []string {
	t.Helper()
	src, err := generator.New(generator.Config[int64]{Make: func(i int64) int64 { return i }, BatchSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	withState := 0
	ck.Alignment, ck.Interval, ck.TolerableFailures, ck.Timeout = weir.Unaligned, 100*time.Millisecond, 1000, 2*time.Second
	env := weir.New(weir.Config{Job: "evolve", Parallelism: 2, BatchSize: 16, Checkpoint: ck, OnEvent: func(ev weir.JobEvent) {
		if ev.Kind != weir.EventCheckpointCompleted {
			return
		}
		var cs int64
		for _, tt := range ev.Tasks {
			cs += tt.ChannelState
		}
		mu.Lock()
		defer mu.Unlock()
		if cs > 0 {
			if withState++; withState == want {
				cancel()
			}
		}
	}})
	slow := weir.Map(weir.Rebalance(weir.Source(env, "numbers", src)), "slow", func(v int64) int64 {
		time.Sleep(2 * time.Millisecond)
		return v
	})
	weir.Sink(slow, "out", weir.SinkFunc(func(int64) error { return nil }))
	done := make(chan error, 1)
	go func() { _, err := env.Execute(ctx); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("v1 ended with %v, want cancelled", err)
		}
	case <-time.After(2 * time.Minute):
		cancel()
		<-done
		t.Fatal("v1 took no checkpoints with channel state within 2 minutes")
	}
	return s41rChks(t, ck.Dir)
}

func s41rChks(t *testing.T, dir string) []string {
	t.Helper()
	ms, _ := filepath.Glob(filepath.Join(dir, "evolve", "chk-*", "_metadata"))
	var out []string
	for _, m := range ms {
		out = append(out, filepath.Base(filepath.Dir(m)))
	}
	slices.Sort(out)
	return out
}

// TestReviewS41rEdgeTypeChangeWithChannelStateIsNotDamage: v2 of the job
// changes the type of the records flowing into "slow" (int64 → string: a
// new map "tostr" before the rebalance). Restoring v1's unaligned
// checkpoints (--restore latest, three retained) replays v1's in-flight
// int64 batches with v2's string codec. That is a job change, like a keyed
// state's type change (which the README says fails once, naming the
// operator and both types, and deletes nothing). Weir instead takes it for
// damaged state: it falls back checkpoint by checkpoint and deletes every
// newer one, logging "checkpoint state is missing or damaged" — an
// operator reading that suspects the storage, and has lost the
// checkpoints the fixed job would have restored.
func TestReviewS41rEdgeTypeChangeWithChannelStateIsNotDamage(t *testing.T) {
	dir := t.TempDir()
	ck := weir.CheckpointConfig{Dir: filepath.Join(dir, "ckpt"), Retained: 3}
	before := s41rChannelStateRun(t, ck, 4)
	if len(before) < 2 {
		t.Fatalf("v1 left %v; the test needs at least 2 checkpoints", before)
	}

	// v2: the records into "slow" are strings now.
	src, err := generator.New(generator.Config[int64]{Make: func(i int64) int64 { return i }, BatchSize: 16, Count: 2000})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	ck.Alignment, ck.Interval = weir.Unaligned, 100*time.Millisecond
	env := weir.New(weir.Config{Job: "evolve", Parallelism: 2, BatchSize: 16, Checkpoint: ck, Restore: "latest",
		Restart: weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: 5},
		Logger:  slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	strs := weir.Map(weir.Source(env, "numbers", src), "tostr", func(v int64) string { return fmt.Sprint("n", v) })
	var mu sync.Mutex
	var got []string
	slow := weir.Map(weir.Rebalance(strs), "slow", func(v string) string { return v })
	weir.Sink(slow, "out", weir.SinkFunc(func(v string) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, v)
		return nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = env.Execute(ctx)
	after := s41rChks(t, ck.Dir)
	mu.Lock()
	var odd []string
	for _, v := range got {
		if !strings.HasPrefix(v, "n") {
			odd = append(odd, fmt.Sprintf("%q", v))
		}
	}
	mu.Unlock()
	t.Logf("v1 left %v; v2 ended with %v; left %v; %d records not of v2's form", before, err, after, len(odd))
	if len(odd) > 0 {
		t.Errorf("v2's sink received %d records v2 cannot produce (v1's int64 batches decoded as strings), e.g. %v", len(odd), odd[:min(5, len(odd))])
	}
	if !slices.Equal(before, after) {
		t.Errorf("restoring v1's checkpoints into a job whose edge type changed deleted checkpoints: before %v, after %v", before, after)
	}
	if strings.Contains(logs.String(), "missing or damaged") {
		t.Errorf("a job change is reported as damaged checkpoint state:\n%s", firstLines(logs.String(), 6))
	}
	if err == nil {
		t.Errorf("v2 restored v1's in-flight records of another type without an error")
	} else if !strings.Contains(err.Error(), "slow") {
		t.Errorf("the error does not name the operator whose input changed: %v", err)
	}
}

func firstLines(s string, n int) string {
	ls := strings.SplitN(s, "\n", n+1)
	if len(ls) > n {
		ls = ls[:n]
	}
	return strings.Join(ls, "\n")
}

// TestReviewS41rEdgeTypeChangeWithChannelStateReplaysSilently: as above,
// but v2's records into "slow" are uint64 (v2 emits 1e12+i). v1's
// in-flight int64 batches decode as uint64 without an error, and v2's sink
// receives records v2 never produced; nothing says the restore did not fit.
func TestReviewS41rEdgeTypeChangeWithChannelStateReplaysSilently(t *testing.T) {
	dir := t.TempDir()
	ck := weir.CheckpointConfig{Dir: filepath.Join(dir, "ckpt"), Retained: 3}
	before := s41rChannelStateRun(t, ck, 2)
	src, err := generator.New(generator.Config[int64]{Make: func(i int64) int64 { return i }, BatchSize: 16, Count: 2000})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	ck.Alignment, ck.Interval = weir.Unaligned, 100*time.Millisecond
	env := weir.New(weir.Config{Job: "evolve", Parallelism: 2, BatchSize: 16, Checkpoint: ck, Restore: "latest",
		Restart: weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: 5},
		Logger:  slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	const base = 1_000_000_000_000
	us := weir.Map(weir.Source(env, "numbers", src), "touint", func(v int64) uint64 { return base + uint64(v) })
	var mu sync.Mutex
	var odd []uint64
	n := 0
	slow := weir.Map(weir.Rebalance(us), "slow", func(v uint64) uint64 { return v })
	weir.Sink(slow, "out", weir.SinkFunc(func(v uint64) error {
		mu.Lock()
		defer mu.Unlock()
		n++
		if v < base {
			odd = append(odd, v)
		}
		return nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = env.Execute(ctx)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("v1 left %v; v2 ended with %v after %d records; log:\n%s", before, err, n, firstLines(logs.String(), 4))
	if len(odd) > 0 {
		t.Errorf("v2's sink received %d records v2 cannot produce (v1's int64 in-flight records read as uint64, no error, no warning), e.g. %v", len(odd), odd[:min(5, len(odd))])
	}
}
