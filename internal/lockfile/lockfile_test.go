package lockfile

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestLockExcludesAndNamesTheHolder: a second lock on the same file fails,
// naming the holder's process id (and that it is this one); after Close
// it succeeds.
func TestLockExcludesAndNamesTheHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".lock")
	l, err := Lock(vfs.Default, path, "output directory /x")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Lock(vfs.Default, path, "output directory /x")
	// The holder is this process, which the message says (session 39).
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("process %d, this one", os.Getpid())) || !strings.Contains(err.Error(), "output directory /x") {
		t.Fatalf("second lock: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = Lock(vfs.Default, path, "output directory /x")
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	l.Close()
}

// TestLockDiesWithItsHolder: the kernel releases the lock of a process
// killed with SIGKILL.
func TestLockDiesWithItsHolder(t *testing.T) {
	if os.Getenv("LOCKFILE_HOLD") != "" {
		if _, err := Lock(vfs.Default, os.Getenv("LOCKFILE_HOLD"), "test"); err != nil {
			os.Exit(2)
		}
		fmt.Println("locked")
		select {}
	}
	path := filepath.Join(t.TempDir(), ".lock")
	cmd := exec.Command(os.Args[0], "-test.run", "^TestLockDiesWithItsHolder$")
	cmd.Env = append(os.Environ(), "LOCKFILE_HOLD="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := out.Read(buf); err != nil || string(buf) != "locked" {
		cmd.Process.Kill()
		t.Fatalf("the holder did not lock: %q %v", buf, err)
	}
	_, err = Lock(vfs.Default, path, "test")
	if !strings.Contains(fmt.Sprint(err), fmt.Sprintf("process %d", cmd.Process.Pid)) {
		t.Errorf("while held by %d: %v", cmd.Process.Pid, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	l, err := Lock(vfs.Default, path, "test")
	if err != nil {
		t.Fatalf("after the holder was killed: %v", err)
	}
	l.Close()
}

func TestLockOnMemFS(t *testing.T) {
	fs := vfs.NewMem()
	l, err := Lock(fs, "/lock", "checkpoint directory /")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Lock(fs, "/lock", "checkpoint directory /"); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock on a MemFS: %v", err)
	}
	l.Close()
}

// An I/O error taking the lock is not another holder: it is reported as
// itself, and not as ErrLocked (a run told the directory is in use would
// look for a holder that does not exist).
func TestLockErrorIsNotAHolder(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EIO, syscall.EACCES} {
		fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
			if op.Kind == errorfs.OpLock {
				return &os.PathError{Op: "lock", Path: op.Path, Err: errno}
			}
			return nil
		}))
		_, err := Lock(fs, "/lock", "checkpoint directory /")
		if err == nil || errors.Is(err, ErrLocked) || !errors.Is(err, errno) {
			t.Errorf("a lock that fails with %v: %v; want that error, not ErrLocked", errno, err)
		}
	}
}
