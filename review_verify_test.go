package weir_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/connector/generator"
)

// runUntilCheckpoints executes e until k checkpoints completed, then
// cancels it. onEvent must be the Config.OnEvent of e: build it with
// newCanceller.
type canceller struct {
	n, k   int
	cancel context.CancelFunc
}

func (c *canceller) onEvent(ev weir.JobEvent) {
	if ev.Kind == weir.EventCheckpointCompleted {
		if c.n++; c.n == c.k {
			c.cancel()
		}
	}
}

// TestReviewVerifyEventTimeWindowsStoppedMidway: an event-time windowed
// count over a deterministic generator (monotonous timestamps: record i
// at i ms), cancelled after two checkpoints, is a deterministic job whose
// committed output is exactly right. Verify must not report a mismatch:
// the rerun ends its input, and the final watermark fires every window
// still open at the checkpoint, output the committed files cannot hold
// (those windows had not fired when the checkpoint was taken).
func TestReviewVerifyEventTimeWindowsStoppedMidway(t *testing.T) {
	dir := t.TempDir()
	build := func(p int, onEvent func(weir.JobEvent)) *weir.Environment {
		src, err := generator.New(generator.Config[int64]{Count: 1_000_000, RatePerSecond: 20_000, Make: func(i int64) int64 { return i }})
		if err != nil {
			t.Fatal(err)
		}
		sink, err := file.Sink(file.SinkConfig[string]{Dir: filepath.Join(dir, "out"), Format: lineFormat})
		if err != nil {
			t.Fatal(err)
		}
		e := weir.New(weir.Config{Job: "windows", Parallelism: p, OnEvent: onEvent,
			Checkpoint: weir.CheckpointConfig{Interval: 50 * time.Millisecond, Dir: filepath.Join(dir, "ckpt")}})
		s := weir.Source(e, "numbers", src, weir.Watermarks(weir.Monotonous(func(i int64) time.Time { return time.UnixMilli(i) })))
		counts := weir.WindowAggregate(weir.Window(weir.KeyBy(s, func(i int64) int64 { return i % 4 }), weir.Tumbling(100*time.Millisecond)), "counts", weir.Count[int64]())
		weir.Sink(weir.Map(counts, "text", func(r weir.WindowResult[int64, int64]) string {
			return fmt.Sprintf("%d [%d,%d) %d", r.Key, r.Window.Start.UnixMilli(), r.Window.End.UnixMilli(), r.Value)
		}), "out", sink)
		return e
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stop, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	c := &canceller{k: 6, cancel: cancelRun}
	if _, err := build(2, c.onEvent).Execute(stop); !errors.Is(err, context.Canceled) {
		t.Fatalf("the run: %v (the input must outlast two checkpoints)", err)
	}
	rep, err := build(2, nil).Verify(ctx, weir.VerifyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("a deterministic event-time job stopped midway does not verify:\n%s", rep)
	}
}

// TestReviewVerifyInputGrewAfterTheJob: the file source takes its files as
// they were when it split them: lines appended to a known file later are
// never read, by the run or by any restore of its checkpoints. The rerun
// of Verify reads the file to its size now, so lines no checkpoint
// consumed count as output the sink lost.
func TestReviewVerifyInputGrewAfterTheJob(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	var b strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	build := func() *weir.Environment {
		lines, err := file.Lines(file.LinesConfig{Pattern: in, SplitBytes: 4096})
		if err != nil {
			t.Fatal(err)
		}
		sink, err := file.Sink(file.SinkConfig[string]{Dir: filepath.Join(dir, "out"), Format: lineFormat})
		if err != nil {
			t.Fatal(err)
		}
		e := weir.New(weir.Config{Job: "grew", Parallelism: 2, Checkpoint: weir.CheckpointConfig{Interval: 5 * time.Millisecond, Dir: filepath.Join(dir, "ckpt")}})
		weir.Sink(weir.Source(e, "lines", lines), "out", sink)
		return e
	}
	execute(t, build())
	// The run's output verifies.
	rep, err := build().Verify(context.Background(), weir.VerifyConfig{})
	if err != nil || !rep.OK() {
		t.Fatalf("before the append: %v\n%s", err, rep)
	}
	f, err := os.OpenFile(in, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "appended 1\nappended 2\n")
	f.Close()
	// A restore of the latest checkpoint would not read the appended
	// lines (the file is known); the output is still right.
	rep, err = build().Verify(context.Background(), weir.VerifyConfig{})
	if err != nil {
		t.Logf("refused (acceptable): %v", err)
		return
	}
	if !rep.OK() {
		t.Fatalf("after lines were appended to the input, which no checkpoint consumed:\n%s", rep)
	}
}

// TestReviewVerifyInputShrankAfterTheJob: the same with the input file
// truncated after the job read it to the end. No restore reads it again
// (the file is known), and the committed output is right; Verify's
// rerun reads the file as it is now and reports the committed lines of
// the cut-off part "unexpected", blaming the output, where the file
// source itself would say ErrInputShrank.
func TestReviewVerifyInputShrankAfterTheJob(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	var b strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	build := func() *weir.Environment {
		lines, err := file.Lines(file.LinesConfig{Pattern: in})
		if err != nil {
			t.Fatal(err)
		}
		sink, err := file.Sink(file.SinkConfig[string]{Dir: filepath.Join(dir, "out"), Format: lineFormat})
		if err != nil {
			t.Fatal(err)
		}
		e := weir.New(weir.Config{Job: "shrank", Checkpoint: weir.CheckpointConfig{Interval: 5 * time.Millisecond, Dir: filepath.Join(dir, "ckpt")}})
		weir.Sink(weir.Source(e, "lines", lines), "out", sink)
		return e
	}
	execute(t, build())
	if err := os.Truncate(in, int64(len("line 0\nline 1\n"))); err != nil {
		t.Fatal(err)
	}
	rep, err := build().Verify(context.Background(), weir.VerifyConfig{})
	if err == nil {
		t.Fatalf("verify over an input truncated since the checkpoint read it: no error; the report blames the output:\n%s", short(rep))
	}
	if !errors.Is(err, file.ErrInputShrank) {
		t.Fatalf("verify over an input truncated since the checkpoint read it: %v, want file.ErrInputShrank", err)
	}
}

// TestReviewVerifyOnlyReads: Verify given a checkpoint directory that
// does not exist (a typo, another job's name) must fail without creating
// anything: it creates <dir>/<job>.
func TestReviewVerifyOnlyReads(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("a\nb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lines, err := file.Lines(file.LinesConfig{Pattern: in})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := file.Sink(file.SinkConfig[string]{Dir: filepath.Join(dir, "out"), Format: lineFormat})
	if err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(dir, "no-such-dir")
	e := weir.New(weir.Config{Job: "typo", Checkpoint: weir.CheckpointConfig{Dir: ckpt}})
	weir.Sink(weir.Source(e, "lines", lines), "out", sink)
	_, err = e.Verify(context.Background(), weir.VerifyConfig{})
	if err == nil {
		t.Fatal("verify of a job without checkpoints succeeded")
	}
	if _, serr := os.Stat(ckpt); serr == nil {
		t.Fatalf("verify (%v) created the checkpoint directory %s: it must only read", err, ckpt)
	}
}

// slowJob is a generator, a slow map behind a rebalance and a file sink
// after another, at parallelism 2: under back-pressure, with two input
// channels a subtask.
func slowJob(t *testing.T, dir string, cc weir.CheckpointConfig, spin time.Duration, onEvent func(weir.JobEvent)) *weir.Environment {
	src, err := generator.New(generator.Config[int64]{Count: 2_000_000, Make: func(i int64) int64 { return i }})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := file.Sink(file.SinkConfig[string]{Dir: filepath.Join(dir, "out"), Format: lineFormat})
	if err != nil {
		t.Fatal(err)
	}
	cc.Interval, cc.Dir = 20*time.Millisecond, filepath.Join(dir, "ckpt")
	e := weir.New(weir.Config{Job: "slow", Parallelism: 2, OnEvent: onEvent, Checkpoint: cc})
	slow := weir.Map(weir.Rebalance(weir.Source(e, "numbers", src)), "slow", func(i int64) string {
		for start := time.Now(); time.Since(start) < spin; {
		}
		return fmt.Sprint(i)
	}, weir.NoChain())
	weir.Sink(weir.Rebalance(slow), "out", sink)
	return e
}

// verifySlowJob runs slowJob with cc until three checkpoints completed,
// cancels it, and verifies it.
func verifySlowJob(t *testing.T, cc weir.CheckpointConfig, spin time.Duration) (weir.VerifyReport, error) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stop, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	c := &canceller{k: 3, cancel: cancelRun}
	if _, err := slowJob(t, dir, cc, spin, c.onEvent).Execute(stop); !errors.Is(err, context.Canceled) {
		t.Fatalf("the run: %v (the input must outlast three checkpoints)", err)
	}
	return slowJob(t, dir, cc, spin, nil).Verify(ctx, weir.VerifyConfig{})
}

// short is the start of a report.
func short(rep weir.VerifyReport) string {
	s := rep.String()
	return s[:min(len(s), 500)]
}

// TestReviewVerifyUnalignedCheckpoint: with unaligned checkpoints under
// back-pressure, the latest checkpoint holds records in flight (channel
// state): consumed by the sources, not yet written by the sinks; a
// restore replays them. Verify skips channel state, reruns all the input
// the sources consumed, and reports the in-flight records as lost output
// of a correct exactly-once run. (The same job with aligned checkpoints
// verifies.)
func TestReviewVerifyUnalignedCheckpoint(t *testing.T) {
	rep, err := verifySlowJob(t, weir.CheckpointConfig{Alignment: weir.Unaligned}, 20*time.Microsecond)
	if err != nil {
		t.Logf("refused (acceptable): %v", err)
		return
	}
	if !rep.OK() {
		t.Fatalf("a correct exactly-once run with unaligned checkpoints does not verify:\n%s", short(rep))
	}
}

// TestReviewVerifyRefusesAtLeastOnce: an at-least-once checkpoint does
// not align barriers: a sink's snapshot holds output of input after the
// sources' recorded positions. Verify of a job configured at-least-once
// must refuse (or allow for it); it reports a correct run, with no
// failure at all, as a MISMATCH with "unexpected" records.
func TestReviewVerifyRefusesAtLeastOnce(t *testing.T) {
	rep, err := verifySlowJob(t, weir.CheckpointConfig{Mode: weir.AtLeastOnce}, 2*time.Microsecond)
	if err == nil {
		t.Fatalf("verify of an at-least-once job was not refused:\n%s", short(rep))
	}
}

// TestReviewVerifyRefusesACheckpointOfAnotherJob: the job verified must be
// the one that took the checkpoint. With its source renamed (another UID,
// as after an edit of the job), a restore of the checkpoint is refused
// (its state of "lines" would not be restored); Verify instead rewinds
// the new source to nothing and reports every committed line
// "unexpected": a MISMATCH report that blames the output for a job that
// does not fit the checkpoint.
func TestReviewVerifyRefusesACheckpointOfAnotherJob(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("a\nb\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	build := func(source string) *weir.Environment {
		lines, err := file.Lines(file.LinesConfig{Pattern: in})
		if err != nil {
			t.Fatal(err)
		}
		sink, err := file.Sink(file.SinkConfig[string]{Dir: filepath.Join(dir, "out"), Format: lineFormat})
		if err != nil {
			t.Fatal(err)
		}
		e := weir.New(weir.Config{Job: "renamed", Checkpoint: weir.CheckpointConfig{Interval: 5 * time.Millisecond, Dir: filepath.Join(dir, "ckpt")}})
		weir.Sink(weir.Source(e, source, lines), "out", sink)
		return e
	}
	execute(t, build("lines"))
	rep, err := build("input").Verify(context.Background(), weir.VerifyConfig{})
	if err == nil {
		t.Fatalf("verify of a job whose source the checkpoint does not hold (it holds source \"lines\"'s state) reports, instead of refusing:\n%s", rep)
	}
}

// TestReviewVerifyWritesNoState: with the Pebble state backend, the rerun
// of Verify opens Pebble databases for its keyed operators in the state
// directory (Config.StateBackend.Dir, by default one shared in the
// temporary directory): it writes the job's whole keyed state to disk,
// beside a running job's own, and leaves directories behind.
func TestReviewVerifyWritesNoState(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	var b strings.Builder
	for i := range 500 {
		fmt.Fprintf(&b, "k%d\n", i%13)
	}
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	build := func(backend weir.StateBackend) *weir.Environment {
		lines, err := file.Lines(file.LinesConfig{Pattern: in})
		if err != nil {
			t.Fatal(err)
		}
		sink, err := file.Sink(file.SinkConfig[string]{Dir: filepath.Join(dir, "out"), Format: lineFormat})
		if err != nil {
			t.Fatal(err)
		}
		e := weir.New(weir.Config{Job: "pebble", StateBackend: backend, Checkpoint: weir.CheckpointConfig{Interval: 5 * time.Millisecond, Dir: filepath.Join(dir, "ckpt")}})
		counts := weir.Reduce(weir.KeyBy(weir.Map(weir.Source(e, "lines", lines), "one", func(l string) string { return l + "\t1" }), func(l string) string { return l[:strings.IndexByte(l, '\t')] }),
			"count", func(a, v string) string { return a + "1" })
		weir.Sink(counts, "out", sink)
		return e
	}
	execute(t, build(weir.StateBackend{Kind: weir.PebbleState, Dir: state}))
	if err := os.RemoveAll(state); err != nil {
		t.Fatal(err)
	}
	rep, err := build(weir.StateBackend{Kind: weir.PebbleState, Dir: state}).Verify(context.Background(), weir.VerifyConfig{})
	if err != nil || !rep.OK() {
		t.Fatalf("%v\n%s", err, rep)
	}
	if _, err := os.Stat(state); err == nil {
		t.Fatalf("verify created the state directory %s: it must write nothing", state)
	}
}
