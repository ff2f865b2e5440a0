package wordcount

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

// TestFirstRunInputMatchingLinkedCheckpointDirByTargetIsRefused: the
// checkpoint directory <d>/data/ck is a link to <d>/fast/ck, and the input
// <d>/fast/*/*/* reaches <d>/fast/ck/wordcount/.lock by the link's target.
// The first run (job directory not yet created) refuses it, as a resumed
// run does: it was taken, and the job it started could never be resumed
// (found by an outside review, session 32).
func TestFirstRunInputMatchingLinkedCheckpointDirByTargetIsRefused(t *testing.T) {
	dir := t.TempDir()
	fast := filepath.Join(dir, "fast")
	for _, d := range []string{filepath.Join(fast, "logs", "day1"), filepath.Join(fast, "ck"), filepath.Join(dir, "data")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(fast, "logs", "day1", "a.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(dir, "data", "ck")
	if err := os.Symlink(filepath.Join(fast, "ck"), ck); err != nil {
		t.Fatal(err)
	}
	o := Options{Input: filepath.Join(fast, "*", "*", "*"), Output: filepath.Join(dir, "out"), Parallelism: 1,
		Checkpoint: weir.CheckpointConfig{Interval: time.Second, Dir: ck}}
	_, err := Build(o)
	if err == nil || !strings.Contains(err.Error(), "checkpoint directory") {
		t.Fatalf("first run, input %s with checkpoints in %s (a link to %s/ck): %v, want a refusal naming the checkpoint directory", o.Input, ck, fast, err)
	}
}
