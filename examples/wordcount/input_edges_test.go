package wordcount

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
)

// committedSorted returns the committed output lines of dir, sorted.
func committedSorted(t *testing.T, dir string) []string {
	t.Helper()
	var err error
	var lines []string
	for l := range CommittedLines(vfs.Default, dir, &err) {
		lines = append(lines, l)
	}
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(lines)
	return lines
}

func runToEnd(t *testing.T, o Options) {
	t.Helper()
	env, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := env.Execute(ctx); err != nil {
		t.Fatal(err)
	}
}

// verifyAgrees checks that weir verify's rerun of the job over in, at
// parallelism 1, agrees with the output it committed in out.
func verifyAgrees(t *testing.T, in, out, ck string) {
	t.Helper()
	env, err := Build(Options{Input: in, Output: out, Parallelism: 1, Checkpoint: weir.CheckpointConfig{Dir: ck}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := env.Verify(context.Background(), weir.VerifyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("verify disagrees with the run's output: %v", rep)
	}
}

// TestGrownFileIsReadUpToItsSizeWhenTaken: a file whose last line has no
// newline is appended to after the job took it (Build); its last line is
// read up to the size the file had then ("abc"), not through the appended
// bytes ("abcdef", found by an outside review, session 32).
func TestGrownFileIsReadUpToItsSizeWhenTaken(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("x abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	env, err := Build(Options{Input: in, Output: out, Parallelism: 1,
		Checkpoint: weir.CheckpointConfig{Interval: time.Second, Dir: filepath.Join(dir, "ckpt")}})
	if err != nil {
		t.Fatal(err)
	}
	// The file grows after the job took it (a writer appends).
	f, err := os.OpenFile(in, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("def more\n")
	f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := env.Execute(ctx); err != nil {
		t.Fatal(err)
	}
	got := committedSorted(t, out)
	want := []string{"abc\t1", "x\t1"}
	if !slices.Equal(got, want) {
		t.Fatalf("output %q, want %q (the file as it was when the job took it)", got, want)
	}
}

// TestVerifyAfterAnAppendToTheLastLine: after a finished run over "x abc"
// (no final newline), a writer appends to the file; verify's rerun reads
// the file as the run did, up to its size then, and agrees with the run
// (it read "abcdef" and reported the run's output as wrong before).
func TestVerifyAfterAnAppendToTheLastLine(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("x abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, ck := filepath.Join(dir, "out"), filepath.Join(dir, "ckpt")
	runToEnd(t, Options{Input: in, Output: out, Parallelism: 1,
		Checkpoint: weir.CheckpointConfig{Interval: time.Second, Dir: ck}})
	if got, want := committedSorted(t, out), []string{"abc\t1", "x\t1"}; !slices.Equal(got, want) {
		t.Fatalf("run's output %q, want %q", got, want)
	}
	f, err := os.OpenFile(in, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("def\n")
	f.Close()
	verifyAgrees(t, in, out, ck)
}

// TestSymlinkInTheGlobIsReadOnce: the glob matches a file and a symbolic
// link to it; the run reads the file once, as a restore and verify's rerun
// do (files are known by their resolved path). The run read it twice, and
// verify reported the run's output as wrong, before.
func TestSymlinkInTheGlobIsReadOnce(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "in"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "in", "a.txt"), []byte("x y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.txt", filepath.Join(dir, "in", "b.txt")); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "in", "*.txt")
	out, ck := filepath.Join(dir, "out"), filepath.Join(dir, "ckpt")
	runToEnd(t, Options{Input: in, Output: out, Parallelism: 1,
		Checkpoint: weir.CheckpointConfig{Interval: time.Second, Dir: ck}})
	if got, want := committedSorted(t, out), []string{"x\t1", "y\t1"}; !slices.Equal(got, want) {
		t.Fatalf("run's output %q, want %q: the file read once", got, want)
	}
	verifyAgrees(t, in, out, ck)
}

// TestInputMatchingTheCheckpointDirectoryIsRefused: an input glob that
// can match the files Weir keeps in the job's checkpoint directory ("d/*/*"
// with checkpoints in d: d/wordcount/.lock) is refused at Build, as one
// matching the output's files is: a resumed run read the lock file as a new
// input file and counted the process id in it as a word (found by an
// outside review, session 32). One that cannot reach it is taken.
func TestInputMatchingTheCheckpointDirectoryIsRefused(t *testing.T) {
	dir := t.TempDir()
	d := filepath.Join(dir, "d")
	if err := os.MkdirAll(filepath.Join(d, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "x", "a.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := Options{Input: filepath.Join(d, "*", "*"), Output: filepath.Join(dir, "out"), Parallelism: 1,
		Checkpoint: weir.CheckpointConfig{Interval: time.Second, Dir: d}}
	for _, ck := range []string{d, "file://" + d} { // file:// was taken for a URL, and not checked
		o.Checkpoint.Dir = ck
		_, err := Build(o)
		if err == nil || !strings.Contains(err.Error(), filepath.Join(d, "wordcount")) || !strings.Contains(err.Error(), "--checkpoint-dir") {
			t.Fatalf("Build with input %s and checkpoints in %s: %v, want a refusal naming %s and --checkpoint-dir", o.Input, ck, err, filepath.Join(d, "wordcount"))
		}
	}
	o.Checkpoint.Dir = d
	o.Input = filepath.Join(d, "x", "*")
	runToEnd(t, o)
	o.Restore = "latest"
	runToEnd(t, o)
	if got, want := committedSorted(t, o.Output), []string{"hello\t1"}; !slices.Equal(got, want) {
		t.Fatalf("output %q, want %q", got, want)
	}
}
