package file

import (
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestShrunkInputIsRefused: a file truncated after the source took it
// fails the read with a permanent ErrInputShrank that names the file and
// both sizes, on a restore and within a run; before, the split read
// nothing (or other lines) and the rest of the file was lost with exit 0.
func TestShrunkInputIsRefused(t *testing.T) {
	fs := vfs.NewMem()
	fs.MkdirAll("/in", 0o755)
	numbered(t, fs, "/in/a.txt", 100)
	var got lines
	w := &operatortest.MemWriter{}
	hs, err := inputRun{fs: fs, w: w, pattern: "/in/*.txt", p: 1, reads: 1}.run(t, &got)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || len(got) >= 100 {
		t.Fatalf("read %d lines before the snapshot; want some, not all", len(got))
	}
	numbered(t, fs, "/in/a.txt", 10) // truncated and rewritten, shorter
	newReader, err := Lines(LinesConfig{FS: fs, Pattern: "/in/*.txt", SplitBytes: 100, BatchLines: 7})
	if err != nil {
		t.Fatal(err)
	}
	r := newReader()
	if err := r.Open(opCtx(0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read})); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for {
		var res operator.PollResult
		if res, err = r.Read(&got); err != nil || res.Exhausted {
			break
		}
	}
	if err == nil {
		t.Fatal("restore over a shrunk file read it without an error")
	}
	if !errors.Is(err, ErrInputShrank) || !operator.IsPermanent(err) || !strings.Contains(err.Error(), "input /in/a.txt is shorter than when the job took it: ") {
		t.Fatalf("restore over a shrunk file: %v; want a permanent ErrInputShrank naming the file", err)
	}
}
