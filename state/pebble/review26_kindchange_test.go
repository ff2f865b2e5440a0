package pebble_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/state/backend"
)

type r26MapCounter struct {
	m *weir.MapState[string, string, int64]
}

func (c *r26MapCounter) Open(ctx *weir.KeyedContext[string]) (err error) {
	c.m, err = weir.NewMapState[string, string, int64](ctx, "s")
	return err
}

func (c *r26MapCounter) Process(_ *weir.KeyedContext[string], w string, out weir.Collector[string]) error {
	c.m.Put("a-longer-key", 1)
	out.Collect(w)
	return nil
}

type r26ListCounter struct {
	l *weir.ListState[string, int64]
}

func (c *r26ListCounter) Open(ctx *weir.KeyedContext[string]) (err error) {
	c.l, err = weir.NewListState[string, int64](ctx, "s")
	return err
}

func (c *r26ListCounter) Process(_ *weir.KeyedContext[string], w string, out weir.Collector[string]) error {
	c.l.Add(1)
	out.Collect(w)
	return nil
}

func r26Checkpoints(dir string) []string {
	chks, _ := filepath.Glob(filepath.Join(dir, "ckpt", "kind", "chk-*", "_metadata"))
	for i := range chks {
		chks[i] = filepath.Base(filepath.Dir(chks[i]))
	}
	return chks
}

// TestReview26StateKindChangeKeepsCheckpoints: a job on Pebble keeps map
// state "s" and retains 3 checkpoints; its next version keeps list state
// under the same name and restores latest. The restore fails plainly,
// leaving the checkpoints for the previous version to resume from. (The
// first version of one-key lists reported the map's entries as damaged
// state, and the runtime deleted each retained checkpoint in turn.)
func TestReview26StateKindChangeKeepsCheckpoints(t *testing.T) {
	for _, kind := range []backend.Kind{weir.PebbleState, weir.HeapState} {
		t.Run(fmt.Sprint(kind), func(t *testing.T) { r26KindChange(t, kind) })
	}
}

func r26KindChange(t *testing.T, kind backend.Kind) {
	dir := t.TempDir()
	var b strings.Builder
	for i := range 1_000_000 { // to outlast a few checkpoints
		fmt.Fprintf(&b, "w%d\n", i%500)
	}
	if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	sb := weir.StateBackend{Kind: kind}
	if kind == weir.PebbleState {
		sb.Dir = filepath.Join(dir, "state")
	}
	run := func(ctx context.Context, restore string, onEvent func(weir.JobEvent), log *bytes.Buffer, f func() weir.KeyedProcessFunction[string, string, string]) error {
		e := weir.New(weir.Config{Job: "kind", Parallelism: 1, Restore: restore, OnEvent: onEvent,
			Logger:       slog.New(slog.NewTextHandler(log, nil)),
			Restart:      weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: 5},
			Checkpoint:   weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: filepath.Join(dir, "ckpt"), Retained: 3},
			StateBackend: sb})
		lines, err := file.Lines(file.LinesConfig{Pattern: filepath.Join(dir, "in.txt")})
		if err != nil {
			t.Fatal(err)
		}
		out := weir.Process(weir.KeyBy(weir.Source(e, "lines", lines), func(w string) string { return w }), "count", f)
		sink, err := file.Sink(file.SinkConfig[string]{Dir: filepath.Join(dir, "out"), Format: func(d []byte, s string) []byte { return append(append(d, s...), '\n') }})
		if err != nil {
			t.Fatal(err)
		}
		weir.Sink(out, "out", sink)
		_, err = e.Execute(ctx)
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	completed := 0
	var log1 bytes.Buffer
	err := run(ctx, "", func(e weir.JobEvent) {
		if e.Kind == weir.EventCheckpointCompleted {
			if completed++; completed == 4 {
				cancel()
			}
		}
	}, &log1, func() weir.KeyedProcessFunction[string, string, string] { return &r26MapCounter{} })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("first run: %v", err)
	}
	before := r26Checkpoints(dir)
	if len(before) < 2 {
		t.Fatalf("first run retained %v", before)
	}
	var log2 bytes.Buffer
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	err = run(ctx2, "latest", nil, &log2, func() weir.KeyedProcessFunction[string, string, string] { return &r26ListCounter{} })
	after := r26Checkpoints(dir)
	t.Logf("second run: %v", err)
	t.Logf("checkpoints before %v, after %v", before, after)
	for _, l := range strings.Split(log2.String(), "\n") {
		if strings.Contains(l, "damaged") {
			t.Logf("log: %.300s", l)
		}
	}
	if len(after) < len(before) {
		t.Errorf("a restore whose state kind changed deleted %d of the %d retained checkpoints", len(before)-len(after), len(before))
	}
	if err != nil && strings.Contains(err.Error(), "damaged") {
		t.Errorf("the error calls the checkpoint damaged: %.400s", err)
	}
}
