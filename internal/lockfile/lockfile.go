// Package lockfile takes exclusive locks on files, so that two runs of a job
// never share a checkpoint or output directory.
package lockfile

import (
	"errors"
	"fmt"
	"io"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrLocked is wrapped by Lock's error when another holder has the lock.
var ErrLocked = errors.New("in use")

// Lock takes an exclusive lock on the file at path, creating it; what names
// the thing the lock guards, for errors. On the real file system it is an
// flock(2) lock, which the kernel releases when the holder dies (kill -9
// too), and the file records the holder's process id, which the error names.
// On another vfs.FS (a test's in-memory one) it is the FS's Lock. Close
// releases the lock.
func Lock(fs vfs.FS, path, what string) (io.Closer, error) {
	if vfs.Root(fs) == vfs.Default {
		return lockOS(path, what)
	}
	l, err := fs.Lock(path)
	switch {
	case errors.Is(err, syscall.EAGAIN):
		// What vfs.MemFS answers for a held lock, as flock(2) does.
		return nil, fmt.Errorf("%s is %w by another run of this process (lock file %s): %v", what, ErrLocked, path, err)
	case err != nil:
		// Not proof of another holder: an I/O error, or a missing
		// directory.
		return nil, fmt.Errorf("lock %s (%s): %w", what, path, err)
	}
	return l, nil
}
