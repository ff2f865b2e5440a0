package file

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// Found by an outside review of the restore with a changed input (issue 19,
// defect 7); each failed before the fix.

// The same file spelled relative, then absolute (same working
// directory). A file read to the end must not be taken for a new
// file and read again (it was known by its cleaned path only).
func TestAbsoluteSpellingDoesNotReadAFinishedFileAgain(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	fs := vfs.Default
	w := &operatortest.MemWriter{}
	a := numbered(t, fs, "a.txt", 50)
	var got lines
	hs, err := inputRun{fs: fs, w: w, pattern: "a.txt", p: 1, reads: -1}.run(t, &got)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (inputRun{fs: fs, w: w, pattern: filepath.Join(dir, "*.txt"), p: 1, restore: hs, reads: -1}).run(t, &got); err != nil {
		t.Fatal(err)
	}
	once(t, "a.txt, then "+filepath.Join(dir, "*.txt"), got, a)
}

// The same, with the file half read: the restore must not be refused with
// ErrUnreadInputDropped, since the new input matches that very file.
func TestAbsoluteSpellingOfAnUnreadFileIsNotRefused(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	fs := vfs.Default
	w := &operatortest.MemWriter{}
	a := numbered(t, fs, "a.txt", 500)
	var got lines
	hs, err := inputRun{fs: fs, w: w, pattern: "a.txt", p: 1, reads: 3}.run(t, &got)
	if err != nil {
		t.Fatal(err)
	}
	_, err = inputRun{fs: fs, w: w, pattern: filepath.Join(dir, "a.txt"), p: 1, restore: hs, reads: -1}.run(t, &got)
	if errors.Is(err, ErrUnreadInputDropped) {
		t.Fatalf("input %s names the file the checkpoint was reading, yet: %v", filepath.Join(dir, "a.txt"), err)
	}
	if err != nil {
		t.Fatal(err)
	}
	once(t, "a.txt, then its absolute path", got, a)
}

// in a cluster every process builds the job, so each subtask's
// lineReader comes from its own file.Lines call, globbed when that process
// built it (a replacement worker builds it minutes after the others). A
// file that appears in between is "new" to some subtasks only; each deals
// its own list of splits round-robin, so the new file's splits that fell
// to a subtask that did not know it were never read, while the others were.
// Now subtask 0 alone takes new files.
func TestSubtasksThatGlobbedAtDifferentTimesLoseNothing(t *testing.T) {
	fs := vfs.NewMem()
	fs.MkdirAll("/in", 0o755)
	w := &operatortest.MemWriter{}
	a := numbered(t, fs, "/in/a.txt", 500)
	var got lines
	hs, err := inputRun{fs: fs, w: w, pattern: "/in/*.txt", p: 2, reads: 3}.run(t, &got)
	if err != nil {
		t.Fatal(err)
	}
	// The restoring run: subtask 0's process globs before c.txt lands,
	// subtask 1's after.
	before, err := Lines(LinesConfig{FS: fs, Pattern: "/in/*.txt", SplitBytes: 100, BatchLines: 7})
	if err != nil {
		t.Fatal(err)
	}
	c := numbered(t, fs, "/in/c.txt", 300)
	after, err := Lines(LinesConfig{FS: fs, Pattern: "/in/*.txt", SplitBytes: 100, BatchLines: 7})
	if err != nil {
		t.Fatal(err)
	}
	rs := &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read}
	var gotC lines
	for sub, newReader := range []func() weir.SourceReader[string]{before, after} {
		rd := newReader()
		if err := rd.Open(opCtx(sub, 2, rs)); err != nil {
			t.Fatal(err)
		}
		var out lines
		drain(t, rd, &out)
		rd.Close()
		for _, l := range out {
			if strings.HasPrefix(l, "/in/c.txt") {
				gotC = append(gotC, l)
			} else {
				got = append(got, l)
			}
		}
	}
	once(t, "a.txt", got, a)
	if len(gotC) != 0 && len(gotC) != len(c) {
		t.Fatalf("c.txt, which landed between the subtasks' globs: read %d of its %d lines (neither all nor none)", len(gotC), len(c))
	}
}

// a file that was empty when the job globbed (created, not yet
// written: what a landing directory holds for a moment) has no split, yet
// was recorded as known; once written, a restore never read it, and said
// nothing. Now an empty file is not known: the restore reads it.
func TestAFileEmptyAtTheCheckpointIsReadLater(t *testing.T) {
	fs := vfs.NewMem()
	fs.MkdirAll("/in", 0o755)
	w := &operatortest.MemWriter{}
	a := numbered(t, fs, "/in/a.txt", 500)
	writeFile(t, fs, "/in/b.txt", "")
	var got lines
	hs, err := inputRun{fs: fs, w: w, pattern: "/in/*.txt", p: 2, reads: 3}.run(t, &got)
	if err != nil {
		t.Fatal(err)
	}
	b := numbered(t, fs, "/in/b.txt", 100) // its writer filled it since
	if _, err := (inputRun{fs: fs, w: w, pattern: "/in/*.txt", p: 2, restore: hs, reads: -1}).run(t, &got); err != nil {
		t.Fatal(err)
	}
	once(t, "b.txt empty at the checkpoint, filled before the restore", got, a, b)
}
