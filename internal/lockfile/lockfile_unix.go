//go:build unix

package lockfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
)

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
		holder := "another process"
		if b, rerr := io.ReadAll(io.LimitReader(f, 32)); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
				holder = fmt.Sprintf("process %d", pid)
			}
		}
		return nil, fmt.Errorf("%s is %w by %s (lock file %s): wait for that run to end, or stop it", what, ErrLocked, holder, path)
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
	return f, nil
}
