package file_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
)

// linesRun is a job that copies the lines of its input to an exactly-once
// file sink, at parallelism 2, checkpointing every 2 ms into dir/ckpt.
type linesRun struct {
	dir     string
	input   string // a pattern relative to dir
	restore string
	// cancelAtCheckpoint, when set, cancels the run once its first
	// checkpoint completed; the input is read slowly until then, so that
	// the checkpoint falls in the middle of it.
	cancelAtCheckpoint bool
	log                *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (r linesRun) execute(t *testing.T) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var completed atomic.Bool
	logger := slog.New(slog.DiscardHandler)
	if r.log != nil {
		logger = slog.New(slog.NewTextHandler(r.log, nil))
	}
	e := weir.New(weir.Config{Job: "lines", Parallelism: 2, Restore: r.restore, Logger: logger,
		Checkpoint: weir.CheckpointConfig{Interval: 2 * time.Millisecond, Dir: filepath.Join(r.dir, "ckpt")},
		OnEvent: func(ev weir.JobEvent) {
			if ev.Kind == weir.EventCheckpointCompleted && r.cancelAtCheckpoint {
				completed.Store(true)
				cancel()
			}
		}})
	lines, err := file.Lines(file.LinesConfig{Pattern: filepath.Join(r.dir, r.input), BatchLines: 16})
	if err != nil {
		return err
	}
	sink, err := file.Sink(file.SinkConfig[string]{Dir: filepath.Join(r.dir, "out"),
		Format: func(dst []byte, s string) []byte { return append(append(dst, s...), '\n') }})
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	paced := weir.Map(weir.Source(e, "lines", lines), "pace", func(s string) string {
		// Slows the first run until it is cancelled, whatever the
		// machine's speed; it does not synchronise anything.
		if r.cancelAtCheckpoint && !completed.Load() && n.Add(1)%10 == 0 {
			time.Sleep(time.Millisecond)
		}
		return s
	})
	weir.Sink(paced, "out", sink)
	_, err = e.Execute(ctx)
	return err
}

