package storage_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/storage"
)

// TestSamePlace: two spellings of one job's checkpoint directory or bucket
// are one place (a restore by path of the job's own damaged checkpoint
// falls back, as --restore latest does); another directory, bucket, prefix
// or query (which may pick another server) is another place (no fallback,
// which would delete the job's own checkpoint of the same id).
func TestSamePlace(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.MkdirAll(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, real)
	if err != nil {
		t.Fatal(err)
	}
	open := func(where, job string) storage.Storage {
		t.Helper()
		if storage.IsURL(where) {
			b, err := storage.OpenBlob(context.Background(), where, job)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		d, err := storage.NewDir(vfs.Default, where, job, 0)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{real, filepath.Join(dir, "link"), true},
		{real, rel, true},
		{real, real + "/", true},
		{real, filepath.Join(dir, "other"), false},
		{"mem://sameplace/p", "mem://sameplace//p/", true},
		{"mem://sameplace/p?lease=20s", "mem://sameplace/p", true},
		{"mem://sameplace/p", "mem://sameplace/q", false},
		{"mem://sameplace/p", "mem://elsewhere/p", false},
		{"s3://b/p?endpoint=http://127.0.0.1:1&region=x", "s3://b/p?region=x&endpoint=http://127.0.0.1:1", true},
		{"s3://b/p?endpoint=http://127.0.0.1:1&region=x", "s3://b/p?endpoint=http://127.0.0.1:2&region=x", false},
		{real, "mem://sameplace/p", false},
	} {
		if got := storage.SamePlace(open(c.a, "job"), open(c.b, "job")); got != c.same {
			t.Errorf("SamePlace(%s, %s) = %v, want %v", c.a, c.b, got, c.same)
		}
	}
	if storage.SamePlace(open(real, "job"), open(real, "other")) {
		t.Error("two jobs' directories are one place")
	}
	if storage.SamePlace(storage.NewMemory(0), storage.NewMemory(0)) {
		t.Error("memory storage is a place")
	}
}
