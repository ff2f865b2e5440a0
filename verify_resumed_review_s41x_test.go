package weir_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
)

// A job read a directory to its end: its windows [1000,2000) and
// [2000,3000) fired at the end of its input, under MaxTime, and were
// committed. It was resumed with a file added, as note 60 has the file
// source do. The resumed run restores the watermark the window had before
// the end (below 1999 here: the first run's source read its one file at
// once, so the end was its first watermark), and the resumed run's
// checkpoints record that watermark. The new file's lines are all
// filtered out before the window, so they change no output: the committed
// output is still the first run's, and right. Verify on the resumed run's
// checkpoint caps its rerun at the recorded watermark (watermarkCap reads
// the raw one): the rerun fires neither window, and verify reports the
// correct committed output as wrong (records the rerun did not make).
// Before the change the checkpoint recorded MaxTime and the same verify
// passed.
func TestS41xVerifyResumedJobCheckpointBeforeItsWatermarkMoved(t *testing.T) {
	dir := t.TempDir()
	in, out, ck := filepath.Join(dir, "in"), filepath.Join(dir, "out"), filepath.Join(dir, "ckpt")
	if err := os.MkdirAll(in, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string, ts ...int64) {
		var b strings.Builder
		for _, x := range ts {
			if x < 0 {
				fmt.Fprintln(&b, "skip")
				continue
			}
			fmt.Fprintln(&b, x)
		}
		if err := os.WriteFile(filepath.Join(in, name), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	build := func(restore bool, onEvent func(weir.JobEvent)) *weir.Environment {
		cfg := weir.Config{Job: "resumed", Parallelism: 1, WatermarkInterval: time.Millisecond, Logger: s41Log, OnEvent: onEvent,
			Checkpoint: weir.CheckpointConfig{Interval: 10 * time.Millisecond, Dir: ck}}
		if restore {
			cfg.Restore = "latest"
		}
		e := weir.New(cfg)
		src, err := file.Lines(file.LinesConfig{Pattern: filepath.Join(in, "*.txt")})
		if err != nil {
			t.Fatal(err)
		}
		at := func(l string) time.Time { x, _ := strconv.ParseInt(l, 10, 64); return time.UnixMilli(x) }
		lines := weir.Source(e, "lines", src, weir.Watermarks(weir.BoundedOutOfOrderness(0, at)))
		data := weir.Filter(lines, "data", func(l string) bool { return l != "skip" })
		c := weir.WindowAggregate(weir.Window(weir.KeyBy(data, func(string) string { return "all" }), weir.Tumbling(time.Second)),
			"count", weir.Count[string]())
		sink, err := file.Sink(file.SinkConfig[string]{Dir: out, Format: lineFormat})
		if err != nil {
			t.Fatal(err)
		}
		weir.Sink(weir.Map(c, "fmt", func(r weir.WindowResult[string, int64]) string {
			return fmt.Sprintf("[%d,%d) %d", r.Window.Start.UnixMilli(), r.Window.End.UnixMilli(), r.Value)
		}), "out", sink)
		return e
	}
	write("a.txt", 1000, 1500, 2100)
	s41Run(t, build(false, nil))
	rep, err := build(false, nil).Verify(context.Background(), weir.VerifyConfig{})
	if err != nil || !rep.OK() {
		t.Fatalf("the first run's final checkpoint: %v\n%s", err, rep)
	}
	// The added file: many lines the job filters out before its window
	// (event time 0, which moves no watermark), so that the resumed run
	// lives long enough to complete checkpoints and changes no output.
	skip := make([]int64, 1_500_000)
	for i := range skip {
		skip[i] = -1
	}
	write("b.txt", skip...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stop, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	c := &canceller{k: 2, cancel: cancelRun}
	if _, err := build(true, c.onEvent).Execute(stop); !errors.Is(err, context.Canceled) {
		t.Fatalf("the resumed run: %v (it must outlast two checkpoints)", err)
	}
	t.Logf("committed: %q", sortedLines(t, out))
	rep, err = build(false, nil).Verify(ctx, weir.VerifyConfig{})
	if err == nil || !strings.Contains(err.Error(), "resumed the job after its input had ended") || !strings.Contains(err.Error(), "verify the checkpoint taken at the end") {
		t.Fatalf("verify of the resumed run's checkpoint: %v\n%s; want a refusal saying why, and what to verify instead", err, rep)
	}
}
