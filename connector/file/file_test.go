package file

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

type lines []string

func (l *lines) Collect(s string) { *l = append(*l, s) }

// drain reads r until it is exhausted.
func drain(t *testing.T, r weir.SourceReader[string], out *lines) {
	t.Helper()
	for {
		res, err := r.Read(out)
		if err != nil {
			t.Fatal(err)
		}
		if res.Exhausted {
			return
		}
	}
}

func writeFile(t *testing.T, fs vfs.FS, path, content string) {
	t.Helper()
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(f, content)
	f.Close()
}

func opCtx(sub, p int, r *operator.Restore) *operator.Context {
	return &operator.Context{UID: "src", Subtask: sub, Parallelism: p, Restore: r, Now: time.Now}
}

// TestLinesReadEveryLineOnce reads files in byte-range splits of every size
// from 1 byte up, over 1 to 3 subtasks, and requires every line exactly
// once: lines crossing a split boundary, empty lines, CRLF, and a last line
// without a newline.
func TestLinesReadEveryLineOnce(t *testing.T) {
	fs := vfs.NewMem()
	fs.MkdirAll("/in", 0o755)
	contents := []string{
		"alpha\nbeta gamma\n\ndelta\r\nepsilon-without-newline",
		"x\ny\n",
		"a long line that crosses many small splits of a few bytes each\nshort\n",
	}
	var want []string
	for i, c := range contents {
		writeFile(t, fs, fmt.Sprintf("/in/f%d.txt", i), c)
		for _, l := range strings.Split(strings.TrimSuffix(c, "\n"), "\n") {
			want = append(want, strings.TrimSuffix(l, "\r"))
		}
	}
	slices.Sort(want)
	for splitBytes := int64(1); splitBytes <= 40; splitBytes++ {
		for p := 1; p <= 3; p++ {
			newReader, err := Lines(LinesConfig{FS: fs, Pattern: "/in/*.txt", SplitBytes: splitBytes, BatchLines: 2})
			if err != nil {
				t.Fatal(err)
			}
			var got lines
			for sub := range p {
				r := newReader()
				r.Open(opCtx(sub, p, nil))
				drain(t, r, &got)
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("split %d bytes, parallelism %d: read %q\nwant %q", splitBytes, p, got, want)
			}
		}
	}
}

// TestLinesResumeFromSnapshot stops reading midway, snapshots, and resumes
// in new readers (at another parallelism): every line once in all.
func TestLinesResumeFromSnapshot(t *testing.T) {
	fs := vfs.NewMem()
	var b strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	writeFile(t, fs, "/big.txt", b.String())
	newReader, err := Lines(LinesConfig{FS: fs, Pattern: "/big.txt", SplitBytes: 1000, BatchLines: 37})
	if err != nil {
		t.Fatal(err)
	}
	w := &operatortest.MemWriter{}
	var got lines
	var handles []checkpoint.Handle
	for sub := range 2 {
		r := newReader()
		r.Open(opCtx(sub, 2, nil))
		for range 3 {
			r.Read(&got)
		}
		async, err := r.Snapshot(1)
		if err != nil {
			t.Fatal(err)
		}
		hs, err := async(w)
		if err != nil {
			t.Fatal(err)
		}
		handles = append(handles, hs...)
		r.Close()
	}
	for sub := range 3 {
		r := newReader()
		if err := r.Open(opCtx(sub, 3, &operator.Restore{Checkpoint: 1, Handles: handles, Read: w.Read})); err != nil {
			t.Fatal(err)
		}
		drain(t, r, &got)
	}
	if len(got) != 1000 {
		t.Fatalf("read %d lines, want 1000", len(got))
	}
	slices.Sort(got)
	if distinct := len(slices.Compact(got)); distinct != 1000 {
		t.Fatalf("%d distinct lines of 1000 read: a line was read twice", distinct)
	}
}

