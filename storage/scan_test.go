package storage

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/weirstream/weir/checkpoint"
)

// Issue 19, defect 3: an I/O error reading a checkpoint at start is not
// damage. Scan fails with ErrUnavailable naming the file, so that the run
// neither restores an older checkpoint nor deletes this one; only proven
// damage puts a checkpoint in Damaged.
func TestScanTransientErrorIsNotDamage(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind errorfs.OpKind
		path string // suffix of the path that fails
	}{
		{"open metadata", errorfs.OpOpen, "chk-2/_metadata"},
		{"read metadata", errorfs.OpFileRead, "chk-2/_metadata"},
		{"stat metadata", errorfs.OpStat, "chk-2/_metadata"},
		{"stat checkpoint directory", errorfs.OpStat, "chk-2"},
		{"list job directory", errorfs.OpList, "/ckpt/job"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMem()
			d, err := NewDir(mem, "/ckpt", "job", 0)
			if err != nil {
				t.Fatal(err)
			}
			for id := checkpoint.ID(1); id <= 2; id++ {
				if err := takeCheckpoint(d, id); err != nil {
					t.Fatal(err)
				}
			}
			var failed atomic.Int64
			faulty := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
				if op.Kind == tc.kind && strings.HasSuffix(op.Path, tc.path) {
					failed.Add(1)
					return &os.PathError{Op: "read", Path: op.Path, Err: syscall.EIO}
				}
				return nil
			}))
			s, err := newDir(faulty, "/ckpt/job", DefaultInlineBytes).Scan()
			if failed.Load() == 0 {
				t.Fatalf("no %v of %s was made", tc.kind, tc.path)
			}
			if !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), tc.path) {
				t.Fatalf("scan with an EIO on %s: %+v, %v; want an error wrapping ErrUnavailable and EIO that names the file", tc.path, s, err)
			}
			if ProvenDamage(err) {
				t.Fatalf("an EIO classified as damage: %v", err)
			}
			s, err = d.Scan()
			if err != nil || len(s.Completed) != 2 || len(s.Damaged) != 0 {
				t.Fatalf("scan without the fault: %+v, %v; want 2 completed checkpoints", s, err)
			}
		})
	}
}

// Proven damage still makes a checkpoint Damaged, and the scan goes on.
func TestScanProvenDamage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func([]byte) []byte
		want   error
	}{
		{"flipped byte", func(b []byte) []byte { b[len(b)-3] ^= 0x10; return b }, checkpoint.ErrCorrupt},
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }, checkpoint.ErrCorrupt},
		{"empty", func(b []byte) []byte { return nil }, checkpoint.ErrCorrupt},
		{"unknown version", func(b []byte) []byte { b[11] = 99; return b }, checkpoint.ErrVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMem()
			d, err := NewDir(mem, "/ckpt", "job", 0)
			if err != nil {
				t.Fatal(err)
			}
			for id := checkpoint.ID(1); id <= 2; id++ {
				if err := takeCheckpoint(d, id); err != nil {
					t.Fatal(err)
				}
			}
			path := "/ckpt/job/chk-2/_metadata"
			rewrite(t, mem, path, tc.damage)
			s, err := d.Scan()
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Completed) != 1 || len(s.Damaged) != 1 || s.Damaged[0].ID != 2 || !errors.Is(s.Damaged[0].Err, tc.want) || s.MaxID != 2 {
				t.Fatalf("scan: %+v; want checkpoint 1 completed and 2 damaged (%v)", s, tc.want)
			}
		})
	}
}

func rewrite(t *testing.T, fs vfs.FS, path string, change func([]byte) []byte) {
	t.Helper()
	f, err := fs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	data = change(data)
	w, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// Defect 3 on object storage: a GET that fails with anything but
// NotFound (here a 503, every time, through the AWS SDK's retries) fails
// Scan with ErrUnavailable; it does not make the checkpoint damaged.
func TestBlobScanTransientErrorIsNotDamage(t *testing.T) {
	backend := s3mem.New()
	if err := backend.CreateBucket("ckpt"); err != nil {
		t.Fatal(err)
	}
	fake := gofakes3.New(backend).Server()
	var failing atomic.Bool
	var failed atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() && r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/chk-2/_metadata") {
			failed.Add(1)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`<Error><Code>ServiceUnavailable</Code><Message>injected</Message></Error>`))
			return
		}
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("AWS_ACCESS_KEY_ID", "weir")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "weir")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	url := "s3://ckpt/weir?endpoint=" + srv.URL + "&region=us-east-1&use_path_style=true&disable_https=true"
	b, err := OpenBlob(context.Background(), url, "job")
	if err != nil {
		t.Fatal(err)
	}
	for id := checkpoint.ID(1); id <= 2; id++ {
		if err := takeCheckpoint(b, id); err != nil {
			t.Fatal(err)
		}
	}
	failing.Store(true)
	s, err := b.Scan()
	if failed.Load() == 0 {
		t.Fatal("no GET of chk-2/_metadata was made")
	}
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "chk-2/_metadata") || ProvenDamage(err) {
		t.Fatalf("scan with a 503 on chk-2/_metadata: %+v, %v; want an error wrapping ErrUnavailable that names the object", s, err)
	}
	if _, _, err := OpenCheckpointURL(context.Background(), CheckpointLocation(url, "job", 2)); !errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), "never completed") {
		t.Fatalf("open checkpoint 2 with a 503 on its metadata: %v; want ErrUnavailable, not \"never completed\"", err)
	}
	failing.Store(false)
	s, err = b.Scan()
	if err != nil || len(s.Completed) != 2 || len(s.Damaged) != 0 {
		t.Fatalf("scan without the fault: %+v, %v; want 2 completed checkpoints", s, err)
	}
}

// Defect 6 for checkpoint storage: a query that does not parse is an
// error naming the storage, not silently dropped with all after it.
func TestBlobQueryIsParsedStrictly(t *testing.T) {
	for _, raw := range []string{"mem://q?lease=1s;x=y", "mem://q?lease=%zz", "s3://b/p?region=us-east-1;endpoint=http://x"} {
		_, err := OpenBlob(context.Background(), raw, "job")
		if err == nil || !strings.Contains(err.Error(), "query") || !strings.Contains(err.Error(), raw[:strings.Index(raw, "?")]) {
			t.Errorf("OpenBlob(%q): %v; want an error about its query naming the storage", raw, err)
		}
	}
	if _, err := OpenBlob(context.Background(), "mem://q?lease=1s", "job"); err != nil {
		t.Fatal(err)
	}
}
