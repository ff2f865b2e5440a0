package lockfile

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestALockHeldElsewhereUnderOurPidIsNotThisOnes (outside review, session
// 39): a lock file names
// its holder by pid only. A holder in another PID namespace (another
// container sharing the volume; every container's job is often pid 1) or
// on another host (a shared directory) can write the same number as this
// process's pid. The error must not then say the holder is "this one
// (another job, run or sink in it)": this process holds no lock on it.
// Simulated by a child process that takes the flock and writes the
// parent's pid, as a process of another namespace with that pid would.
func TestALockHeldElsewhereUnderOurPidIsNotThisOnes(t *testing.T) {
	if p := os.Getenv("LOCKFILE_TEST_HOLD"); p != "" {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			os.Exit(2)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			os.Exit(3)
		}
		f.Truncate(0)
		f.WriteAt([]byte(os.Getenv("LOCKFILE_TEST_PID")+"\n"), 0)
		fmt.Println("locked")
		select {}
	}
	path := filepath.Join(t.TempDir(), ".lock")
	cmd := exec.Command(os.Args[0], "-test.run", "^TestALockHeldElsewhereUnderOurPidIsNotThisOnes$")
	cmd.Env = append(os.Environ(), "LOCKFILE_TEST_HOLD="+path, fmt.Sprintf("LOCKFILE_TEST_PID=%d", os.Getpid()))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	buf := make([]byte, 6)
	if _, err := out.Read(buf); err != nil || string(buf) != "locked" {
		t.Fatalf("the holder did not lock: %q %v", buf, err)
	}
	_, err = Lock(vfs.Default, path, "output directory /x")
	if err == nil {
		t.Fatal("locked a file another process holds")
	}
	if strings.Contains(err.Error(), "this one") {
		t.Fatalf("held by another process (pid %d), whose lock file names pid %d: %v\nwant no claim that this process holds it: it holds no lock on %s", cmd.Process.Pid, os.Getpid(), err, path)
	}
}
