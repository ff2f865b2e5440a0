package storage

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/checkpoint"
)

// commitWithShared writes checkpoint id of job "job" under root on the
// real file system, with one shared file (as incremental checkpoints have)
// and one state file of its own.
func commitWithShared(t *testing.T, root string, id checkpoint.ID, savepoint bool) *Dir {
	t.Helper()
	d, err := NewDir(vfs.Default, root, "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Scan(); err != nil {
		t.Fatal(err)
	}
	if err := d.Reserve(id); err != nil {
		t.Fatal(err)
	}
	sh, err := d.WriteShared(id, checkpoint.Handle{Operator: "count", Parallelism: 1, Kind: "pebble-data", File: "a.sst"}, bytes.NewReader([]byte("shared bytes")))
	if err != nil {
		t.Fatal(err)
	}
	own, err := d.WriteState(id, handle(), stateOf(id))
	if err != nil {
		t.Fatal(err)
	}
	m := &checkpoint.Metadata{Job: "job", ID: id, Triggered: t0, Savepoint: savepoint, Operators: operators,
		Tasks: []checkpoint.TaskState{{Task: task, Handles: []checkpoint.Handle{sh, own}}}}
	if err := d.Commit(m); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestOpenCheckpointWithTrailingSlash (outside review, operator): `weir run
// wordcount --restore ckpt/wordcount/chk-4/` (a trailing slash, as shell
// completion writes it) roots the checkpoint's storage at chk-4 itself
// instead of the job directory, so its shared files are looked up under
// chk-4/shared/. The run then logs "checkpoint state is missing or
// damaged; restoring the previous checkpoint", restores chk-3 instead,
// deletes the healthy chk-4 and rolls back the output it committed (with a
// Kafka or PostgreSQL sink: that output is written again). Want: the path
// with a trailing slash is the same checkpoint as without.
func TestOpenCheckpointWithTrailingSlash(t *testing.T) {
	root := t.TempDir()
	d := commitWithShared(t, root, 4, false)
	chk := d.CheckpointDir(4)
	for _, p := range []string{chk, chk + "/", chk + "//"} {
		m, st, err := OpenCheckpoint(vfs.Default, p)
		if err != nil {
			t.Fatalf("OpenCheckpoint(%q): %v", p, err)
		}
		if got := st.Describe(); filepath.Clean(got) != d.JobDir() {
			t.Errorf("OpenCheckpoint(%q): storage rooted at %s, want the job directory %s", p, got, d.JobDir())
		}
		for _, ts := range m.Tasks {
			for _, h := range ts.Handles {
				if r, err := st.OpenState(h); err != nil {
					t.Errorf("OpenCheckpoint(%q): state %s of a healthy checkpoint cannot be read: %v", p, h.Kind, err)
				} else {
					r.Close()
				}
			}
		}
	}
}

// TestDisposeSavepointWithTrailingSlash (outside review, operator): `weir
// savepoint dispose ckpt/job/chk-2/` prints "savepoint 2 disposed" and
// exits 0, yet deletes nothing (and leaves a .lock file inside the
// savepoint). Want: the savepoint deleted, as without the slash.
func TestDisposeSavepointWithTrailingSlash(t *testing.T) {
	root := t.TempDir()
	d := commitWithShared(t, root, 2, true)
	commitWithShared(t, root, 3, false) // a savepoint that is the newest checkpoint stays
	chk := d.CheckpointDir(2)
	got, err := DisposeSavepoint(context.Background(), vfs.Default, chk+"/")
	if err != nil {
		t.Fatalf("dispose %s/: %v", chk, err)
	}
	if _, err := os.Stat(filepath.Join(chk, MetadataFile)); err == nil {
		t.Fatalf("dispose %s/ reported savepoint %d disposed (%+v), but its %s is still there", chk, got.ID, got, MetadataFile)
	}
}

// TestOpenCheckpointThatIsNotThere: a restore of a checkpoint that does
// not exist says what to give and names the checkpoints beside it; one of
// "LATEST" says to write latest. Both were a bare stat error (found by an
// outside review, session 39).
func TestOpenCheckpointThatIsNotThere(t *testing.T) {
	root := t.TempDir()
	d := commitWithShared(t, root, 4, false)
	commitWithShared(t, root, 5, false)
	for path, want := range map[string]string{
		d.CheckpointDir(9):       "give the chk-<id> directory of a completed checkpoint or savepoint (" + d.JobDir() + " holds chk-4, chk-5), or latest",
		d.CheckpointDir(9) + "/": "(" + d.JobDir() + " holds chk-4, chk-5)",
		"LATEST":                 "to restore the latest checkpoint, write latest",
	} {
		_, _, err := OpenCheckpoint(vfs.Default, path)
		if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), want) {
			t.Errorf("OpenCheckpoint(%q): %v, want it to say %q", path, err, want)
		}
	}
}
