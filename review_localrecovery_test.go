package weir_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/weirstream/weir"
)

// Local recovery writes and sweeps only under its directory. With memory
// checkpoints (no checkpoint directory, which would refuse the name) a job
// named ".." is accepted, and its tasks' local copies go to
// <LocalRecoveryDir>/../<vertex>-<subtask>, beside the directory: the
// sweeps there delete files that are not Weir's.
func TestReviewLocalRecoveryStaysInItsDirectory(t *testing.T) {
	parent := t.TempDir()
	localDir := filepath.Join(parent, "local")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	completed := 0
	e := env(weir.Config{Job: "..", LocalRecovery: true, LocalRecoveryDir: localDir, OnEvent: func(ev weir.JobEvent) {
		if ev.Kind == weir.EventCheckpointCompleted {
			if completed++; completed == 3 {
				cancel()
			}
		}
	}})
	src, err := newRateLimited(2000, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	keyed := weir.KeyBy(weir.Source(e, "nums", src), func(v int64) int64 { return v % 50 })
	weir.Sink(weir.Process(keyed, "load", func() weir.KeyedProcessFunction[int64, int64, int64] { return &padded{} }), "drop",
		weir.SinkFunc(func(int64) error { return nil }))
	_, err = e.Execute(ctx)
	if err != nil && !errors.Is(err, context.Canceled) {
		// Refusing the job name (or local recovery with it) at start is a
		// fix too.
		t.Logf("refused: %v", err)
		return
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		if en.Name() != "local" {
			t.Errorf("local recovery wrote %s, outside its directory %s", filepath.Join(parent, en.Name()), localDir)
		}
	}
}
