package file

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/operator"
)

// Review: ErrInputShrank is checked only when a split is opened
// (openSplit). A file truncated while its split is open, between two
// Reads of the same split (the reader keeps the file open across Reads),
// ends in io.EOF before the split's End, which Read takes for the end of
// the split (s.Pos = max(s.Pos, s.End)): the rest of the file is lost
// without an error and the source is exhausted normally (exit 0), and a
// line cut in the middle is emitted as if whole. shrank_test.go and the
// commit claim the refusal holds "on a restore and within a run".
func TestFileTruncatedWhileItsSplitIsOpenReview(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.txt")
	var b strings.Builder
	const n = 20000 // > the reader's 64 KiB buffer
	for i := range n {
		fmt.Fprintf(&b, "line %06d\n", i)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	newReader, err := Lines(LinesConfig{FS: vfs.Default, Pattern: filepath.Join(dir, "*.txt"), SplitBytes: 1 << 30, BatchLines: 100})
	if err != nil {
		t.Fatal(err)
	}
	r := newReader()
	if err := r.Open(opCtx(0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got lines
	for len(got) == 0 {
		if res, err := r.Read(&got); err != nil || res.Exhausted {
			t.Fatalf("first read: %v %v", res, err)
		}
	}
	// Truncated mid-line, well past what the reader has buffered.
	if err := os.Truncate(path, int64(len("line 000000\n")*15000+5)); err != nil {
		t.Fatal(err)
	}
	for {
		var res operator.PollResult
		if res, err = r.Read(&got); err != nil || res.Exhausted {
			break
		}
	}
	if !errors.Is(err, ErrInputShrank) {
		t.Fatalf("file truncated from %d to 15000 lines while its split was open: the read ended with %v after %d of %d lines (last %q): the rest is lost without an error; want ErrInputShrank",
			n, err, len(got), n, got[len(got)-1])
	}
}
