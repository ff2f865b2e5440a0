package pebble

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/operator/operatortest"
	"github.com/weirstream/weir/state"
)

// counting counts the bytes and files written as shared.
type counting struct {
	*operatortest.MemWriter
	files int
	bytes int64
}

func (c *counting) WriteShared(h checkpoint.Handle, r io.Reader) (checkpoint.Handle, error) {
	h, err := c.MemWriter.WriteShared(h, r)
	c.files++
	c.bytes += h.SizeBytes
	return h, err
}

var all = keygroup.Range{First: 0, Last: 127}

func open(t *testing.T, dir string, incremental bool, hs []checkpoint.Handle, w *operatortest.MemWriter) (*Backend, *Value[string, string]) {
	t.Helper()
	var rs *state.Restored
	if hs != nil {
		rs = &state.Restored{Handles: hs, Reader: w}
	}
	b, err := New(Options{Dir: dir, Incremental: incremental, MemTableBytes: 1 << 20}, Scope{Job: "j", Operator: "op", KeyGroups: all}, rs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	v, err := NewValue(b, "v", codec.For[string](), codec.For[string]())
	if err != nil {
		t.Fatal(err)
	}
	return b, v
}

func put(b *Backend, v *Value[string, string], from, to int, val string) {
	for i := from; i < to; i++ {
		b.SetGroup(i % 128)
		v.Put(fmt.Sprint("key-", i), val+strings.Repeat(".", 100))
	}
}

func take(t testing.TB, b *Backend, id checkpoint.ID, w *counting) []checkpoint.Handle {
	t.Helper()
	async, err := b.Snapshot(id)
	if err != nil {
		t.Fatal(err)
	}
	hs, err := async(w)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

func dataOf(hs []checkpoint.Handle) (n int, bytes int64) {
	for _, h := range hs {
		if h.Kind == KindData {
			n++
			bytes += h.SizeBytes
		}
	}
	return n, bytes
}

// TestIncrementalCheckpoints: after a completed checkpoint, the next one
// uploads only the data files written since; one that did not complete is
// never built on; a restore of an incremental checkpoint has everything.
func TestIncrementalCheckpoints(t *testing.T) {
	dir := t.TempDir()
	w := &counting{MemWriter: &operatortest.MemWriter{}}
	b, v := open(t, dir, true, nil, nil)
	put(b, v, 0, 50_000, "a")
	hs1 := take(t, b, 1, w)
	b.NotifyComplete(1)
	files1, bytes1 := w.files, w.bytes
	if n, _ := dataOf(hs1); n != files1 || files1 == 0 {
		t.Fatalf("checkpoint 1 lists %d data files, uploaded %d", n, files1)
	}
	put(b, v, 0, 500, "b") // 1% of the keys change
	hs2 := take(t, b, 2, w)
	b.NotifyComplete(2)
	// Checkpoint 2 uploads exactly the data files checkpoint 1 did not
	// have (the flushed change, and what compactions wrote since); it
	// references the others where checkpoint 1 put them.
	before := map[string]string{}
	for _, h := range hs1 {
		before[h.File] = h.Path
	}
	newFiles := 0
	for _, h := range hs2 {
		switch path, had := before[h.File]; {
		case h.Kind != KindData:
		case !had:
			newFiles++
		case path != h.Path:
			t.Fatalf("checkpoint 2 uploaded %s again, though checkpoint 1 holds it", h.File)
		}
	}
	if up := w.files - files1; up != newFiles || up == 0 || w.bytes == bytes1 {
		t.Fatalf("checkpoint 2 uploaded %d files; %d are new", up, newFiles)
	}
	// Checkpoint 3 never completes: checkpoint 4 does not reuse its files.
	put(b, v, 500, 1000, "c")
	hs3 := take(t, b, 3, w)
	b.NotifyAborted(3)
	files3 := w.files
	hs4 := take(t, b, 4, w)
	b.NotifyComplete(4)
	reused := map[string]bool{}
	for _, h := range hs3 {
		if h.Kind == KindData {
			reused[h.Path] = true
		}
	}
	for _, h := range hs4 {
		if h.Kind == KindData && reused[h.Path] && !inHandles(hs2, h.Path) {
			t.Fatalf("checkpoint 4 references %s, uploaded for checkpoint 3, which did not complete", h.Path)
		}
	}
	if w.files == files3 {
		t.Fatal("checkpoint 4 uploaded nothing, though checkpoint 3's files are not confirmed")
	}
	_, v2 := open(t, t.TempDir(), true, hs4, w.MemWriter)
	for _, i := range []int{0, 499, 500, 999, 1000, 49_999} {
		want := map[bool]string{true: "b", false: "a"}[i < 500]
		if i >= 500 && i < 1000 {
			want = "c"
		}
		k := fmt.Sprint("key-", i)
		v2.b.SetGroup(i % 128)
		if got, ok := v2.Get(k); !ok || got[:1] != want {
			t.Fatalf("restored %s = %.1q %v, want %q", k, got, ok, want)
		}
	}
}

func inHandles(hs []checkpoint.Handle, path string) bool {
	for _, h := range hs {
		if h.Path == path {
			return true
		}
	}
	return false
}

// TestFullCheckpoints upload every data file every time.
func TestFullCheckpoints(t *testing.T) {
	w := &counting{MemWriter: &operatortest.MemWriter{}}
	b, v := open(t, t.TempDir(), false, nil, nil)
	put(b, v, 0, 20_000, "a")
	take(t, b, 1, w)
	b.NotifyComplete(1)
	first := w.files
	put(b, v, 0, 10, "b")
	hs := take(t, b, 2, w)
	if n, _ := dataOf(hs); w.files-first != n {
		t.Fatalf("checkpoint 2 uploaded %d files and lists %d", w.files-first, n)
	}
}

// TestDamagedDataFilesAreRefused: a restore names a data file that is
// missing or whose bytes changed.
func TestDamagedDataFilesAreRefused(t *testing.T) {
	for _, damage := range []string{"missing", "corrupt"} {
		t.Run(damage, func(t *testing.T) {
			w := &counting{MemWriter: &operatortest.MemWriter{}}
			b, v := open(t, t.TempDir(), true, nil, nil)
			put(b, v, 0, 20_000, "a")
			hs := take(t, b, 1, w)
			var victim checkpoint.Handle
			for _, h := range hs {
				if h.Kind == KindData {
					victim = h
				}
			}
			if damage == "missing" {
				w.Remove(victim)
			} else {
				w.Damage(victim)
			}
			_, err := New(Options{Dir: t.TempDir()}, Scope{Job: "j", Operator: "op", KeyGroups: all}, &state.Restored{Handles: hs, Reader: w.MemWriter})
			if err == nil || !strings.Contains(err.Error(), victim.File) {
				t.Fatalf("restore with a %s data file: %v; want an error naming %s", damage, err, victim.File)
			}
			if !errors.Is(err, checkpoint.ErrStateDamaged) {
				t.Fatalf("a %s file is not reported as damaged state: %v", damage, err)
			}
		})
	}
}

// TestWorkingDirectories: a backend's directory goes with Close; those of
// a process that is gone go when the next backend of the job starts.
func TestWorkingDirectories(t *testing.T) {
	dir := t.TempDir()
	abandoned := filepath.Join(dir, "j", "op-0-p999999999-123")
	if err := os.MkdirAll(abandoned, 0o755); err != nil {
		t.Fatal(err)
	}
	b, _ := open(t, dir, true, nil, nil)
	if _, err := os.Stat(abandoned); !os.IsNotExist(err) {
		t.Fatalf("the directory of a process that is gone is still there: %v", err)
	}
	mine := b.dir
	b.Close()
	if _, err := os.Stat(mine); !os.IsNotExist(err) {
		t.Fatalf("a closed backend's directory is still there: %v", err)
	}
}

// linkedFile is a piece served from a file, as a local copy serves one
// (state.VerifiedFile).
type linkedFile struct{ *os.File }

func (f linkedFile) VerifiedPath() string { return f.Name() }

// kept is a piece streamed from checkpoint storage (state.Keeper) that
// records the file the backend keeps it as.
type kept struct {
	io.ReadCloser
	h    checkpoint.Handle
	kept map[string]string
}

func (k kept) Keep(path string) { k.kept[k.h.File] = path }

// sharing serves the data files from files in dir (verified), or streams
// them and records what the backend keeps.
type sharing struct {
	*operatortest.MemWriter
	dir    string
	stream bool
	kept   map[string]string
}

func (s *sharing) Open(h checkpoint.Handle) (io.ReadCloser, error) {
	data, err := s.MemWriter.Read(h)
	if err != nil || h.Kind != KindData {
		return io.NopCloser(strings.NewReader(string(data))), err
	}
	if s.stream {
		return kept{io.NopCloser(strings.NewReader(string(data))), h, s.kept}, nil
	}
	p := filepath.Join(s.dir, h.File)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	return linkedFile{f}, err
}

// TestRestoreSharesDataFilesWithTheLocalCopy: a data file the local copy
// serves, checked, is hard-linked into the database, not copied; one
// streamed from checkpoint storage is handed to the local copy once it is
// whole in the database.
func TestRestoreSharesDataFilesWithTheLocalCopy(t *testing.T) {
	w := &counting{MemWriter: &operatortest.MemWriter{}}
	b, v := open(t, t.TempDir(), true, nil, nil)
	put(b, v, 0, 20_000, "a")
	hs := take(t, b, 1, w)
	if n, _ := dataOf(hs); n == 0 {
		t.Fatal("the checkpoint has no data file")
	}
	for _, stream := range []bool{false, true} {
		r := &sharing{MemWriter: w.MemWriter, dir: t.TempDir(), stream: stream, kept: map[string]string{}}
		rb, err := New(Options{Dir: t.TempDir()}, Scope{Job: "j", Operator: "op", KeyGroups: all}, &state.Restored{Handles: hs, Reader: r})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if h.Kind != KindData {
				continue
			}
			db := filepath.Join(rb.dir, "db", h.File)
			if stream {
				if r.kept[h.File] != db {
					t.Fatalf("streamed %s: kept %q, want the database's file %s", h.File, r.kept[h.File], db)
				}
				continue
			}
			a, err := os.Stat(db)
			if err != nil {
				t.Fatal(err)
			}
			l, err := os.Stat(filepath.Join(r.dir, h.File))
			if err != nil {
				t.Fatal(err)
			}
			if !os.SameFile(a, l) {
				t.Fatalf("%s was copied from the local copy, not linked", h.File)
			}
		}
		rv, err := NewValue(rb, "v", codec.For[string](), codec.For[string]())
		if err != nil {
			t.Fatal(err)
		}
		rb.SetGroup(7 % 128)
		if got, ok := rv.Get("key-7"); !ok || !strings.HasPrefix(got, "a") {
			t.Fatalf("restored key-7 = %q, %v", got, ok)
		}
		rb.Close()
	}
}

// immutables records the data files uploaded as immutable files.
type immutables struct {
	*operatortest.MemWriter
	paths map[string]string
}

func (w *immutables) WriteShared(h checkpoint.Handle, r io.Reader) (checkpoint.Handle, error) {
	if f, ok := r.(state.ImmutableFile); ok {
		w.paths[h.File] = f.ImmutablePath()
	}
	return w.MemWriter.WriteShared(h, r)
}

// TestDataFilesAreUploadedAsImmutable: every data file a snapshot uploads
// names its file, so that a local copy may link it.
func TestDataFilesAreUploadedAsImmutable(t *testing.T) {
	b, v := open(t, t.TempDir(), true, nil, nil)
	put(b, v, 0, 20_000, "a")
	w := &immutables{MemWriter: &operatortest.MemWriter{}, paths: map[string]string{}}
	async, err := b.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	hs, err := async(w)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, h := range hs {
		if h.Kind != KindData {
			continue
		}
		n++
		if filepath.Base(w.paths[h.File]) != h.File {
			t.Fatalf("data file %s uploaded as %q, not as its immutable file", h.File, w.paths[h.File])
		}
	}
	if n == 0 {
		t.Fatal("the snapshot has no data file")
	}
}
