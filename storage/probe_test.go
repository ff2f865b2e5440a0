package storage

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestProbeErrorsSayNotFound: a probe not there to read back is
// fs.ErrNotExist on every storage, which the coordinator takes for storage
// that is not shared (any other error may pass: storage.Prober).
func TestProbeErrorsSayNotFound(t *testing.T) {
	blob, err := OpenBlob(context.Background(), "mem://probes", "job")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := NewDir(vfs.Default, t.TempDir(), "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	for name, pr := range map[string]Prober{"blob": blob, "dir": dir} {
		if _, err := pr.ReadProbe("never-written"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: reading a probe never written: %v; want fs.ErrNotExist", name, err)
		}
		if err := pr.WriteProbe("w-1", []byte("worker-1")); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got, err := pr.ReadProbe("w-1"); err != nil || string(got) != "worker-1" {
			t.Errorf("%s: read back %q, %v", name, got, err)
		}
	}
}

// TestProbeNamesArePlainFileNames: a probe's name comes from the network;
// only 1 to 128 letters, digits and dashes name a file under the probe
// directory.
func TestProbeNamesArePlainFileNames(t *testing.T) {
	for name, ok := range map[string]bool{
		"a": true, "run-7f3A-9": true, strings.Repeat("x", 128): true,
		"": false, strings.Repeat("x", 129): false, "../x": false, "a/b": false, "a.b": false,
		"a b": false, "a\x00": false, "é": false, "a_b": false,
	} {
		if err := checkProbeName(name); (err == nil) != ok {
			t.Errorf("probe name %q: error %v, want accepted %v", name, err, ok)
		}
	}
}
