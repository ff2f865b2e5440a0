package file

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// inputRun is one run of the file source's subtasks over a pattern.
type inputRun struct {
	fs      vfs.FS
	w       *operatortest.MemWriter
	pattern string
	p       int                 // parallelism
	restore []checkpoint.Handle // nil: a fresh start
	reads   int                 // Reads per subtask before the snapshot; < 0: to the end
}

// run opens the subtasks, reads, and returns the handles of their snapshot
// (checkpoint 1 of the next run), or the first Open error.
func (r inputRun) run(t *testing.T, got *lines) ([]checkpoint.Handle, error) {
	t.Helper()
	newReader, err := Lines(LinesConfig{FS: r.fs, Pattern: r.pattern, SplitBytes: 100, BatchLines: 7})
	if err != nil {
		t.Fatal(err)
	}
	var rs *operator.Restore
	if r.restore != nil {
		rs = &operator.Restore{Checkpoint: 1, Handles: r.restore, Read: r.w.Read}
	}
	var hs []checkpoint.Handle
	for sub := range r.p {
		rd := newReader().(*lineReader)
		if err := rd.Open(opCtx(sub, r.p, rs)); err != nil {
			return nil, err
		}
		if r.reads < 0 {
			drain(t, rd, got)
		}
		for range r.reads {
			if _, err := rd.Read(got); err != nil {
				t.Fatal(err)
			}
		}
		async, err := rd.Snapshot(1)
		if err != nil {
			t.Fatal(err)
		}
		more, err := async(r.w)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, more...)
		rd.Close()
	}
	return hs, nil
}

// numbered writes n lines "name i" to path and returns them.
func numbered(t *testing.T, fs vfs.FS, path string, n int) []string {
	t.Helper()
	var b strings.Builder
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("%s %d", path, i))
		b.WriteString(want[i] + "\n")
	}
	writeFile(t, fs, path, b.String())
	return want
}

// once fails unless got holds every line of want exactly once.
func once(t *testing.T, what string, got lines, want ...[]string) {
	t.Helper()
	all := slices.Concat(want...)
	slices.Sort(all)
	slices.Sort(got)
	if !slices.Equal(got, all) {
		var lost, twice []string
		for _, l := range all {
			if _, ok := slices.BinarySearch(got, l); !ok {
				lost = append(lost, l)
			}
		}
		for i := 1; i < len(got); i++ {
			if got[i] == got[i-1] {
				twice = append(twice, got[i])
			}
		}
		t.Fatalf("%s: read %d lines, want %d; lost %d (%q…), read twice %d (%q…)", what, len(got), len(all), len(lost), lost[:min(3, len(lost))], len(twice), twice[:min(3, len(twice))])
	}
}

// TestWidenedInputAtAnyParallelism: a restore whose input matches files the
// checkpoint does not know (an empty one too) reads them from their start,
// and the checkpointed files from their positions, at the parallelism of
// the checkpoint, lower or higher; the next checkpoint knows them, so a
// second restore does not read them again.
func TestWidenedInputAtAnyParallelism(t *testing.T) {
	for _, p := range [][2]int{{2, 2}, {2, 3}, {3, 1}} {
		fs := vfs.NewMem()
		fs.MkdirAll("/in", 0o755)
		w := &operatortest.MemWriter{}
		a := numbered(t, fs, "/in/a.txt", 500)
		var got lines
		hs, err := inputRun{fs: fs, w: w, pattern: "/in/a.txt", p: p[0], reads: 3}.run(t, &got)
		if err != nil {
			t.Fatal(err)
		}
		b := numbered(t, fs, "/in/b.txt", 300)
		writeFile(t, fs, "/in/empty.txt", "")
		hs, err = inputRun{fs: fs, w: w, pattern: "/in/*.txt", p: p[1], restore: hs, reads: 5}.run(t, &got)
		if err != nil {
			t.Fatal(err)
		}
		c := numbered(t, fs, "/in/c.txt", 200)
		if _, err := (inputRun{fs: fs, w: w, pattern: "/in/*.txt", p: p[0], restore: hs, reads: -1}).run(t, &got); err != nil {
			t.Fatal(err)
		}
		once(t, fmt.Sprintf("parallelism %d, then %d, then %d", p[0], p[1], p[0]), got, a, b, c)
	}
}

// TestFinishedFilesAreNotReadAgain: a file read to the end holds no split
// in the checkpoint, but the checkpoint knows it: a restore does not take
// it for a new file, nor refuse an input that no longer matches it (its
// lines were all read); once known, it stays known.
func TestFinishedFilesAreNotReadAgain(t *testing.T) {
	fs := vfs.NewMem()
	fs.MkdirAll("/in", 0o755)
	w := &operatortest.MemWriter{}
	small := numbered(t, fs, "/in/a.txt", 3) // one split, read by subtask 0's first Read
	big := numbered(t, fs, "/in/b.txt", 500)
	var got lines
	hs, err := inputRun{fs: fs, w: w, pattern: "/in/*.txt", p: 1, reads: 2}.run(t, &got)
	if err != nil {
		t.Fatal(err)
	}
	hs, err = inputRun{fs: fs, w: w, pattern: "/in/*.txt", p: 2, restore: hs, reads: 2}.run(t, &got)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Remove("/in/a.txt"); err != nil {
		t.Fatal(err)
	}
	hs, err = inputRun{fs: fs, w: w, pattern: "/in/*.txt", p: 2, restore: hs, reads: 2}.run(t, &got)
	if err != nil {
		t.Fatalf("restore after deleting a file read to the end: %v", err)
	}
	numbered(t, fs, "/in/a.txt", 3)
	if _, err := (inputRun{fs: fs, w: w, pattern: "/in/*.txt", p: 1, restore: hs, reads: -1}).run(t, &got); err != nil {
		t.Fatal(err)
	}
	once(t, "a finished file deleted and put back", got, small, big)
}

