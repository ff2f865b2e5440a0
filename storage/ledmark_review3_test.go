package storage

// Third outside review of the highly available coordinator: the _ha
// marker (ledmark.go) naming etcd's namespace.

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/internal/etcdtest"
	"github.com/weirstream/weir/internal/ha"
)

// noLinkFS is a file system without hard links (gcsfuse, s3fs, many SMB
// mounts: the shared directories a cluster's --checkpoint-dir may be).
type noLinkFS struct{ vfs.FS }

func (noLinkFS) Link(oldname, newname string) error {
	return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: syscall.ENOTSUP}
}

// TestReview3LedDirWithoutHardLinks: markLed makes _ha with a hard link
// (new in bbec432); 3e8b7ee wrote it with a plain create. On a shared
// directory whose file system has no hard links, every term's Lock now
// fails, and it fails with ErrUnavailable ("proves nothing", a start
// failure that may pass): lead() backs off and campaigns again for ever
// (5 s doubling to 5 min), the job never runs, and nothing tells the
// operator that the file system lacks a feature Weir now needs. Want:
// the storage is marked another way, or the error is not ErrUnavailable
// and says that hard links are needed.
func TestReview3LedDirWithoutHardLinks(t *testing.T) {
	e := etcdtest.Start(t, 1)
	c, err := ha.Dial(ha.Config{Endpoints: e.Hosts(), TTL: 2 * time.Second, Prefix: "/nolink"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dir, err := NewDir(noLinkFS{vfs.NewMem()}, "/chk", "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	l := lead(t, c, "a")
	_, err = Led(dir, l).Lock()
	switch {
	case err == nil:
	case errors.Is(err, ErrUnavailable):
		t.Errorf("on a file system without hard links, every term's Lock fails as if the storage were unavailable for a moment (retried for ever): %v", err)
	case !strings.Contains(err.Error(), "hard link"):
		t.Errorf("on a file system without hard links, Lock fails without saying so: %v", err)
	}
}
