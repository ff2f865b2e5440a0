package pebble

// Review of b61db56 (local recovery keeps what a restore downloaded; Pebble
// shares sstables with the local copy by hard links).

import (
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/operator/operatortest"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/local"
)

// remoteReads is checkpoint storage (a MemWriter) that counts the pieces
// read from it, by handle kind.
type remoteReads struct {
	w  *operatortest.MemWriter
	mu sync.Mutex
	n  map[string]int
}

func (r *remoteReads) count(h checkpoint.Handle) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	if h.CRC32C == 0 {
		// An empty piece (CRC-32C 0, Pebble's empty WAL) reads as "no
		// checksum": never local. Counted apart.
		r.n["no checksum"]++
		return
	}
	r.n[h.Kind+" "+h.File]++
	r.n[h.Kind]++
}

func (r *remoteReads) Read(h checkpoint.Handle) ([]byte, error) {
	r.count(h)
	return r.w.Read(h)
}

func (r *remoteReads) Open(h checkpoint.Handle) (io.ReadCloser, error) {
	r.count(h)
	return r.w.Open(h)
}

func (r *remoteReads) reset() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.n
	r.n = nil
	return n
}

type funcReader struct {
	read func(checkpoint.Handle) ([]byte, error)
	open func(checkpoint.Handle) (io.ReadCloser, error)
}

func (f funcReader) Read(h checkpoint.Handle) ([]byte, error)        { return f.read(h) }
func (f funcReader) Open(h checkpoint.Handle) (io.ReadCloser, error) { return f.open(h) }

// review1Checkpoint takes checkpoint 1 of a database of 20,000 keys, as a
// task writes it (through a local copy in a store of its own, which the
// restores below do not see: a new disk).
func review1Checkpoint(t *testing.T) (*operatortest.MemWriter, []checkpoint.Handle) {
	t.Helper()
	mem := &operatortest.MemWriter{}
	b, v := open(t, t.TempDir(), true, nil, nil)
	put(b, v, 0, 20_000, "a")
	elsewhere, err := local.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	hs := take(t, b, 1, &counting{MemWriter: mem})
	_ = elsewhere
	return mem, hs
}

// restoreVia restores hs through the local copy lt as the runtime does
// (lt.Reads around checkpoint storage r).
func restoreVia(t *testing.T, dir string, lt *local.Task, r *remoteReads, hs []checkpoint.Handle) (*Backend, *Value[string, string]) {
	t.Helper()
	read, open := lt.Reads(r.Read, r.Open)
	b, err := New(Options{Dir: dir, Incremental: true, MemTableBytes: 1 << 20}, Scope{Job: "j", Operator: "op", KeyGroups: all},
		&state.Restored{Handles: hs, Reader: funcReader{read, open}, Owned: true})
	if err != nil {
		t.Fatal(err)
	}
	v, err := NewValue(b, "v", codec.For[string](), codec.For[string]())
	if err != nil {
		t.Fatal(err)
	}
	return b, v
}

func checkValues(t *testing.T, b *Backend, v *Value[string, string], prefix string) {
	t.Helper()
	for _, i := range []int{0, 7, 999, 12_345, 19_999} {
		b.SetGroup(i % 128)
		if got, ok := v.Get(fmt.Sprint("key-", i)); !ok || !strings.HasPrefix(got, prefix) {
			t.Fatalf("key-%d = %q, %v; want %q...", i, got, ok, prefix)
		}
	}
}

// TestReview1RestoreLoopReadsOnlyLocally: the commit says "the next restore
// after a download reads nothing remotely". A restore that downloaded
// (empty local copy), then failed before its first checkpoint completed
// (a crash loop: the most common reason for a second restore), is followed
// by a restore of the same checkpoint: it should read nothing from
// checkpoint storage. Pebble's own small files (KindFile: MANIFEST,
// OPTIONS, markers) were streamed and never kept (downloadOne calls Keep
// for KindData only), so they are downloaded again every time.
func TestReview1RestoreLoopReadsOnlyLocally(t *testing.T) {
	mem, hs := review1Checkpoint(t)
	s, err := local.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := &remoteReads{w: mem}
	b1, v1 := restoreVia(t, t.TempDir(), s.Task("j", "op", 0), r, hs)
	checkValues(t, b1, v1, "a")
	b1.Close() // the attempt fails before a checkpoint completes
	if n := r.reset(); n[KindData] == 0 {
		t.Fatalf("the first restore (empty local copy) read %v remotely", n)
	}
	b2, v2 := restoreVia(t, t.TempDir(), s.Task("j", "op", 0), r, hs)
	defer b2.Close()
	checkValues(t, b2, v2, "a")
	if n := r.reset(); n[KindFile] != 0 || n[KindData] != 0 {
		t.Fatalf("the second restore of the same checkpoint read pieces from checkpoint storage again: %v (want none)", n)
	}
}

