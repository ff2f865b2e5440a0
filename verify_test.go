package weir_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/connector/generator"
	"github.com/weirstream/weir/examples/wordcount"
	"github.com/weirstream/weir/operator"
)

// verifyWC runs Verify on the word count o describes, with the word as
// the key of a record.
func verifyWC(t *testing.T, o wordcount.Options) weir.VerifyReport {
	t.Helper()
	o.OnEvent, o.BeforeCount = nil, nil
	e, err := wordcount.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
	defer cancel()
	rep, err := e.Verify(ctx, weir.VerifyConfig{Key: func(_ string, rec []byte) string {
		w, _, _ := bytes.Cut(rec, []byte("\t"))
		return string(w)
	}})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestVerifyAJobStoppedMidway: the word count cancelled after three
// checkpoints, with some of its input read and the last transaction
// perhaps still pending, verifies clean: the rerun reads exactly what the
// latest checkpoint consumed, at another parallelism too.
func TestVerifyAJobStoppedMidway(t *testing.T) {
	o := wcInput(t, t.TempDir())
	cancelAfter(t, o, 3)
	for _, p := range []int{2, 3, 1} {
		o.Parallelism = p
		rep := verifyWC(t, o)
		if !rep.OK() || len(rep.Sinks) != 1 || rep.Sinks[0].Committed == 0 {
			t.Fatalf("parallelism %d: %s", p, rep)
		}
		t.Logf("parallelism %d: %s", p, rep)
		if rep.Read == 0 || rep.Read >= 200_000 {
			t.Fatalf("parallelism %d: the rerun read %d lines, want some of the 200000 (the job was cancelled midway)", p, rep.Read)
		}
	}
}

// TestVerifyFindsTamperedOutput: a finished word count verifies clean;
// with one committed line removed, one duplicated and one changed, the
// report names those three, and nothing else.
func TestVerifyFindsTamperedOutput(t *testing.T) {
	o := wcInput(t, t.TempDir())
	e, err := wordcount.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	execute(t, e)
	rep := verifyWC(t, o)
	if !rep.OK() || rep.Read != 200_000 || rep.Sinks[0].Committed != 400_000 {
		t.Fatalf("untouched output: %s", rep)
	}

	files, err := filepath.Glob(filepath.Join(o.Output, "part-*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no committed files in %s (%v)", o.Output, err)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	lines = lines[:len(lines)-1] // after the last newline
	if len(lines) < 3 {
		t.Fatalf("%s has %d lines", files[0], len(lines))
	}
	removed, duplicated, changed := lines[0], lines[1], lines[2]
	word, _, _ := strings.Cut(changed, "\t")
	lines = slices.Concat([]string{duplicated, duplicated, word + "\t999999999\n"}, lines[3:])
	if err := os.WriteFile(files[0], []byte(strings.Join(lines, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	rep = verifyWC(t, o)
	v := rep.Sinks[0]
	want := weir.SinkVerdict{Sink: v.Sink, Rerun: 400_000, Committed: 400_000,
		Missing:    []weir.RecordCount{{Record: removed, Times: 1}},
		Duplicated: []weir.RecordCount{{Record: duplicated, Times: 1}},
		Changed:    []weir.ChangedRecord{{Key: word, Committed: word + "\t999999999\n", Rerun: changed}},
	}
	if rep.OK() || !equalVerdicts(v, want) {
		t.Fatalf("tampered output: got\n%s\nwant %+v", rep, want)
	}
	for _, s := range []string{"MISMATCH", "1 changed, 1 missing, 1 duplicated, 0 unexpected", word} {
		if !strings.Contains(rep.String(), s) {
			t.Errorf("the report does not say %q:\n%s", s, rep)
		}
	}
}

func equalVerdicts(a, b weir.SinkVerdict) bool {
	return a.Sink == b.Sink && a.Rerun == b.Rerun && a.Committed == b.Committed &&
		slices.Equal(a.Missing, b.Missing) && slices.Equal(a.Duplicated, b.Duplicated) &&
		slices.Equal(a.Unexpected, b.Unexpected) && slices.Equal(a.Changed, b.Changed)
}

// TestVerifyRefusesWhatARerunCannotReproduce: a job with a source that
// cannot rewind, an operator marked non-deterministic, or
// processing-time windows is refused with an error that says why, never
// verified.
func TestVerifyRefusesWhatARerunCannotReproduce(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("a\nb\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lines, err := file.Lines(file.LinesConfig{Pattern: in})
	if err != nil {
		t.Fatal(err)
	}
	build := func(t *testing.T, shape, dir string) *weir.Environment {
		sink, err := file.Sink(file.SinkConfig[string]{Dir: filepath.Join(dir, "out"), Format: lineFormat})
		if err != nil {
			t.Fatal(err)
		}
		e := weir.New(weir.Config{Checkpoint: weir.CheckpointConfig{Interval: 5 * time.Millisecond, Dir: filepath.Join(dir, "ckpt")}})
		var s *weir.Stream[string]
		switch shape {
		case "generator":
			s = weir.Map(weir.Source(e, "numbers", gen(t, 0, func(i int64) int64 { return i })), "text", func(int64) string { return "n" })
		case "funcsink":
			s = weir.Source(e, "lines", lines)
		case "idle":
			s = weir.Source(e, "lines", lines, weir.Watermarks(weir.Monotonous(func(string) time.Time { return time.UnixMilli(0) }).WithIdleness(time.Second)))
		case "marked":
			s = weir.Map(weir.Source(e, "lines", lines), "stamp", func(l string) string { return l + time.Now().String() }, weir.NonDeterministic())
		case "clock":
			ks := weir.KeyBy(weir.Source(e, "lines", lines), func(l string) string { return l })
			w := weir.WindowReduce(weir.Window(ks, weir.Tumbling(time.Hour).ProcessingTime()), "hourly", func(a, _ string) string { return a })
			s = weir.Map(w, "value", func(r weir.WindowResult[string, string]) string { return r.Value })
		}
		if shape == "funcsink" {
			weir.Sink(s, "out", weir.SinkFunc(func(string) error { return nil }))
			return e
		}
		weir.Sink(s, "out", sink)
		return e
	}
	for shape, says := range map[string]string{
		"generator": `source "numbers": an unbounded generator (Count 0) cannot be rewound`,
		"marked":    `operator "stamp" is marked non-deterministic`,
		"funcsink":  `sink "out": its committed output cannot be read back`,
		"idle":      `operator "lines" marks splits idle after 1s without records, by the clock`,
	} {
		_, err := build(t, shape, t.TempDir()).Verify(context.Background(), weir.VerifyConfig{})
		if err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v, want an error saying %s", shape, err, says)
		}
	}
	// Processing-time windows register their timers as records come: the
	// rerun fails at the first.
	clock := t.TempDir()
	execute(t, build(t, "clock", clock))
	_, err = build(t, "clock", clock).Verify(context.Background(), weir.VerifyConfig{})
	if err == nil || !strings.Contains(err.Error(), "processing-time timer") {
		t.Errorf("processing-time windows: %v, want an error about their processing-time timers", err)
	}
	var missing error
	_, missing = weir.New(weir.Config{}).Verify(context.Background(), weir.VerifyConfig{})
	if missing == nil || errors.Is(missing, context.Canceled) {
		t.Errorf("a job with nothing: %v, want an error", missing)
	}
}

// TestVerifyTellsSinksApart: of two sinks of one job, the one whose
// output lost a line is reported, with that line; the other matches, with
// its own count.
func TestVerifyTellsSinksApart(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	var b strings.Builder
	for i := range 1000 {
		b.WriteString(strings.Repeat("x", i%7) + "\n")
	}
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	build := func() *weir.Environment {
		lines, err := file.Lines(file.LinesConfig{Pattern: in})
		if err != nil {
			t.Fatal(err)
		}
		e := weir.New(weir.Config{Parallelism: 2, Checkpoint: weir.CheckpointConfig{Interval: 5 * time.Millisecond, Dir: filepath.Join(dir, "ckpt")}})
		s := weir.Source(e, "lines", lines)
		for _, name := range []string{"a", "b"} {
			sink, err := file.Sink(file.SinkConfig[string]{Dir: filepath.Join(dir, name), Format: lineFormat})
			if err != nil {
				t.Fatal(err)
			}
			weir.Sink(weir.Map(s, "to "+name, func(l string) string { return name + l }), name, sink)
		}
		return e
	}
	execute(t, build())
	files, _ := filepath.Glob(filepath.Join(dir, "b", "part-*"))
	cut := false
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(append([]byte("\n"), body...), []byte("\nbxxx\n")); i >= 0 && !cut {
			cut = true
			if err := os.WriteFile(f, slices.Concat(body[:i], body[i+5:]), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !cut {
		t.Fatalf("no committed file of b holds the line bxxx: %v", files)
	}
	rep, err := build().Verify(context.Background(), weir.VerifyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	want := []weir.SinkVerdict{
		{Sink: "a", Rerun: 1000, Committed: 1000},
		{Sink: "b", Rerun: 1000, Committed: 999, Missing: []weir.RecordCount{{Record: "bxxx\n", Times: 1}}},
	}
	if len(rep.Sinks) != 2 || !equalVerdicts(rep.Sinks[0], want[0]) || !equalVerdicts(rep.Sinks[1], want[1]) {
		t.Fatalf("got\n%s\nwant %+v", rep, want)
	}
}

// TestVerifyGeneratorStoppedMidway: a job reading a rate-limited generator,
// cancelled after two checkpoints, verifies clean, its rerun at another
// parallelism (the strides of the checkpoint dealt anew) and without the
// rate limit; with a Make that differs (a planted bug in the rerun's
// input), the difference is found.
func TestVerifyGeneratorStoppedMidway(t *testing.T) {
	dir := t.TempDir()
	build := func(p int, mk func(int64) string, onEvent func(weir.JobEvent)) *weir.Environment {
		src, err := generator.New(generator.Config[string]{Count: 1_000_000, RatePerSecond: 20_000, Make: mk})
		if err != nil {
			t.Fatal(err)
		}
		sink, err := file.Sink(file.SinkConfig[string]{Dir: filepath.Join(dir, "out"), Format: lineFormat})
		if err != nil {
			t.Fatal(err)
		}
		e := weir.New(weir.Config{Job: "gen", Parallelism: p, OnEvent: onEvent, Checkpoint: weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: filepath.Join(dir, "ckpt")}})
		weir.Sink(weir.Source(e, "numbers", src), "out", sink)
		return e
	}
	mk := func(i int64) string { return fmt.Sprint("n", i) }
	ctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
	defer cancel()
	n := 0
	stop, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	e := build(2, mk, func(ev weir.JobEvent) {
		if ev.Kind == weir.EventCheckpointCompleted {
			if n++; n == 2 {
				cancelRun()
			}
		}
	})
	if _, err := e.Execute(stop); !errors.Is(err, context.Canceled) {
		t.Fatalf("the run: %v (the input must outlast two checkpoints)", err)
	}
	rep, err := build(3, mk, nil).Verify(ctx, weir.VerifyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Read == 0 || rep.Read >= 1_000_000 || rep.Sinks[0].Committed != rep.Read {
		t.Fatalf("%s", rep)
	}
	rep, err = build(3, func(i int64) string {
		if i == 5 {
			return "five"
		}
		return mk(i)
	}, nil).Verify(ctx, weir.VerifyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	v := rep.Sinks[0]
	if rep.OK() || !slices.Equal(v.Missing, []weir.RecordCount{{Record: "five\n", Times: 1}}) || !slices.Equal(v.Unexpected, []weir.RecordCount{{Record: "n5\n", Times: 1}}) {
		t.Fatalf("a rerun that makes record 5 differently: %s", rep)
	}
}

// TestMainVerify: a job program's verify command finds the output of its
// run to match; with a committed line changed, it fails with the
// mismatch.
func TestMainVerify(t *testing.T) {
	dir := t.TempDir()
	build := func(env *weir.Environment) error {
		src, err := generator.New(generator.Config[int64]{Count: 5_000, Make: func(i int64) int64 { return i }})
		if err != nil {
			return err
		}
		sink, err := file.Sink(file.SinkConfig[string]{Dir: filepath.Join(dir, "out"), Format: lineFormat})
		if err != nil {
			return err
		}
		weir.Sink(weir.Map(weir.Source(env, "numbers", src), "text", func(i int64) string { return fmt.Sprint(i % 100) }), "out", sink)
		return nil
	}
	ckpt := filepath.Join(dir, "ckpt")
	cfg := weir.Config{Job: "numbers"}
	if err := weir.RunMain(context.Background(), []string{"run", "--checkpoint-dir", ckpt, "--parallelism", "2", "--checkpoint-interval", "10ms", "--log-level", "warn"}, cfg, build); err != nil {
		t.Fatal(err)
	}
	verify := []string{"verify", "--checkpoint-dir", ckpt, "--parallelism", "3", "--log-level", "warn"}
	if err := weir.RunMain(context.Background(), verify, cfg, build); err != nil {
		t.Fatalf("verify of an untouched run: %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "out", "part-*"))
	if len(files) == 0 {
		t.Fatal("no committed output")
	}
	body, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files[0], append([]byte("changed\n"), body...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := weir.RunMain(context.Background(), verify, cfg, build); err == nil || !strings.Contains(err.Error(), "differs") || strings.Contains(err.Error(), "not verified") {
		t.Fatalf("verify of output with a line added: %v, want the mismatch", err)
	}
	// Not verified (exit status 2 from Main), not a mismatch:
	nothing := []string{"verify", "--checkpoint-dir", filepath.Join(dir, "nowhere"), "--log-level", "warn"}
	if err := weir.RunMain(context.Background(), nothing, cfg, build); err == nil || !strings.Contains(err.Error(), "not verified") {
		t.Fatalf("verify without checkpoints: %v, want it not verified", err)
	}
}

// TestVerifyEventTimeStoppedMidway: windows and event-time timers into
// three sinks of one directory, cancelled once some results are committed:
// the rerun fires exactly the windows and timers the job had fired at the
// checkpoint (its event time stops at the operators' watermarks there),
// at another parallelism, on each backend.
func TestVerifyEventTimeStoppedMidway(t *testing.T) {
	onBackends(t, func(t *testing.T, sb weir.StateBackend) {
		dir := t.TempDir()
		out := filepath.Join(dir, "out")
		cfg := eventTimeConfig(sb)
		cfg.Checkpoint.Dir = filepath.Join(dir, "ckpt")
		ctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
		defer cancel()
		run, stop := context.WithCancel(ctx)
		defer stop()
		cfg.OnEvent = func(ev weir.JobEvent) {
			if files, _ := filepath.Glob(filepath.Join(out, "part-*")); ev.Kind == weir.EventCheckpointCompleted && len(files) > 0 {
				stop()
			}
		}
		if _, err := windowJob(t, cfg, out, true, nil).Execute(run); !errors.Is(err, context.Canceled) {
			t.Fatalf("the run: %v (the input must outlast the first results)", err)
		}
		cfg.OnEvent, cfg.Parallelism = nil, 3
		rep, err := windowJob(t, cfg, out, false, nil).Verify(ctx, weir.VerifyConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var committed int64
		for _, v := range rep.Sinks {
			committed += v.Committed
		}
		if !rep.OK() || len(rep.Sinks) != 3 || committed == 0 || rep.Read >= 20_000 {
			t.Fatalf("%s", rep)
		}
	})
}

// TestVerifyTwoRerunsThatDisagreeAreNotAMatch: a job whose output differs
// from run to run (here its first rerun, by a planted counter) is not
// reported a match because its second rerun, the record-by-record one,
// happens to equal the committed output: the two reruns disagree, and
// Verify says so.
func TestVerifyTwoRerunsThatDisagreeAreNotAMatch(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("a\nb\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	build := func() *weir.Environment {
		lines, err := file.Lines(file.LinesConfig{Pattern: in})
		if err != nil {
			t.Fatal(err)
		}
		sink, err := file.Sink(file.SinkConfig[string]{Dir: filepath.Join(dir, "out"), Format: lineFormat})
		if err != nil {
			t.Fatal(err)
		}
		e := weir.New(weir.Config{Checkpoint: weir.CheckpointConfig{Interval: 5 * time.Millisecond, Dir: filepath.Join(dir, "ckpt")}})
		weir.Sink(weir.Map(weir.Source(e, "lines", lines), "tag", func(l string) string {
			if n := calls.Add(1); n > 3 && n <= 6 { // the first rerun's
				return l + "!"
			}
			return l
		}), "out", sink)
		return e
	}
	execute(t, build())
	rep, err := build().Verify(context.Background(), weir.VerifyConfig{})
	if err == nil || !strings.Contains(err.Error(), "two reruns") {
		t.Fatalf("a job whose reruns disagree: %v, want an error saying so; report:\n%s", err, rep)
	}
}

// TestVerifyRefusesOutputOfAnotherRun: an output directory that a run
// started over (--fresh, with other checkpoints) has rewritten is not
// compared with the first run's checkpoint: Verify says whose it is.
func TestVerifyRefusesOutputOfAnotherRun(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("a\nb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	build := func(ckpt string, fresh bool) *weir.Environment {
		lines, err := file.Lines(file.LinesConfig{Pattern: in})
		if err != nil {
			t.Fatal(err)
		}
		sink, err := file.Sink(file.SinkConfig[string]{Dir: filepath.Join(dir, "out"), Format: lineFormat})
		if err != nil {
			t.Fatal(err)
		}
		e := weir.New(weir.Config{Fresh: fresh, Checkpoint: weir.CheckpointConfig{Interval: 5 * time.Millisecond, Dir: filepath.Join(dir, ckpt)}})
		weir.Sink(weir.Source(e, "lines", lines), "out", sink)
		return e
	}
	execute(t, build("first", false))
	execute(t, build("second", true))
	if rep, err := build("second", false).Verify(context.Background(), weir.VerifyConfig{}); err != nil || !rep.OK() {
		t.Fatalf("the second run's own checkpoints: %v\n%s", err, rep)
	}
	_, err := build("first", false).Verify(context.Background(), weir.VerifyConfig{})
	if err == nil || !strings.Contains(err.Error(), "holds the output of another run") {
		t.Fatalf("the first run's checkpoints against the second run's output: %v, want a refusal", err)
	}
}

// movingSink is a sink whose committed output a test makes up: Committed
// calls during, then reads back what it was given.
type movingSink struct {
	operator.Base
	committed []string
	during    func()
}

func (s *movingSink) Write(string) error                   { return nil }
func (s *movingSink) Records(v string, f func(rec []byte)) { f([]byte(v)) }
func (s *movingSink) Committed(_ *operator.Context, f func(rec []byte)) error {
	s.during()
	for _, r := range s.committed {
		f([]byte(r))
	}
	return nil
}

// TestVerifyAMismatchWhileTheJobMovesOnIsNotReported: a running job that
// completes a checkpoint while verify reads its output back may have
// committed output the read counts (a Kafka sink's producer ids new since
// the checkpoint verify took); a mismatch is then an error saying so,
// not a mismatch.
func TestVerifyAMismatchWhileTheJobMovesOnIsNotReported(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
	defer cancel()
	build := func(restore string, sink *movingSink, onEvent func(weir.JobEvent)) *weir.Environment {
		src, err := generator.New(generator.Config[string]{Count: 1_000_000, RatePerSecond: 20_000, Make: func(i int64) string { return fmt.Sprint(i) }})
		if err != nil {
			t.Fatal(err)
		}
		e := weir.New(weir.Config{Job: "moving", Restore: restore, OnEvent: onEvent, Checkpoint: weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: filepath.Join(dir, "ckpt")}})
		weir.Sink(weir.Source(e, "numbers", src), "out", func() weir.SinkWriter[string] { return sink })
		return e
	}
	runOneMore := func(restore string, checkpoints int) {
		stop, cancelRun := context.WithCancel(ctx)
		defer cancelRun()
		n := 0
		e := build(restore, &movingSink{}, func(ev weir.JobEvent) {
			if ev.Kind == weir.EventCheckpointCompleted {
				if n++; n == checkpoints {
					cancelRun()
				}
			}
		})
		if _, err := e.Execute(stop); !errors.Is(err, context.Canceled) {
			t.Errorf("the run: %v", err)
		}
	}
	runOneMore("", 2)
	var once sync.Once
	sink := &movingSink{committed: []string{"made up"}, during: func() { once.Do(func() { runOneMore("latest", 1) }) }}
	rep, err := build("", sink, nil).Verify(ctx, weir.VerifyConfig{})
	if err == nil || !strings.Contains(err.Error(), "completed checkpoint") {
		t.Fatalf("verify while the job completed a checkpoint, with a mismatch: %v\n%s", err, rep)
	}
	// Without the job moving, the same mismatch is reported as one.
	sink = &movingSink{committed: []string{"made up"}, during: func() {}}
	if rep, err = build("", sink, nil).Verify(ctx, weir.VerifyConfig{}); err != nil || rep.OK() {
		t.Fatalf("verify of a stopped job with a mismatch: %v\n%s", err, rep)
	}
}
