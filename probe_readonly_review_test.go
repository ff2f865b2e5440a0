package weir_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// readOnlyProbes is storage mounted read-only where the workers write
// their probes: every file created in its _probe directory fails with
// EROFS.
type readOnlyProbes struct{ vfs.FS }

func (f readOnlyProbes) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	if filepath.Base(filepath.Dir(name)) == "_probe" {
		return nil, &os.PathError{Op: "create", Path: name, Err: syscall.EROFS}
	}
	return f.FS.Create(name, cat)
}

// TestReviewProbeReadOnlyFailsAtOnce: a worker whose checkpoint storage is
// a read-only file system may not write to it, as one denied permission
// (EACCES) may not: a restart cannot fix it, and the job fails at once,
// saying so (storage.Prober). EROFS is not fs.ErrPermission, so the probe
// took it for an error that may pass: the job restarted until its
// strategy gave up ("gave up after 5 failures"), as for a full disk.
func TestReviewProbeReadOnlyFailsAtOnce(t *testing.T) {
	_, err := runProbed(t, readOnlyProbes{vfs.Default})
	const want = "a restart cannot fix it: worker worker-1 cannot write to the checkpoint storage"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("the job on storage read-only to its worker ended with %v; want it to fail at once, saying %q", err, want)
	}
}
