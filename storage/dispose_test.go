package storage

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/checkpoint"
)

// TestDisposeSavepoint: a checkpoint is refused; a savepoint goes with its
// files and the shared files only it used, while those another checkpoint
// uses stay; with the storage held by a running job, its shared files stay
// for that job's next start to delete.
func TestDisposeSavepoint(t *testing.T) {
	fs := vfs.NewMem()
	open := func() *Dir {
		d, err := NewDir(fs, "/ckpt", "job", 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Scan(); err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := open()
	// commit writes checkpoint id with the shared files named, reusing
	// those given, and one state file of its own.
	commit := func(id checkpoint.ID, savepoint bool, reuse []checkpoint.Handle, files ...string) []checkpoint.Handle {
		t.Helper()
		if err := d.Reserve(id); err != nil {
			t.Fatal(err)
		}
		hs := slices.Clone(reuse)
		for _, f := range files {
			h, err := d.WriteShared(id, checkpoint.Handle{Operator: "count", Parallelism: 1, Kind: "pebble-data", File: f}, bytes.NewReader([]byte(f)))
			if err != nil {
				t.Fatal(err)
			}
			hs = append(hs, h)
		}
		own, err := d.WriteState(id, handle(), stateOf(id))
		if err != nil {
			t.Fatal(err)
		}
		m := &checkpoint.Metadata{Job: "job", ID: id, Triggered: t0, Savepoint: savepoint, Operators: operators,
			Tasks: []checkpoint.TaskState{{Task: task, Handles: append(hs, own)}}}
		if err := d.Commit(m); err != nil {
			t.Fatal(err)
		}
		return hs
	}
	one := commit(1, false, nil, "a.sst", "b.sst")
	commit(2, true, one[:1], "c.sst")
	ctx := context.Background()

	if _, err := DisposeSavepoint(ctx, fs, d.CheckpointDir(1)); err == nil || !strings.Contains(err.Error(), "not a savepoint") {
		t.Fatalf("disposing checkpoint 1: %v", err)
	}
	// The job's newest checkpoint is what it resumes from: refused.
	if _, err := DisposeSavepoint(ctx, fs, d.CheckpointDir(2)); err == nil || !strings.Contains(err.Error(), "newest checkpoint") {
		t.Fatalf("disposing savepoint 2, the newest checkpoint: %v", err)
	}
	commit(3, false, one, "e.sst")
	got, err := DisposeSavepoint(ctx, fs, d.CheckpointDir(2))
	if err != nil || got.ID != 2 || got.SharedKept {
		t.Fatalf("disposing savepoint 2: %+v, %v", got, err)
	}
	// names are the shared files' names, less the prefix storage adds.
	names := func(d *Dir) string {
		var out []string
		for _, f := range dirShared(t, d) {
			out = append(out, f[strings.LastIndex(f, "-")+1:])
		}
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	if got := names(d); got != "a.sst b.sst e.sst" {
		t.Fatalf("shared files after disposing savepoint 2: %s (want checkpoints 1's and 3's: a, b and e)", got)
	}
	if _, err := fs.Stat(d.CheckpointDir(2)); err == nil {
		t.Fatal("savepoint 2's directory is still there")
	}
	scan, err := open().Scan()
	if err != nil || len(scan.Completed) != 2 || scan.Completed[0].ID != 1 || scan.Completed[1].ID != 3 {
		t.Fatalf("after disposing: %+v, %v", scan.Completed, err)
	}
	// It says what it did not find, not that a restore failed (it did).
	if _, err := DisposeSavepoint(ctx, fs, d.CheckpointDir(2)); err == nil || strings.Contains(err.Error(), "restore") ||
		!strings.Contains(err.Error(), "dispose: checkpoint "+d.CheckpointDir(2)) {
		t.Fatalf("a savepoint disposed twice: %v", err)
	}

	// A job holds the storage: savepoint 4 goes once checkpoint 5 is
	// newer, its own shared file d stays until the job's next start.
	lock, err := d.Lock()
	if err != nil {
		t.Fatal(err)
	}
	commit(4, true, one[1:], "d.sst")
	if _, err := DisposeSavepoint(ctx, fs, d.CheckpointDir(4)); err == nil || !strings.Contains(err.Error(), "newest checkpoint") {
		t.Fatalf("disposing savepoint 4, the newest checkpoint, while the storage is held: %v", err)
	}
	commit(5, false, one)
	got, err = DisposeSavepoint(ctx, fs, d.CheckpointDir(4))
	if err != nil || !got.SharedKept || got.Held == nil {
		t.Fatalf("disposing savepoint 4 while the storage is held: %+v, %v", got, err)
	}
	if got := names(d); got != "a.sst b.sst d.sst e.sst" {
		t.Fatalf("shared files while the storage is held: %s (want a, b, d and e)", got)
	}
	lock.Close()
	next := open()
	if err := next.RemoveOrphans(); err != nil {
		t.Fatal(err)
	}
	if got := names(next); got != "a.sst b.sst e.sst" {
		t.Fatalf("shared files at the next start: %s (want a, b and e)", got)
	}
	if _, err := DisposeSavepoint(ctx, fs, "/ckpt/job/not-a-checkpoint"); err == nil {
		t.Fatal("a path that is no checkpoint was accepted")
	}
}

// TestCheckpointLocation: a checkpoint's location joins the job and
// chk-<id> to a directory, or to a URL's path before its query (which
// OpenCheckpointURL needs; TestBlobRoundTrip opens one).
func TestCheckpointLocation(t *testing.T) {
	for _, c := range []struct {
		dir, job string
		want     string
	}{
		{"/var/ckpt", "wordcount", "/var/ckpt/wordcount/chk-7"},
		{"/var/ckpt/wordcount", "", "/var/ckpt/wordcount/chk-7"},
		{"s3://bucket/prefix?endpoint=http%3A%2F%2F127.0.0.1%3A9000&region=x", "wordcount", "s3://bucket/prefix/wordcount/chk-7?endpoint=http%3A%2F%2F127.0.0.1%3A9000&region=x"},
		{"s3://bucket/prefix/wordcount/", "", "s3://bucket/prefix/wordcount/chk-7"},
		{"mem://m", "job", "mem://m/job/chk-7"},
	} {
		if got := CheckpointLocation(c.dir, c.job, 7); got != c.want {
			t.Errorf("CheckpointLocation(%q, %q, 7) = %q, want %q", c.dir, c.job, got, c.want)
		}
	}
}
