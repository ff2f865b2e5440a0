package storage

import (
	"bytes"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/checkpoint"
)

// TestWorkerRegistryForgetsWhatItWrote (found by an outside review,
// session 35): in a cluster each worker opens the job's storage itself and
// writes its tasks' shared files there, and only the coordinator's storage
// sees commits and discards: the worker's registry recorded every file it
// wrote, for ever (memory growing with every checkpoint of the run). A
// storage records a write only for a checkpoint it reserved (in one
// process, Reserve comes before every write).
func TestWorkerRegistryForgetsWhatItWrote(t *testing.T) {
	fs := vfs.NewMem()
	coord, err := NewDir(fs, "/ckpt", "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	worker, err := NewDir(fs, "/ckpt", "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	for id := checkpoint.ID(1); id <= 50; id++ {
		if err := coord.Reserve(id); err != nil {
			t.Fatal(err)
		}
		h, err := worker.WriteShared(id, checkpoint.Handle{Operator: "count", Subtask: 0, Parallelism: 1, Kind: "heap-data", File: "heap"}, bytes.NewReader([]byte("delta")))
		if err != nil {
			t.Fatal(err)
		}
		m := &checkpoint.Metadata{Job: "job", ID: id, Triggered: t0, Operators: operators, Tasks: []checkpoint.TaskState{{Task: task, Handles: []checkpoint.Handle{h}}}}
		if err := coord.Commit(m); err != nil {
			t.Fatal(err)
		}
		if id > 1 {
			if err := coord.Discard(id - 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	worker.shared.mu.Lock()
	n := 0
	for _, ps := range worker.shared.written {
		n += len(ps)
	}
	worker.shared.mu.Unlock()
	if n > 1 {
		t.Fatalf("after 50 checkpoints, each committed and then discarded, the worker's storage still records %d shared files as being written", n)
	}
}

// TestDiscardStateStaysInShared (found by an outside review, session 35):
// an aborted checkpoint's acknowledged handles are discarded now, and a
// handle whose path begins "shared/" but leaves it ("shared/../chk-1/…")
// deleted what it named.
func TestDiscardStateStaysInShared(t *testing.T) {
	fs := vfs.NewMem()
	d, err := NewDir(fs, "/ckpt", "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.MkdirAll("/ckpt/job/chk-1", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create("/ckpt/job/chk-1/_metadata", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	_ = d.DiscardState([]checkpoint.Handle{{Operator: "count", Kind: "heap-data", Path: "shared/../chk-1/_metadata"}})
	if _, err := fs.Stat("/ckpt/job/chk-1/_metadata"); err != nil {
		t.Fatalf("a discarded handle of path shared/../chk-1/_metadata deleted it: %v", err)
	}
}
