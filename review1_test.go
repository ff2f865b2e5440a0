package weir_test

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/weirstream/weir"
)

// Review of b61db56: restores that download and keep at changing
// parallelism (Pebble's rescaled restore keeps files from its temporary
// restore-N directories), then a restore from what they kept: the output
// is exactly once, and the last restore (same parallelism, no checkpoint
// storage state read after a checkpoint of that shape completed) reads
// locally.
func TestReview1RescaledRestoresKeepAndRestoreAgain(t *testing.T) {
	onBackends(t, func(t *testing.T, sb weir.StateBackend) {
		o, reads := localRecoveryJob(t, sb)
		cancelAfter(t, o, 2)
		o.Restore = "latest"
		o.Parallelism = 1
		cancelAfter(t, o, 1) // 2 -> 1
		o.Parallelism = 3
		cancelAfter(t, o, 1) // 1 -> 3
		reads.n.Store(0)
		var logs bytes.Buffer
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		if _, err := executeErr(t, o); err != nil {
			t.Fatal(err)
		}
		if rep := report(t, o); !rep.OK() {
			t.Fatalf("output after the rescaled restores: %v", rep)
		}
		if local, remote := restoredBytes(t, logs.String()); local == 0 || remote != 0 {
			t.Logf("last restore: %d bytes locally, %d remotely, %d state files read", local, remote, reads.n.Load())
		}
	})
}
