package weir_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/examples/wordcount"
)

// TestFallbackKeepsRetainedCount: a run keeps the Retained newest
// completed checkpoints in storage. A start that falls back past a
// checkpoint whose state is missing deletes that checkpoint; the
// coordinator went on counting it as retained, and retention then deleted
// one it should keep (leaving fewer than Retained, so the next damaged
// checkpoint had nothing to fall back to). Found by an outside review
// (session 34).
func TestFallbackKeepsRetainedCount(t *testing.T) {
	dir := t.TempDir()
	o := wcInput(t, dir)
	o.Checkpoint.Retained = 3
	cancelAfter(t, o, 3)
	chks := completedCheckpoints(dir)
	if len(chks) != 3 {
		t.Fatalf("checkpoints %v", chks)
	}
	newest := strings.TrimPrefix(filepath.Base(chks[2]), "chk-")
	// Damage the newest: delete a shared file written for it.
	shared, _ := filepath.Glob(filepath.Join(dir, "ckpt", "wordcount", "shared", "*", newest+".*"))
	if len(shared) == 0 {
		t.Fatal("no shared file written for the newest checkpoint")
	}
	if err := os.Remove(shared[0]); err != nil {
		t.Fatal(err)
	}
	o.Restore = "latest"
	o.BeforeCount = wordcount.Paced(200)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	o.OnEvent = func(ev weir.JobEvent) {
		if ev.Kind == weir.EventCheckpointCompleted {
			if n++; n == 2 {
				cancel()
			}
		}
	}
	e, err := wordcount.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Execute(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("second run: %v", err)
	}
	after := completedCheckpoints(dir)
	var names []string
	for _, c := range after {
		names = append(names, filepath.Base(c))
	}
	if len(after) != 3 {
		t.Fatalf("after a fallback and 2 more checkpoints, storage holds %d completed checkpoints %v; want the 3 retained", len(after), names)
	}
}