// TestDroppingUnreadInputIsRefused: a restore whose input no longer matches
// a file with unread lines (left out of the pattern, or deleted) fails in
// every subtask with a permanent ErrUnreadInputDropped that names the file,
// both inputs and the fix; the old input then restores every line once.
func TestDroppingUnreadInputIsRefused(t *testing.T) {
	fs := vfs.NewMem()
	fs.MkdirAll("/in", 0o755)
	w := &operatortest.MemWriter{}
	a := numbered(t, fs, "/in/a.txt", 500)
	b := numbered(t, fs, "/in/b.txt", 500)
	var got lines
	hs, err := inputRun{fs: fs, w: w, pattern: "/in/[ab].txt", p: 2, reads: 3}.run(t, &got)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what, pattern string, p int) {
		t.Helper()
		for sub := range p {
			newReader, err := Lines(LinesConfig{FS: fs, Pattern: pattern})
			if err != nil {
				t.Fatal(err)
			}
			err = newReader().Open(opCtx(sub, p, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read}))
			if !errors.Is(err, ErrUnreadInputDropped) || !operator.IsPermanent(err) {
				t.Fatalf("%s, subtask %d of %d: %v; want a permanent ErrUnreadInputDropped", what, sub, p, err)
			}
			for _, want := range []string{"restore checkpoint 1: input " + pattern + " no longer matches", ": /in/a.txt (the checkpoint was taken reading input /in/[ab].txt)", "such as /in/[ab].txt", "or put them back"} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("%s: %v\ndoes not say %q", what, err, want)
				}
			}
		}
	}
	check("a narrowed input", "/in/b.txt", 3)
	check("a narrowed glob", "/in/[b].txt", 1)
	fs.Rename("/in/a.txt", "/in/a.moved")
	check("a deleted file", "/in/*.txt", 2)
	fs.Rename("/in/a.moved", "/in/a.txt")

	if _, err := (inputRun{fs: fs, w: w, pattern: "/in/[ab].txt", p: 2, restore: hs, reads: -1}).run(t, &got); err != nil {
		t.Fatal(err)
	}
	once(t, "the old input after the refusals", got, a, b)
}

// TestCheckpointWithoutFileRecord: a checkpoint taken before the source
// recorded its files (positions only) restores as it did: the files it
// holds positions for resume, matched files it does not know are taken as
// read; an input that drops an unread file is refused all the same.
func TestCheckpointWithoutFileRecord(t *testing.T) {
	fs := vfs.NewMem()
	fs.MkdirAll("/in", 0o755)
	w := &operatortest.MemWriter{}
	a := numbered(t, fs, "/in/a.txt", 500)
	var got lines
	hs, err := inputRun{fs: fs, w: w, pattern: "/in/a.txt", p: 2, reads: 3}.run(t, &got)
	if err != nil {
		t.Fatal(err)
	}
	hs = slices.DeleteFunc(hs, func(h checkpoint.Handle) bool { return !strings.HasSuffix(h.Kind, ":splits") })
	numbered(t, fs, "/in/b.txt", 300)
	if _, err := (inputRun{fs: fs, w: w, pattern: "/in/*.txt", p: 3, restore: hs, reads: -1}).run(t, &got); err != nil {
		t.Fatal(err)
	}
	once(t, "a checkpoint without a file record", got, a)

	newReader, err := Lines(LinesConfig{FS: fs, Pattern: "/in/b.txt"})
	if err != nil {
		t.Fatal(err)
	}
	err = newReader().Open(opCtx(0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read}))
	if !errors.Is(err, ErrUnreadInputDropped) || !strings.Contains(err.Error(), ": /in/a.txt; restore with an input that matches them, or put them back") {
		t.Fatalf("dropping an unread file from a checkpoint without a file record: %v", err)
	}
}

// TestInputSpelledAnotherWay: a file is known by its cleaned path, so an
// input "./a.txt", then "*.txt", reads it once.
func TestInputSpelledAnotherWay(t *testing.T) {
	t.Chdir(t.TempDir())
	fs := vfs.Default
	w := &operatortest.MemWriter{}
	a := numbered(t, fs, "a.txt", 500)
	var got lines
	hs, err := inputRun{fs: fs, w: w, pattern: "./a.txt", p: 1, reads: 3}.run(t, &got)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (inputRun{fs: fs, w: w, pattern: "*.txt", p: 2, restore: hs, reads: -1}).run(t, &got); err != nil {
		t.Fatal(err)
	}
	once(t, "./a.txt, then *.txt", got, a)
}
