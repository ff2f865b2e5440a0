package file

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/operator"
)

// TestLineOverTheLimitIsPermanent: a line longer than MaxLineBytes fails
// the read with a permanent ErrLineTooLong that names the file, the line's
// byte offset and the flag that raises the limit, whether the line is
// shorter or longer than the reader's buffer, in every split size; a line
// of exactly the limit is read.
func TestLineOverTheLimitIsPermanent(t *testing.T) {
	for _, c := range []struct {
		limit      int
		splitBytes []int64
	}{
		{10, []int64{1, 7, 10, 1 << 20}},
		{100 << 10, []int64{30 << 10, 1 << 20}}, // over the 64 KiB read buffer
	} {
		limit := c.limit
		fs := vfs.NewMem()
		ok := strings.Repeat("a", limit)
		long := strings.Repeat("b", limit+1)
		writeFile(t, fs, "/in.txt", "x\n"+ok+"\r\n"+long+"\nz\n")
		wantOffset := 2 + len(ok) + 2
		for _, splitBytes := range c.splitBytes {
			newReader, err := Lines(LinesConfig{FS: fs, Pattern: "/in.txt", MaxLineBytes: limit, SplitBytes: splitBytes})
			if err != nil {
				t.Fatal(err)
			}
			var got lines
			var failures []error
			for sub := range 2 {
				r := newReader()
				r.Open(opCtx(sub, 2, nil))
				for {
					res, err := r.Read(&got)
					if err != nil {
						failures = append(failures, err)
						break
					}
					if res.Exhausted {
						break
					}
				}
			}
			if len(failures) == 0 {
				t.Fatalf("limit %d, splits of %d bytes: a line of %d bytes was read", limit, splitBytes, len(long))
			}
			var atStart bool
			for _, err := range failures {
				if !errors.Is(err, ErrLineTooLong) || !operator.IsPermanent(err) {
					t.Fatalf("limit %d, splits of %d bytes: %v; want a permanent ErrLineTooLong", limit, splitBytes, err)
				}
				for _, want := range []string{"/in.txt", "--max-line-bytes", fmt.Sprint(limit)} {
					if !strings.Contains(err.Error(), want) {
						t.Fatalf("limit %d: %q does not name %q", limit, err, want)
					}
				}
				atStart = atStart || strings.Contains(err.Error(), fmt.Sprintf("the line at byte %d:", wantOffset))
			}
			if !atStart {
				t.Fatalf("limit %d, splits of %d bytes: %v; want one to name the line's start, byte %d", limit, splitBytes, failures, wantOffset)
			}
			for _, l := range got {
				if len(l) > limit {
					t.Fatalf("limit %d, splits of %d bytes: read a line of %d bytes: %q; failures %v", limit, splitBytes, len(l), l, failures)
				}
			}
		}
	}
}

func TestMaxLineBytesIsValidated(t *testing.T) {
	fs := vfs.NewMem()
	writeFile(t, fs, "/in.txt", "x\n")
	for _, n := range []int{-1, MaxMaxLineBytes + 1} {
		if _, err := Lines(LinesConfig{FS: fs, Pattern: "/in.txt", MaxLineBytes: n}); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("max line bytes %d", n)) {
			t.Errorf("MaxLineBytes %d: %v", n, err)
		}
	}
}
