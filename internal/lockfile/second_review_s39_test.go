//go:build unix

// Defects a second outside review of session 39's changes found, each
// fixed; a test's comment says what the defect did.

package lockfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestASecondCloseKeepsTheNextHoldersRecord: a closer closed
// twice (a deferred Close after an explicit one; os.File's second Close
// is harmless) after the lock was taken again in this process deletes
// the new holder's entry in held. A third attempt is then told the lock
// is held by "process N" (this pid), not "this one".
func TestASecondCloseKeepsTheNextHoldersRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".lock")
	first, err := Lock(vfs.Default, path, "checkpoint directory /x")
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	second, err := Lock(vfs.Default, path, "checkpoint directory /x")
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	first.Close() // again: an error, and nothing else, as before
	_, err = Lock(vfs.Default, path, "checkpoint directory /x")
	if err == nil || !strings.Contains(err.Error(), "this one") {
		t.Fatalf("lock held by this process (pid %d) through its second closer: %v; want the error to name this process as the holder", os.Getpid(), err)
	}
}

// TestHeldThroughASymlinkIsThisOnes: the lock taken through a
// symlinked directory and tried through the real one (the same file)
// is this process's; held is keyed by the absolute path, not the file.
func TestHeldThroughASymlinkIsThisOnes(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	l, err := Lock(vfs.Default, filepath.Join(link, ".lock"), "checkpoint directory "+link)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = Lock(vfs.Default, filepath.Join(real, ".lock"), "checkpoint directory "+real)
	if err == nil || !strings.Contains(err.Error(), "this one") {
		t.Fatalf("lock held by this process through a symlink: %v; want the error to name this process", err)
	}
}
