package file

import (
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/weirstream/weir/operator/operatortest"
)

// TestFailedDataSyncIsNotRetried (found by an outside review, session 35): when the sync of an in-progress
// file fails (EIO, ENOSPC at writeback), the kernel may already have
// dropped the dirty pages and clears the error: a second fsync on the same
// descriptor succeeds though the data never reached the disk (the
// "fsyncgate" of PostgreSQL 2018). The sink must not pre-commit and then
// commit that file on the next checkpoint's retry: the records of
// checkpoint 1 would be in a committed file that a crash shows empty or
// short. It should fail (the restore writes those records again into a new
// file) rather than sync the same file again.
func TestFailedDataSyncIsNotRetried(t *testing.T) {
	failSync := false
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failSync && op.Kind == errorfs.OpFileSync && strings.Contains(op.Path, "inprogress") {
			failSync = false
			return errors.New("injected: input/output error")
		}
		return nil
	}))
	w := &operatortest.MemWriter{}
	run := &operatortest.Run{}
	defer run.Close()
	s := sinkFor(t, run, fs, 0, 1, nil)
	s.Write("a")
	async, err := s.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	failSync = true
	if _, err := async(w); err == nil {
		t.Fatal("the failed sync was not reported")
	}
	s.NotifyAborted(1) // a tolerated checkpoint failure: the job runs on
	if err := s.Write("b"); err == nil {
		t.Error("a write after the failed sync went on: the task must fail, and its restore write the records again")
	}
	async, err = s.Snapshot(2)
	if err == nil {
		_, err = async(w)
	}
	if err == nil {
		err = s.NotifyComplete(2)
	}
	if names, _ := committed(t, fs); err == nil && len(names) > 0 {
		t.Fatalf("committed %v: the file whose fsync failed was synced again and committed, its data unverified", names)
	}
}
