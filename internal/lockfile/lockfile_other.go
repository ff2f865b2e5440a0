//go:build !unix

package lockfile

import (
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func lockOS(path, what string) (io.Closer, error) {
	l, err := vfs.Default.Lock(path)
	if err != nil {
		return nil, fmt.Errorf("%s is %w (lock file %s): %v", what, ErrLocked, path, err)
	}
	return l, nil
}