// TestReview1SharedInodesStayIntact: two restores in one process (two
// attempts, the first one's database still open) link the same local
// files; the first database is then rewritten and compacted. The second
// database still reads the checkpoint's values and every local file
// still matches its handle (a third restore reads every data file
// locally). Expected to pass: it checks the rule the change relies on.
func TestReview1SharedInodesStayIntact(t *testing.T) {
	mem, hs := review1Checkpoint(t)
	s, err := local.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := &remoteReads{w: mem}
	b0, _ := restoreVia(t, t.TempDir(), s.Task("j", "op", 0), r, hs) // downloads, keeps
	b0.Close()
	r.reset()
	ba, va := restoreVia(t, t.TempDir(), s.Task("j", "op", 0), r, hs)
	defer ba.Close()
	bb, vb := restoreVia(t, t.TempDir(), s.Task("j", "op", 0), r, hs)
	defer bb.Close()
	if n := r.reset(); n[KindData] != 0 {
		t.Fatalf("restores read data files remotely: %v", n)
	}
	put(ba, va, 0, 20_000, "z")
	if err := ba.flushAll(); err != nil {
		t.Fatal(err)
	}
	if err := ba.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := ba.db.Compact(t.Context(), []byte{0}, []byte{0xff, 0xff, 0xff}, true); err != nil {
		t.Fatal(err)
	}
	checkValues(t, bb, vb, "a")
	checkValues(t, ba, va, "z")
	ltc := s.Task("j", "op", 0)
	bc, vc := restoreVia(t, t.TempDir(), ltc, r, hs)
	defer bc.Close()
	checkValues(t, bc, vc, "a")
	if n := r.reset(); n[KindData] != 0 {
		t.Fatalf("after the first database compacted, a restore read data files remotely: %v (a local copy changed)", n)
	}
	// And the local files are the handles' bytes.
	for _, h := range hs {
		if h.Kind != KindData {
			continue
		}
		p := filepath.Join(s.Dir(), "j", "op-0", filepath.FromSlash(h.Path))
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if crc32.Checksum(b, castagnoli) != h.CRC32C {
			t.Fatalf("local copy %s changed", p)
		}
	}
}

// TestReview1LocalCopyOnAnotherFileSystem: the local copy on tmpfs, the
// database on disk: Keep copies, a local restore copies (the link fails);
// values right, no data file downloaded twice. Expected to pass.
func TestReview1LocalCopyOnAnotherFileSystem(t *testing.T) {
	shm, err := os.MkdirTemp("/dev/shm", "review1-")
	if err != nil {
		t.Skip(err)
	}
	defer os.RemoveAll(shm)
	mem, hs := review1Checkpoint(t)
	s, err := local.Open(shm)
	if err != nil {
		t.Fatal(err)
	}
	r := &remoteReads{w: mem}
	lt := s.Task("j", "op", 0)
	b1, v1 := restoreVia(t, t.TempDir(), lt, r, hs)
	checkValues(t, b1, v1, "a")
	b1.Close()
	if err := lt.WriteErr(); err != nil {
		t.Fatalf("keeping across file systems: %v", err)
	}
	r.reset()
	b2, v2 := restoreVia(t, t.TempDir(), s.Task("j", "op", 0), r, hs)
	defer b2.Close()
	checkValues(t, b2, v2, "a")
	if n := r.reset(); n[KindData] != 0 {
		t.Fatalf("read data files remotely: %v", n)
	}
}
