package local_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/local"
)

// partialWriter is a remote that stores only the first n bytes it is
// given and reports success (a writer that does not drain its reader:
// a deduplicating or size-capped upload).
type partialWriter struct {
	writerOf
	n int64
}

func (p partialWriter) WriteShared(h checkpoint.Handle, r io.Reader) (checkpoint.Handle, error) {
	return p.writerOf.WriteShared(h, io.LimitReader(r, p.n))
}

// changingWriter is a remote that, once it has read the file, sees it
// replaced in place (same inode) before it returns.
type changingWriter struct {
	writerOf
	path string
}

func (c changingWriter) WriteShared(h checkpoint.Handle, r io.Reader) (checkpoint.Handle, error) {
	out, err := c.writerOf.WriteShared(h, r)
	os.WriteFile(c.path, []byte("CHANGED bytes"), 0o644)
	return out, err
}

// setupUpload is checkpoint storage with checkpoint 1 reserved, a local
// copy, and a file to upload as immutable.
func setupUpload(t *testing.T) (*remote, *local.Store, string) {
	t.Helper()
	r, s := setup(t)
	src := filepath.Join(t.TempDir(), "1.sst")
	if err := os.WriteFile(src, []byte("sstable bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.Reserve(1); err != nil {
		t.Fatal(err)
	}
	return r, s, src
}

func uploadImmutable(t *testing.T, w state.Writer, src string) checkpoint.Handle {
	t.Helper()
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := w.WriteShared(checkpoint.Handle{Operator: "op", Kind: "data", File: "1.sst"}, immutable{f, src})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// The local copy of an uploaded immutable file must hold the bytes the
// checkpoint holds (design note 87: the local copy is the checkpoint's
// piece). The tee path kept what the remote read; the link kept the whole
// file, whatever the remote read (found by review 2). Now a linked file
// that is not what the upload read is not kept, and WriteErr says so.
func TestReview2ImmutablePartialReadLocalCopyDiffers(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    func(r *remote, src string) state.Writer
	}{
		{"remote read 5 of 13 bytes", func(r *remote, src string) state.Writer {
			return partialWriter{r.writer(1), 5}
		}},
		{"file replaced in place before the link", func(r *remote, src string) state.Writer {
			return changingWriter{r.writer(1), src}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, s, src := setupUpload(t)
			lt := s.Task("job", "v", 0)
			h := uploadImmutable(t, lt.Writer(1, tc.w(r, src)), src)
			lt.Referenced(1, []checkpoint.Handle{h})
			lt.Complete(1)
			if err := lt.WriteErr(); err == nil || !strings.Contains(err.Error(), "holds 13 bytes") {
				t.Errorf("WriteErr: %v; want the link refused", err)
			}
			remoteBytes, err := r.ReadState(h)
			if err != nil {
				t.Fatal(err)
			}
			localBytes, err := os.ReadFile(localFile(s, h))
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			if err == nil && !bytes.Equal(localBytes, remoteBytes) {
				t.Errorf("the local copy of %s holds %q, the checkpoint %q (handle: %d bytes, crc %08x); WriteErr said nothing", h.Path, localBytes, remoteBytes, h.SizeBytes, h.CRC32C)
			}
		})
	}
}

// After the upload, the local copy and the backend's file are one inode:
// a write to the backend's file in place (a file that was, after all, not
// immutable, against state.ImmutableFile's contract: here a
// truncate-and-rewrite) changes the local copy of a completed checkpoint.
// It costs only the local copy: the restore checks it and reads the piece
// from checkpoint storage.
func TestReview2ImmutableLinkSharesLaterChanges(t *testing.T) {
	r, s, src := setupUpload(t)
	lt := s.Task("job", "v", 0)
	h := uploadImmutable(t, lt.Writer(1, r.writer(1)), src)
	lt.Referenced(1, []checkpoint.Handle{h})
	lt.Complete(1)
	if err := os.WriteFile(src, []byte("other bytes!!"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The restore reads right (the checksum sends it remote).
	restore(t, r, s.Task("job", "v", 0), []checkpoint.Handle{h}, "sstable bytes")
	if n := r.reads.Load(); n == 0 {
		t.Error("no remote read")
	}
}
