package storage_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/weirstream/weir/storage"
)

// A commit that fails after its metadata was renamed into place leaves a
// checkpoint that looks completed in storage. When the abort cannot delete
// it either, the failover must delete it before it restores an older
// checkpoint: that attempt's sinks delete the unsure checkpoint's pending
// output, and a later start would restore it as the latest and find its
// output gone ("pending file … is missing: its records are lost", found by
// TestStorageFaults at seed 8,250 of 10,000).
func TestFailoverDeletesACheckpointWhoseCommitFailed(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	data, mem := vfs.NewMem(), vfs.NewMem()
	files, err := writeInput(data, rng)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		phase  int    // 1: renamed, 2: the sync failed, 3: the delete failed
		unsure string // the checkpoint directory whose commit fails
	)
	eio := func(op errorfs.Op) error { return &os.PathError{Op: "inject", Path: op.Path, Err: syscall.EIO} }
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		mu.Lock()
		defer mu.Unlock()
		dir, name := path.Split(op.Path)
		dir = strings.TrimSuffix(dir, "/")
		switch {
		case phase == 0 && op.Kind == errorfs.OpRename && name == storage.MetadataFile+".tmp" && !strings.HasSuffix(dir, "chk-1"):
			phase, unsure = 1, dir
		case phase == 1 && op.Kind == errorfs.OpFileSync && op.Path == unsure:
			phase = 2
			return eio(op) // the commit fails after the rename
		case phase == 2 && op.Kind == errorfs.OpRemove && op.Path == path.Join(unsure, storage.MetadataFile):
			phase = 3
			return eio(op) // and so does the abort's delete
		case phase == 3 && op.Kind == errorfs.OpRename && name == storage.MetadataFile+".tmp":
			// No later checkpoint completes: the run gives up with the
			// unsure one the newest in storage.
			return eio(op)
		}
		return nil
	}))
	r := runOnce(data, fs, 0, nil)
	mu.Lock()
	reached := phase
	mu.Unlock()
	if reached != 3 {
		t.Fatalf("the faults were not injected (phase %d); the run: %v", reached, r.err)
	}
	if r.err == nil {
		t.Fatal("the run finished though no checkpoint after the failed one could complete")
	}
	s, err := cleanScan(mem)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range s.Completed {
		if path.Base(unsure) == fmt.Sprintf("chk-%d", m.ID) {
			t.Errorf("checkpoint %s, whose commit failed, is still in storage after the failover", unsure)
		}
	}
	if r := runOnce(data, mem, 0, nil); r.err != nil {
		t.Fatalf("the next run (restored %v): %v", r.restoredFrom, r.err)
	}
	checkOutput(t, data, files)
}
