package local_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/state/local"
)

// Checkpoint 3 is taken before checkpoint 2 completes, so an incremental
// heap backend bases it on checkpoint 1 (the newest completed when it was
// taken) and references checkpoint 1's shared file, which checkpoint 2
// (having rewritten those chains whole) does not. When 2 completes while
// 3's asynchronous part is still writing, the sweep keeps "those of
// checkpoints taken since" only as far as they were written or
// referenced so far: 3's reuse of checkpoint 1's file is recorded only at
// the end of its asynchronous part (Referenced), and the sweep has
// already deleted that file. After 3 completes, a restore from 3 on this
// machine downloads what it should have read locally.
func TestReviewSweepKeepsFilesAnInFlightCheckpointReuses(t *testing.T) {
	r, s := setup(t)
	lt := s.Task("job", "v", 0)
	one := snapshot(t, r, lt, 1, "one", "one shared")
	lt.Complete(1)
	snapshot(t, r, lt, 2, "two", "two shared") // rewrote everything: no reuse of 1
	// Checkpoint 3's asynchronous part has written its own piece and is
	// about to return handles that reuse checkpoint 1's shared file.
	if err := r.Reserve(3); err != nil {
		t.Fatal(err)
	}
	h3, err := lt.Writer(3, r.writer(3)).Write(checkpoint.Handle{Operator: "op", Kind: "keyed"}, []byte("three"))
	if err != nil {
		t.Fatal(err)
	}
	lt.Complete(2) // arrives meanwhile
	three := []checkpoint.Handle{h3, one[1]}
	lt.Referenced(3, three)
	lt.Complete(3)

	next := s.Task("job", "v", 0)
	restore(t, r, next, three, "three", "one shared")
	if got := next.Restored(); got.RemotePieces != 0 {
		t.Fatalf("restore of checkpoint 3 on the machine that wrote it read %d pieces (%d bytes) from checkpoint storage, want 0 (local copy of %s swept while 3 was in flight)",
			got.RemotePieces, got.RemoteBytes, one[1].Path)
	}
}

// A task's directory must stay inside the store's, whatever the job's name:
// Store.Task escapes names with url.PathEscape, which leaves "." alone, so
// a job named ".." puts its tasks' copies beside the store's directory, and
// the first sweep deletes every file there that it does not hold. (The
// checkpoint directory and object storage refuse such a job name; memory
// checkpoints, the default without --checkpoint-dir, do not, and local
// recovery accepts them.)
func TestReviewTaskDirectoryStaysInsideTheStore(t *testing.T) {
	parent := t.TempDir()
	s, err := local.Open(filepath.Join(parent, "local"))
	if err != nil {
		t.Fatal(err)
	}
	precious := filepath.Join(parent, "v-0", "precious.txt") // not Weir's
	if err := os.MkdirAll(filepath.Dir(precious), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(precious, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	lt := s.Task("..", "v", 0)
	lt.Referenced(1, nil)
	lt.Complete(1)
	if _, err := os.Stat(precious); err != nil {
		t.Fatalf("a file outside the local recovery directory %s was deleted by a task's sweep: %v", s.Dir(), err)
	}
}
