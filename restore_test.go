package weir_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/examples/wordcount"
	"github.com/weirstream/weir/operator"
)

// The regression tests of the restore-safety issue: each case there is a
// test here, named after it.

// lateTimer emits every record and sets a processing-time timer a little
// later for its key; the timer emits too.
type lateTimer struct{}

func (lateTimer) Process(c *weir.KeyedContext[int64], v int64, out weir.Collector[string]) error {
	out.Collect(fmt.Sprint("rec:", v))
	c.RegisterTimer(c.Now().Add(20 * time.Millisecond))
	return nil
}

func (lateTimer) OnTimer(c *weir.KeyedContext[int64], at time.Time, out weir.Collector[string]) error {
	out.Collect(fmt.Sprint("timer:", c.Key(), ":", at.UnixMilli()))
	return nil
}

func lineFormat(d []byte, s string) []byte { return append(append(d, s...), '\n') }

// committedLines counts the lines of the committed files in dir.
func committedLines(t *testing.T, dir string) map[string]int {
	t.Helper()
	var err error
	m := map[string]int{}
	for l := range wordcount.CommittedLines(vfs.Default, dir, &err) {
		if l != "" {
			m[l]++
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Case 1: nothing is committed that no completed checkpoint covers.
// Restoring the final checkpoint of a finished job (a kill -9 right after
// it completed) must change nothing: with records emitted after the final
// barrier, timers fired again and their output was committed twice.
func TestFinalCheckpointCoversEveryRecord(t *testing.T) {
	dir := t.TempDir()
	run := func(restore string) {
		e := weir.New(weir.Config{Job: "timers", Parallelism: 2, Restore: restore,
			Checkpoint: weir.CheckpointConfig{Interval: 5 * time.Millisecond, Dir: filepath.Join(dir, "ckpt")}})
		g, err := newRateLimited(2000, 400)
		if err != nil {
			t.Fatal(err)
		}
		out := weir.Process(weir.KeyBy(weir.Source(e, "nums", g), func(v int64) int64 { return v % 16 }), "late",
			func() weir.KeyedProcessFunction[int64, int64, string] { return lateTimer{} })
		sink, err := file.Sink(file.SinkConfig[string]{Dir: filepath.Join(dir, "out"), Format: lineFormat})
		if err != nil {
			t.Fatal(err)
		}
		weir.Sink(out, "out", sink)
		execute(t, e)
	}
	run("")
	first := committedLines(t, filepath.Join(dir, "out"))
	run("latest")
	again := committedLines(t, filepath.Join(dir, "out"))
	records, timers := 0, 0
	for l, n := range again {
		if n != 1 {
			t.Errorf("%q committed %d times", l, n)
		}
		if strings.HasPrefix(l, "rec:") {
			records++
		} else {
			timers++
		}
	}
	if records != 400 || timers == 0 || len(again) != len(first) {
		t.Fatalf("%d records (want 400) and %d timer outputs; %d lines before the restore, %d after", records, timers, len(first), len(again))
	}
}

// wcInput writes the word count's input into dir and returns its options.
func wcInput(t *testing.T, dir string) wordcount.Options {
	t.Helper()
	for f := range 2 {
		var b strings.Builder
		for i := range 100_000 {
			fmt.Fprintf(&b, "w%d w%d\n", i%97, (i*31+f)%89)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("in-%d.txt", f)), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return wordcount.Options{Input: filepath.Join(dir, "in-*.txt"), Output: filepath.Join(dir, "out"), Parallelism: 2,
		Checkpoint: weir.CheckpointConfig{Interval: 2 * time.Millisecond, Dir: filepath.Join(dir, "ckpt"), Retained: 3}}
}

// cancelAfter runs the word count until k checkpoints completed, then
// cancels it (the checkpoints are retained).
func cancelAfter(t *testing.T, o wordcount.Options, k int) {
	t.Helper()
	o.BeforeCount = wordcount.Paced(200) // to outlast k checkpoints
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	o.OnEvent = func(ev weir.JobEvent) {
		if ev.Kind == weir.EventCheckpointCompleted {
			if n++; n == k {
				cancel()
			}
		}
	}
	e, err := wordcount.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Execute(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("first run: %v (the input must outlast %d checkpoints)", err, k)
	}
}

func report(t *testing.T, o wordcount.Options) wordcount.Report {
	t.Helper()
	files, _ := filepath.Glob(o.Input)
	want, err := wordcount.Expected(vfs.Default, files)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := wordcount.Verify(vfs.Default, o.Output, want, false)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func executeErr(t *testing.T, o wordcount.Options) (weir.Result, error) {
	t.Helper()
	e, err := wordcount.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return e.Execute(ctx)
}

// wcRenamed is the word count with its counting operator and sink renamed
// (to count and output unless given), at max parallelism maxP.
func wcRenamed(o wordcount.Options, count, output string, maxP int, allow bool) *weir.Environment {
	e := weir.New(weir.Config{Job: "wordcount", Parallelism: 2, MaxParallelism: maxP, Restore: o.Restore, Checkpoint: o.Checkpoint, AllowNonRestoredState: allow})
	lines, _ := file.Lines(file.LinesConfig{Pattern: o.Input})
	sink, _ := file.Sink(file.SinkConfig[wordcount.Count]{Dir: o.Output, Format: wordcount.Format})
	words := weir.FlatMap(weir.Source(e, "lines", lines), "split", wordcount.Split)
	counts := weir.Reduce(weir.KeyBy(weir.Map(words, "one", func(w string) wordcount.Count { return wordcount.Count{Word: w, Count: 1} }),
		func(c wordcount.Count) string { return c.Word }), count,
		func(a, b wordcount.Count) wordcount.Count {
			return wordcount.Count{Word: a.Word, Count: a.Count + b.Count}
		})
	weir.Sink(counts, output, sink)
	return e
}

// Case 2: state no operator claims is refused, naming the UIDs, unless the
// restore may drop it.
func TestUnclaimedStateIsRefused(t *testing.T) {
	dir := t.TempDir()
	o := wcInput(t, dir)
	cancelAfter(t, o, 2)
	before := committedLines(t, o.Output)
	o.Restore = "latest"
	_, err := wcRenamed(o, "count-v2", "output-v2", 0, false).Execute(context.Background())
	for _, want := range []string{`"count" (keyed-process)`, `"output" (sink)`, "weir.UID", "--allow-non-restored-state"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("restore after renaming: %v; want it to mention %s", err, want)
		}
	}
	if after := committedLines(t, o.Output); len(after) != len(before) {
		t.Fatalf("the refused restore changed the output: %d lines, then %d", len(before), len(after))
	}
	// Allowed: the renamed operators start fresh; the old sink's files stay.
	if _, err := wcRenamed(o, "count-v2", "output-v2", 0, true).Execute(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Case 3: a source (or stateful operator) without state in the checkpoint
// starts fresh.
func TestNewSourceStartsFresh(t *testing.T) {
	dir := t.TempDir()
	ck := weir.CheckpointConfig{Interval: 5 * time.Millisecond, Dir: filepath.Join(dir, "ckpt")}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := weir.New(weir.Config{Job: "j", Checkpoint: ck, OnEvent: func(ev weir.JobEvent) {
		if ev.Kind == weir.EventCheckpointCompleted {
			cancel()
		}
	}})
	g, _ := newRateLimited(1000, 100000)
	weir.Sink(weir.Source(e, "a", g), "out", (&collect[int64]{}).sink())
	if _, err := e.Execute(ctx); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	e = weir.New(weir.Config{Job: "j", Checkpoint: ck, Restore: "latest"})
	var c collect[int64]
	a, b := weir.Source(e, "a", gen(t, 10, func(i int64) int64 { return i })), weir.Source(e, "b", gen(t, 10, func(i int64) int64 { return 1000 + i }))
	weir.Sink(weir.Union(a, "u", []*weir.Stream[int64]{b}), "out", c.sink())
	execute(t, e)
	var fromB []int64
	for _, v := range c.values() {
		if v >= 1000 {
			fromB = append(fromB, v)
		}
	}
	if len(fromB) != 10 {
		t.Fatalf("the new source emitted %d of its 10 records after the restore", len(fromB))
	}
}

// Case 4: a restore at another max parallelism is refused, naming both.
func TestMaxParallelismChangeIsRefused(t *testing.T) {
	dir := t.TempDir()
	o := wcInput(t, dir)
	cancelAfter(t, o, 2)
	o.Restore = "latest"
	_, err := wcRenamed(o, "count", "output", 64, false).Execute(context.Background())
	if err == nil || !strings.Contains(err.Error(), "max parallelism 128") || !strings.Contains(err.Error(), "max parallelism 64") {
		t.Fatalf("restore at max parallelism 64: %v", err)
	}
}

// Case 5: another job's checkpoint is refused, saying what differs.
func TestAnotherJobsCheckpointIsRefused(t *testing.T) {
	dir := t.TempDir()
	o := wcInput(t, dir)
	cancelAfter(t, o, 2)
	chks, _ := filepath.Glob(filepath.Join(dir, "ckpt", "wordcount", "chk-*"))
	e := weir.New(weir.Config{Job: "other", Restore: chks[len(chks)-1], Checkpoint: weir.CheckpointConfig{Dir: filepath.Join(dir, "ckpt")}})
	var c collect[int64]
	weir.Sink(weir.Source(e, "nums", gen(t, 10, func(i int64) int64 { return i })), "out", c.sink())
	_, err := e.Execute(context.Background())
	if err == nil || !strings.Contains(err.Error(), `belongs to job "wordcount", not "other"`) {
		t.Fatalf("restoring another job's checkpoint: %v (%d records)", err, len(c.values()))
	}
}

// metadataOf lists the completed checkpoints of the word count in dir.
func completedCheckpoints(dir string) []string {
	chks, _ := filepath.Glob(filepath.Join(dir, "ckpt", "wordcount", "chk-*", "_metadata"))
	slices.SortFunc(chks, func(a, b string) int { return len(a) - len(b) })
	for i := range chks {
		chks[i] = filepath.Dir(chks[i])
	}
	return chks
}

// Cases 6 and 9: after an explicit restore of an older checkpoint, a
// failover restores that checkpoint (not a later one of the previous run);
// the later checkpoints are rolled back, and the output is exactly-once.
func TestRestoreOfAnOlderCheckpoint(t *testing.T) {
	dir := t.TempDir()
	o := wcInput(t, dir)
	cancelAfter(t, o, 3)
	chks := completedCheckpoints(dir)
	if len(chks) != 3 {
		t.Fatalf("checkpoints %v", chks)
	}
	o.Restore = chks[0]
	var failed atomic.Bool
	o.BeforeCount = func(string) {
		if !failed.Swap(true) {
			panic("injected failure before any checkpoint of this run")
		}
	}
	o.Restart = weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: 3}
	var mu sync.Mutex
	var restored []int
	o.OnEvent = func(ev weir.JobEvent) {
		if ev.Kind == weir.EventRunning {
			mu.Lock()
			restored = append(restored, int(ev.RestoredFrom))
			mu.Unlock()
		}
	}
	var logs bytes.Buffer
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	res, err := executeErr(t, o)
	if err != nil {
		t.Fatal(err)
	}
	first := filepath.Base(chks[0])
	if res.Attempts != 2 || fmt.Sprint("chk-", restored[0]) != first || restored[1] != restored[0] {
		t.Fatalf("%d attempts restored from %v; want %s twice", res.Attempts, restored, first)
	}
	if rep := report(t, o); !rep.OK() {
		t.Fatalf("after restoring %s: %v", first, rep)
	}
	if !strings.Contains(logs.String(), "rolling back output committed after the restored checkpoint") {
		t.Fatalf("the log does not say what was rolled back:\n%s", logs.String())
	}
}

// Case 7: a rerun without --restore over an earlier run's checkpoints and
// output is refused; --fresh starts over and clears both.
func TestRerunOverAnEarlierRunIsRefused(t *testing.T) {
	dir := t.TempDir()
	o := wcInput(t, dir)
	cancelAfter(t, o, 2)
	before := committedLines(t, o.Output)
	_, err := executeErr(t, o)
	if !errors.Is(err, weir.ErrEarlierRun) || !strings.Contains(err.Error(), "--restore latest") || !strings.Contains(err.Error(), "--fresh") {
		t.Fatalf("a rerun over an earlier run: %v", err)
	}
	if after := committedLines(t, o.Output); len(after) != len(before) || len(completedCheckpoints(dir)) == 0 {
		t.Fatal("the refused rerun changed the output or the checkpoints")
	}
	o.Fresh = true
	res, err := executeErr(t, o)
	if err != nil {
		t.Fatal(err)
	}
	if rep := report(t, o); !rep.OK() || res.Attempts != 1 {
		t.Fatalf("after --fresh: %v in %d attempts", rep, res.Attempts)
	}
}

// Issue 19 (defect 4, gap 4): a checkpoint taken before a --fresh run, kept
// elsewhere as a savepoint would be, is refused afterwards: --fresh deleted
// the files its output builds on, and the restore would leave them missing.
// The refusal changes nothing, and the fresh run's own checkpoints restore.
func TestRestoreFromBeforeFreshIsRefused(t *testing.T) {
	dir := t.TempDir()
	o := wcInput(t, dir)
	cancelAfter(t, o, 2)
	chks := completedCheckpoints(dir)
	saved := filepath.Join(dir, "saved", filepath.Base(chks[len(chks)-1]))
	if err := os.CopyFS(saved, os.DirFS(chks[len(chks)-1])); err != nil {
		t.Fatal(err)
	}
	o.Fresh = true
	cancelAfter(t, o, 2)
	o.Fresh = false
	before := committedLines(t, o.Output)
	for _, from := range []string{saved, "latest"} {
		o.Restore = from
		_, err := executeErr(t, o)
		if from == "latest" {
			if err != nil {
				t.Fatalf("restore of the fresh run's latest checkpoint: %v", err)
			}
			break
		}
		if !errors.Is(err, weir.ErrStartedOver) || !operator.IsPermanent(err) || !strings.Contains(err.Error(), "--fresh") {
			t.Fatalf("restore of a checkpoint from before --fresh: %v, want a permanent weir.ErrStartedOver", err)
		}
		if after := committedLines(t, o.Output); !maps.Equal(after, before) {
			t.Fatal("the refused restore changed the output")
		}
	}
	if rep := report(t, o); !rep.OK() {
		t.Fatalf("after the fresh run and its restore: %v", rep)
	}
}

// Case 7, damaged metadata: when the only checkpoints are damaged, neither
// a plain start nor --restore latest falls back to the beginning.
func TestOnlyDamagedCheckpointsAreRefused(t *testing.T) {
	dir := t.TempDir()
	o := wcInput(t, dir)
	o.Checkpoint.Retained = 1
	cancelAfter(t, o, 2)
	chks := completedCheckpoints(dir)
	meta := filepath.Join(chks[len(chks)-1], "_metadata")
	data, _ := os.ReadFile(meta)
	data[len(data)/2] ^= 0x40
	os.WriteFile(meta, data, 0o644)
	for _, restore := range []string{"", "latest"} {
		o.Restore = restore
		_, err := executeErr(t, o)
		if err == nil || !strings.Contains(err.Error(), "--fresh") {
			t.Fatalf("restore %q over damaged metadata only: %v", restore, err)
		}
	}
}

// Case 8: two runs at once on the same directories: one fails at start,
// naming the holder; the other's output is exactly-once.
func TestTwoRunsAtOnce(t *testing.T) {
	dir := t.TempDir()
	o := wcInput(t, dir)
	var envs [2]*weir.Environment
	for i := range envs {
		var err error
		if envs[i], err = wordcount.Build(o); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var errs [2]error
	for i, e := range envs {
		wg.Go(func() { _, errs[i] = e.Execute(context.Background()) })
	}
	wg.Wait()
	failed := slices.IndexFunc(errs[:], func(err error) bool { return err != nil })
	if failed < 0 || errs[1-failed] != nil {
		t.Fatalf("errors %v; want exactly one run to fail", errs)
	}
	if err := errs[failed]; !strings.Contains(err.Error(), fmt.Sprintf("in use by process %d", os.Getpid())) {
		t.Fatalf("the second run's error does not name the holder: %v", err)
	}
	if rep := report(t, o); !rep.OK() {
		t.Fatal(rep)
	}
}

type noOnTimer struct{}

func (noOnTimer) Process(c *weir.KeyedContext[int64], v int64, out weir.Collector[int64]) error {
	c.RegisterTimer(c.Now())
	out.Collect(v)
	return nil
}

// Case 10: a function without OnTimer that registers a timer fails the job
// at once, saying why (it used to busy-loop its task).
func TestTimerWithoutOnTimerIsRefused(t *testing.T) {
	e := env(weir.Config{})
	out := weir.Process(weir.KeyBy(weir.Source(e, "n", gen(t, 50, func(i int64) int64 { return i })), func(v int64) int64 { return v }), "p",
		func() weir.KeyedProcessFunction[int64, int64, int64] { return noOnTimer{} })
	weir.Sink(out, "out", (&collect[int64]{}).sink())
	res, err := e.Execute(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no OnTimer method") || res.Attempts != 1 {
		t.Fatalf("%v after %d attempts", err, res.Attempts)
	}
}

type poison struct{ permanent bool }

func (p poison) Process(_ *weir.KeyedContext[int64], v int64, out weir.Collector[int64]) error {
	if v == 7 {
		err := errors.New("record 7 cannot be processed")
		if p.permanent {
			return weir.Permanent(err)
		}
		return err
	}
	out.Collect(v)
	return nil
}

// Case 14: an error marked permanent is not retried; a job that fails
// again after every restore gives up under the failure-rate strategy and
// says why.
func TestDeterministicFailuresAreNotRetried(t *testing.T) {
	for _, c := range []struct {
		permanent bool
		restart   weir.RestartStrategy
		attempts  int
		want      string
	}{
		{true, weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: 10}, 1, "a restart cannot fix it"},
		{false, weir.FailureRate{MaxFailures: 2, Interval: time.Minute, Delay: time.Millisecond}, 3, "failure rate: at most 2 failures within 1m0s"},
	} {
		e := env(weir.Config{Restart: c.restart})
		out := weir.Process(weir.KeyBy(weir.Source(e, "n", gen(t, 50, func(i int64) int64 { return i })), func(v int64) int64 { return v }), "p",
			func() weir.KeyedProcessFunction[int64, int64, int64] { return poison{c.permanent} })
		weir.Sink(out, "out", (&collect[int64]{}).sink())
		res, err := e.Execute(context.Background())
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "record 7 cannot be processed") || res.Attempts != c.attempts {
			t.Errorf("%v after %d attempts; want %q after %d", err, res.Attempts, c.want, c.attempts)
		}
	}
}
