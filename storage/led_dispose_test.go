package storage

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/checkpoint"
)

// commitSavepoint commits savepoint id through s.
func commitSavepoint(s Storage, id checkpoint.ID) error {
	if err := s.Reserve(id); err != nil {
		return err
	}
	h, err := s.WriteState(id, handle(), stateOf(id))
	if err != nil {
		return err
	}
	return s.Commit(&checkpoint.Metadata{Job: "job", ID: id, Savepoint: true, Triggered: t0, Operators: operators, Tasks: []checkpoint.TaskState{
		{Task: task, Handles: []checkpoint.Handle{h}},
	}})
}

// TestHADisposedOlderSavepointBlocksNoStart: a savepoint of a highly
// available job is recorded in etcd and never forgotten there (Weir never
// discards savepoints). Disposing of it once newer checkpoints completed
// (weir savepoint dispose) deletes its files, not its record: the scan
// passes it over, as it is no restore point. A review of note 131's first
// version found every later start failing on it, forever (session 36).
func TestHADisposedOlderSavepointBlocksNoStart(t *testing.T) {
	c := haClient(t)
	fs := vfs.NewMem()
	dir, err := NewDir(fs, "/chk", "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	a := lead(t, c, "a")
	sa := Led(dir, a)
	if _, err := sa.Scan(); err != nil {
		t.Fatal(err)
	}
	if err := takeCheckpoint(sa, 1); err != nil {
		t.Fatal(err)
	}
	if err := commitSavepoint(sa, 2); err != nil {
		t.Fatal(err)
	}
	if err := takeCheckpoint(sa, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := DisposeSavepoint(context.Background(), fs, "/chk/job/chk-2"); err != nil {
		t.Fatalf("dispose of an older savepoint: %v", err)
	}
	scan, err := sa.Scan()
	if err != nil {
		t.Fatalf("scan after savepoint 2 was disposed of (checkpoint 3 is the newest): %v", err)
	}
	if m := scan.Latest(); m == nil || m.ID != 3 || len(scan.Damaged) != 0 {
		t.Fatalf("scan: latest %v, damaged %v: want 3 and none", m, scan.Damaged)
	}
	// Deleted by hand while it is the newest (dispose refuses that): the
	// job's restore point is gone, and the scan says so.
	if err := commitSavepoint(sa, 4); err != nil {
		t.Fatal(err)
	}
	if err := fs.RemoveAll("/chk/job/chk-4"); err != nil {
		t.Fatal(err)
	}
	if _, err := sa.Scan(); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "disposed of") || !strings.Contains(err.Error(), a.PointerKey(4)) {
		t.Fatalf("scan with the newest savepoint disposed of: %v, want ErrUnavailable naming its etcd record", err)
	}
}
