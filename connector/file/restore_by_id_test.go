package file

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/operator/operatortest"
)

// A split records its file's id (absolute, links resolved) beside the path
// as the input spelled it, and a restore finds the file by that id (found
// by an outside review, session 32: the restore resolved the recorded
// spelling again, in its own working directory and against links as they
// are then).

// TestRestoreFromAnotherWorkingDirectory: a run reads a relative input
// ("data/a.txt") and is checkpointed half-way through the file; the
// restore, from another working directory, names the same file by its
// absolute path, and reads the rest of it, each line once.
func TestRestoreFromAnotherWorkingDirectory(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	if err := os.Mkdir(filepath.Join(a, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(a)
	w := &operatortest.MemWriter{}
	want := numbered(t, vfs.Default, "data/a.txt", 500)
	var got lines
	hs, err := inputRun{fs: vfs.Default, w: w, pattern: "data/a.txt", p: 1, reads: 3}.run(t, &got)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || len(got) >= len(want) {
		t.Fatalf("read %d of %d lines before the checkpoint: want a partial read", len(got), len(want))
	}
	t.Chdir(b)
	restored := inputRun{fs: vfs.Default, w: w, pattern: filepath.Join(a, "data", "a.txt"), p: 1, restore: hs, reads: -1}
	if _, err := restored.run(t, &got); err != nil {
		t.Fatalf("restore naming the same file by its absolute path, from another directory: %v", err)
	}
	once(t, "restore from another directory", got, want)
}

// TestRestoreInAnotherDirectoryWithItsOwnFile: as above, but the restore
// runs with the same relative input in a directory that has its own
// data/a.txt. The checkpoint's file, A's, is unread and no longer
// matched: the restore is refused (it read B's file from A's offset, and
// B's file again from its start, before).
func TestRestoreInAnotherDirectoryWithItsOwnFile(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, d := range []string{a, b} {
		if err := os.Mkdir(filepath.Join(d, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(b)
	other := numbered(t, vfs.Default, "data/a.txt", 500) // B's own file
	t.Chdir(a)
	numbered(t, vfs.Default, "data/a.txt", 500)
	w := &operatortest.MemWriter{}
	var before lines
	hs, err := inputRun{fs: vfs.Default, w: w, pattern: "data/a.txt", p: 1, reads: 3}.run(t, &before)
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(b)
	var got lines
	restored := inputRun{fs: vfs.Default, w: w, pattern: "data/a.txt", p: 1, restore: hs, reads: -1}
	_, err = restored.run(t, &got)
	if !errors.Is(err, ErrUnreadInputDropped) {
		t.Fatalf("restore in another directory with its own data/a.txt: %v (read %d lines of its %d), want %v", err, len(got), len(other), ErrUnreadInputDropped)
	}
}

// TestRestoreAfterASymlinkWasRepointed: the input is a symbolic link,
// current.log -> jan.log, checkpointed half-way through jan.log; before
// the restore the link is repointed to feb.log (log rotation). jan.log is
// unread and no longer matched: the restore is refused, naming it (it
// resumed at jan.log's offset inside feb.log, and read feb.log whole as a
// new file too, before).
func TestRestoreAfterASymlinkWasRepointed(t *testing.T) {
	dir := t.TempDir()
	jan, feb, cur := filepath.Join(dir, "jan.log"), filepath.Join(dir, "feb.log"), filepath.Join(dir, "current.log")
	numbered(t, vfs.Default, jan, 500)
	if err := os.Symlink(jan, cur); err != nil {
		t.Fatal(err)
	}
	w := &operatortest.MemWriter{}
	var before lines
	hs, err := inputRun{fs: vfs.Default, w: w, pattern: cur, p: 1, reads: 3}.run(t, &before)
	if err != nil {
		t.Fatal(err)
	}
	wantFeb := numbered(t, vfs.Default, feb, 500)
	if err := os.Remove(cur); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(feb, cur); err != nil {
		t.Fatal(err)
	}
	var got lines
	restored := inputRun{fs: vfs.Default, w: w, pattern: cur, p: 1, restore: hs, reads: -1}
	_, err = restored.run(t, &got)
	if !errors.Is(err, ErrUnreadInputDropped) || !strings.Contains(err.Error(), jan) {
		t.Fatalf("restore after the link was repointed: %v (read %d lines of feb.log's %d), want %v naming %s", err, len(got), len(wantFeb), ErrUnreadInputDropped, jan)
	}
}
