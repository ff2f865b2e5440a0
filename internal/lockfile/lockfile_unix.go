//go:build unix

package lockfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// held holds the paths this process has locked and not released: a pid
// alone does not tell this process from one of another PID namespace (a
// container sharing the volume) or host with the same pid.
var held sync.Map

// holder names the process holding the lock on f (at path), from the pid
// it wrote. NB: a holder that has just taken the lock writes its pid a
// moment later; holder waits that moment, up to holderWait.
func holder(f *os.File, path string) string {
	for deadline := time.Now().Add(holderWait); ; time.Sleep(holderWait / 20) {
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n]))); err == nil {
			if _, mine := held.Load(heldKey(path)); mine && pid == os.Getpid() {
				return fmt.Sprintf("process %d, this one (another job, run or sink in it)", pid)
			}
			return fmt.Sprintf("process %d", pid)
		}
		if time.Now().After(deadline) {
			return "another process"
		}
	}
}

const holderWait = time.Second

func lockOS(path, what string) (io.Closer, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", what, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s (%s): %w", what, path, err)
		}
		return nil, fmt.Errorf("%s is %w by %s (lock file %s): wait for that run to end, or stop it", what, ErrLocked, holder(f, path), path)
	}
	// NB: the pid is written through the locked descriptor; closing any
	// other descriptor of the file would not release an flock lock, but
	// there is none.
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: write %s: %w", what, path, err)
	}
	held.Store(heldKey(path), true)
	return &heldFile{File: f, path: heldKey(path)}, nil
}

// heldKey is path as held records it: absolute, clean, through no
// symbolic link (the file exists: lockOS made it).
func heldKey(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// heldFile is a locked file, which Close releases; closing again does
// nothing (a later holder's record in held stays).
type heldFile struct {
	*os.File
	path string
	once sync.Once
}

func (h *heldFile) Close() error {
	err := os.ErrClosed
	h.once.Do(func() {
		held.Delete(h.path)
		err = h.File.Close()
	})
	return err
}