// writeLines writes n lines "name i" to dir/name and returns them.
func writeLines(t *testing.T, dir, name string, n int) []string {
	t.Helper()
	var b strings.Builder
	var want []string
	for i := range n {
		l := fmt.Sprintf("%s %d", name, i)
		want = append(want, l)
		b.WriteString(l + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return want
}

// committedCounts counts the lines of the files the sink committed.
func committedCounts(t *testing.T, dir string) map[string]int {
	t.Helper()
	names, err := os.ReadDir(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for _, n := range names {
		if strings.HasPrefix(n.Name(), ".") {
			continue
		}
		f, err := os.Open(filepath.Join(dir, "out", n.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			m[sc.Text()]++
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func total(m map[string]int) (n int) {
	for _, c := range m {
		n += c
	}
	return n
}

// checkOnce fails unless the committed output holds every line of want
// exactly once, and nothing else.
func checkOnce(t *testing.T, got map[string]int, want ...[]string) {
	t.Helper()
	n := 0
	for _, w := range want {
		n += len(w)
		for _, l := range w {
			if got[l] != 1 {
				t.Errorf("%q committed %d times, want once", l, got[l])
			}
		}
	}
	if total(got) != n {
		t.Errorf("%d lines committed, want %d", total(got), n)
	}
}

// cancelMidway runs r until its first checkpoint completed, and requires
// that it stopped part-way through the file whose lines are unfinished.
func cancelMidway(t *testing.T, r linesRun, unfinished []string) {
	t.Helper()
	r.cancelAtCheckpoint = true
	if err := r.execute(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("first run: %v; want it cancelled at its first checkpoint", err)
	}
	got, n := committedCounts(t, r.dir), 0
	for _, l := range unfinished {
		n += got[l]
	}
	if n >= len(unfinished) {
		t.Fatalf("the first run committed %d lines of %d of the file; its checkpoint must fall in the middle of it", n, len(unfinished))
	}
}

// TestResumeWithAWidenedInputReadsTheNewFiles is issue 19's defect 7: run
// with --input part-00.txt, Ctrl-C, resume with --input 'part-0[01].txt'
// --restore latest. part-01.txt was never read, and the run ended with
// success. Now part-00.txt resumes where the checkpoint left it, and
// part-01.txt, which the checkpoint does not know, is read from its start:
// every line once, and a log line says so.
func TestResumeWithAWidenedInputReadsTheNewFiles(t *testing.T) {
	dir := t.TempDir()
	first := writeLines(t, dir, "part-00.txt", 20_000)
	second := writeLines(t, dir, "part-01.txt", 1_000)
	cancelMidway(t, linesRun{dir: dir, input: "part-00.txt"}, first)

	log := &syncBuffer{}
	if err := (linesRun{dir: dir, input: "part-0[01].txt", restore: "latest", log: log}).execute(t); err != nil {
		t.Fatalf("resumed run: %v", err)
	}
	checkOnce(t, committedCounts(t, dir), first, second)
	for _, want := range []string{"the input matches files the checkpoint did not read: reading them from the start", "files=1 names=" + filepath.Join(dir, "part-01.txt")} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the resumed run's log does not say %q:\n%s", want, log)
		}
	}
}

// TestResumeWithoutAnUnreadFileIsRefused: an input that no longer matches
// a file the checkpoint has not read to the end (narrowed, or the file
// deleted) is refused at once, naming the file and both inputs, and changes
// no output; restoring with the old input then reads every line once.
func TestResumeWithoutAnUnreadFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	first := writeLines(t, dir, "part-00.txt", 20_000)
	second := writeLines(t, dir, "part-01.txt", 20_000)
	cancelMidway(t, linesRun{dir: dir, input: "part-0[01].txt"}, first)
	before := committedCounts(t, dir)

	err := (linesRun{dir: dir, input: "part-01.txt", restore: "latest"}).execute(t)
	if !errors.Is(err, file.ErrUnreadInputDropped) {
		t.Fatalf("restore with a narrowed input: %v; want ErrUnreadInputDropped", err)
	}
	for _, want := range []string{
		"input " + filepath.Join(dir, "part-01.txt") + " no longer matches",
		": " + filepath.Join(dir, "part-00.txt") + " (the checkpoint was taken reading input " + filepath.Join(dir, "part-0[01].txt") + ")",
		"such as " + filepath.Join(dir, "part-0[01].txt"),
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v\ndoes not say %q", err, want)
		}
	}
	if after := committedCounts(t, dir); total(after) != total(before) {
		t.Fatalf("the refused restore changed the output: %d lines, then %d", total(before), total(after))
	}

	if err := (linesRun{dir: dir, input: "part-0[01].txt", restore: "latest"}).execute(t); err != nil {
		t.Fatalf("restore with the old input: %v", err)
	}
	checkOnce(t, committedCounts(t, dir), first, second)
}

// TestResumeAFinishedRunWithNewFiles: a run that read its input to the end
// is restored from its final checkpoint with a glob that now also matches
// a new file: the new file is read, the finished one is not read again.
func TestResumeAFinishedRunWithNewFiles(t *testing.T) {
	dir := t.TempDir()
	first := writeLines(t, dir, "part-00.txt", 1_000)
	if err := (linesRun{dir: dir, input: "part-0*.txt"}).execute(t); err != nil {
		t.Fatal(err)
	}
	checkOnce(t, committedCounts(t, dir), first)
	second := writeLines(t, dir, "part-01.txt", 1_000)
	if err := (linesRun{dir: dir, input: "part-0*.txt", restore: "latest"}).execute(t); err != nil {
		t.Fatalf("resumed run: %v", err)
	}
	checkOnce(t, committedCounts(t, dir), first, second)
}
