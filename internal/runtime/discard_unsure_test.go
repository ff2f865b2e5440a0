package runtime

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/storage"
)

// TestAbortKeepsTheStateOfAnUnsureCheckpoint (found by an outside review,
// session 35). Rule: a checkpoint that may look completed in storage keeps
// its files until it is deleted, metadata first. An aborted checkpoint's
// acknowledged state is discarded (DiscardState, note 130); when its
// commit failed (maybe after its metadata was written) and its discard
// failed too, it is unsure, and deleting its shared file then left a
// checkpoint that looks completed and cannot be restored.
func TestAbortKeepsTheStateOfAnUnsureCheckpoint(t *testing.T) {
	fs := vfs.NewMem()
	st, err := storage.NewDir(fs, "/ckpt", "j", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Reserve(2); err != nil {
		t.Fatal(err)
	}
	h, err := st.WriteShared(2, checkpoint.Handle{Operator: "count", Subtask: 0, Parallelism: 1, Kind: "heap-data", File: "heap"}, bytes.NewReader([]byte("delta")))
	if err != nil {
		t.Fatal(err)
	}
	d := &driver{spec: Spec{Name: "j", Storage: st}, log: slog.New(slog.DiscardHandler), unsure: map[checkpoint.ID]bool{2: true}}
	act := checkpoint.DiscardState{ID: 2, Task: checkpoint.TaskID{Vertex: "count"}, Handles: []checkpoint.Handle{h}}
	d.discardState(act)
	if _, err := fs.Stat("/ckpt/j/" + h.Path); err != nil {
		t.Fatalf("the shared file of unsure checkpoint 2 was deleted: %v", err)
	}
	delete(d.unsure, 2) // deleteUnsure deleted it: its state may go
	d.discardState(act)
	if _, err := fs.Stat("/ckpt/j/" + h.Path); err == nil {
		t.Fatal("the shared file of aborted checkpoint 2 was kept")
	}
}
