package wordcount

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

// TestInputThatCannotMatchCheckpointFilesIsAccepted: the input
// <d>/*/*/*.txt reaches <d>/ckpt/wordcount/ only with "*.txt", a name no
// file the job keeps there has (.lock, chk-<id>, shared, ...): it is taken
// (the first check compared the pattern's elements only up to the
// directory's depth, and refused it; found by an outside review of
// session 32's fixes).
func TestInputThatCannotMatchCheckpointFilesIsAccepted(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "logs", "day1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "logs", "day1", "a.txt"), []byte("x y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(dir, "ckpt")
	out := filepath.Join(dir, "out")
	runToEnd(t, Options{Input: filepath.Join(dir, "*", "*", "*.txt"), Output: out, Parallelism: 1,
		Checkpoint: weir.CheckpointConfig{Interval: time.Second, Dir: ck}})
	got := committedSorted(t, out)
	if want := []string{"x\t1", "y\t1"}; !slices.Equal(got, want) {
		t.Fatalf("output %q, want %q", got, want)
	}
}

// TestInputMatchingTheCheckpointDirectoryThroughASymlinkIsRefused: the
// checkpoint directory <d>/data/ck is a symbolic link (to <d>/fast/ck),
// and the input <d>/data/*/*/* reaches <d>/data/ck/wordcount/.lock through
// it: refused (the check compared the pattern with the link's target only,
// once it existed, and a resumed run read the lock file as input).
func TestInputMatchingTheCheckpointDirectoryThroughASymlinkIsRefused(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	for _, d := range []string{filepath.Join(data, "logs", "day1"), filepath.Join(dir, "fast", "ck")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(data, "logs", "day1", "a.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(data, "ck")
	if err := os.Symlink(filepath.Join(dir, "fast", "ck"), ck); err != nil {
		t.Fatal(err)
	}
	// A first run reads data/logs/*/* (the checkpoint directory exists
	// from then on); the resumed run's input is widened to data/*/*/*.
	o := Options{Input: filepath.Join(data, "logs", "*", "*"), Output: filepath.Join(dir, "out"), Parallelism: 1,
		Checkpoint: weir.CheckpointConfig{Interval: time.Second, Dir: ck}}
	runToEnd(t, o)
	o.Input, o.Restore = filepath.Join(data, "*", "*", "*"), "latest"
	if _, err := Build(o); err == nil || !strings.Contains(err.Error(), "checkpoint directory") {
		t.Fatalf("input %s with checkpoints in %s (a symbolic link): %v, want a refusal naming the checkpoint directory", o.Input, ck, err)
	}
}