func sinkFor(t *testing.T, fs vfs.FS, sub, p int, r *operator.Restore) *fileSink[string] {
	t.Helper()
	newSink, err := Sink(SinkConfig[string]{FS: fs, Dir: "/out", Format: func(dst []byte, s string) []byte { return append(append(dst, s...), '\n') }})
	if err != nil {
		t.Fatal(err)
	}
	s := newSink().(*fileSink[string])
	if err := s.Open(&operator.Context{UID: "sink", Subtask: sub, Parallelism: p, Restore: r, Now: time.Now}); err != nil {
		t.Fatal(err)
	}
	return s
}

func committed(t *testing.T, fs vfs.FS) (names []string, lines []string) {
	t.Helper()
	all, _ := fs.List("/out")
	slices.Sort(all)
	for _, n := range all {
		if strings.HasPrefix(n, ".") {
			continue
		}
		names = append(names, n)
		f, _ := fs.Open("/out/" + n)
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		f.Close()
	}
	return names, lines
}

func snapshot(t *testing.T, s *fileSink[string], id checkpoint.ID, w *operatortest.MemWriter) []checkpoint.Handle {
	t.Helper()
	async, err := s.Snapshot(id)
	if err != nil {
		t.Fatal(err)
	}
	hs, err := async(w)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

// TestSinkTwoPhaseCommit: records become visible only when their checkpoint
// completes; a restore commits what the checkpoint recorded and deletes
// everything else the failed attempt left.
func TestSinkTwoPhaseCommit(t *testing.T) {
	fs := vfs.NewMem()
	w := &operatortest.MemWriter{}
	s := sinkFor(t, fs, 0, 1, nil)
	s.Write("a")
	s.Write("b")
	snapshot(t, s, 1, w)
	if names, _ := committed(t, fs); len(names) != 0 {
		t.Fatalf("visible before the checkpoint completed: %v", names)
	}
	s.NotifyComplete(1)
	if _, got := committed(t, fs); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("after completion of 1: %v", got)
	}
	s.Write("c")
	hs := snapshot(t, s, 2, w) // checkpoint 2 completes, but the process dies before the notification
	s.Write("d")               // after barrier 2: will be replayed
	snapshot(t, s, 3, w)       // checkpoint 3 never completes
	s.Close()

	r := sinkFor(t, fs, 0, 1, &operator.Restore{Checkpoint: 2, Handles: hs, Read: w.Read})
	_, got := committed(t, fs)
	if !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("after restore from 2: %v", got)
	}
	all, _ := fs.List("/out")
	for _, n := range all {
		if strings.HasPrefix(n, ".") {
			t.Fatalf("stray %s left after restore", n)
		}
	}
	// Restoring again (a crash during the restore) is harmless: commit is
	// idempotent.
	r.Close()
	sinkFor(t, fs, 0, 1, &operator.Restore{Checkpoint: 2, Handles: hs, Read: w.Read}).Close()
	if _, again := committed(t, fs); !slices.Equal(again, got) {
		t.Fatalf("second restore changed the output: %v", again)
	}
}

func TestSinkReportsLostPendingFile(t *testing.T) {
	fs := vfs.NewMem()
	w := &operatortest.MemWriter{}
	s := sinkFor(t, fs, 0, 1, nil)
	s.Write("a")
	hs := snapshot(t, s, 1, w)
	s.Close()
	fs.Remove("/out/" + pendingName(0, 1))
	newSink, _ := Sink(SinkConfig[string]{FS: fs, Dir: "/out", Format: func(dst []byte, s string) []byte { return append(dst, s...) }})
	err := newSink().Open(&operator.Context{UID: "sink", Parallelism: 1, Restore: &operator.Restore{Handles: hs, Read: w.Read}, Now: time.Now})
	if err == nil || !strings.Contains(err.Error(), "records are lost") {
		t.Fatalf("restore with a missing pending file: %v", err)
	}
}

func TestSinkFullDisk(t *testing.T) {
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpFileSync && strings.Contains(op.Path, "inprogress") {
			return errors.New("no space left on device")
		}
		return nil
	}))
	w := &operatortest.MemWriter{}
	s := sinkFor(t, fs, 0, 1, nil)
	s.Write("a")
	async, err := s.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := async(w); err == nil || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("pre-commit on a full disk: %v", err)
	}
}
