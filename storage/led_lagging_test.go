package storage

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/checkpoint"
)

// hideFS hides one name from listings of one directory (a lagging listing).
type hideFS struct {
	vfs.FS
	dir  string
	hide atomic.Value
}

func (f *hideFS) List(dir string) ([]string, error) {
	names, err := f.FS.List(dir)
	h, _ := f.hide.Load().(string)
	if err != nil || h == "" || dir != f.dir {
		return names, err
	}
	return slices.DeleteFunc(names, func(n string) bool { return n == h }), nil
}

// TestHAUnrecordedDamagedCheckpointHidesNoMissingNewer: a damaged
// checkpoint etcd does not record (a deposed leader's) is no evidence that
// a recorded checkpoint the listing lacks is gone: the scan still fails,
// retryable. A review of note 131's second version (session 36) found it
// reported the newest recorded checkpoint as damaged, and the start
// restored the one before it and forgot it in etcd.
func TestHAUnrecordedDamagedCheckpointHidesNoMissingNewer(t *testing.T) {
	c := haClient(t)
	mem := vfs.NewMem()
	fs := &hideFS{FS: mem, dir: "/chk/job"}
	dir, err := NewDir(fs, "/chk", "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	a := lead(t, c, "a")
	sa := Led(dir, a)
	if _, err := sa.Scan(); err != nil {
		t.Fatal(err)
	}
	for id := 1; id <= 3; id++ {
		if err := takeCheckpoint(sa, checkpoint.ID(id)); err != nil {
			t.Fatal(err)
		}
	}
	// chk-4: metadata proven damaged, never recorded in etcd.
	if err := mem.MkdirAll("/chk/job/chk-4", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := mem.Create("/chk/job/chk-4/"+MetadataFile, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("garbage, not metadata"))
	f.Close()
	fs.hide.Store("chk-3") // the listing lags on the newest recorded checkpoint
	scan, err := sa.Scan()
	if errors.Is(err, ErrUnavailable) {
		return // holds: waits for the listing
	}
	var damaged []checkpoint.ID
	for _, d := range scan.Damaged {
		damaged = append(damaged, d.ID)
	}
	t.Fatalf("etcd records checkpoint 3 as completed, the listing lacks it: scan err %v, latest %v, damaged %v (the runtime restores the latest and drops every damaged one above it, forgetting 3 in etcd)", err, scan.Latest().ID, damaged)
}
