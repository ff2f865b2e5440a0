package storage_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/examples/wordcount"
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

// A job that tolerates checkpoint failures does not fail over: the unsure
// checkpoint is deleted at the next completed checkpoint (it was left in
// storage for good, looking completed, for a later fallback or --restore to
// pick; found by an outside review).
func TestUnsureCheckpointDeletedWithoutAFailover(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	data, mem := vfs.NewMem(), vfs.NewMem()
	if _, err := writeInput(data, rng); err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		phase  int
		unsure string
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
		}
		return nil
	}))
	var attempts []int
	o := wordcount.Options{
		Input: "/in/*.txt", Output: "/out", FS: data, Parallelism: 2, Restore: "latest",
		Checkpoint: weir.CheckpointConfig{Interval: time.Millisecond, Dir: root, FS: fs, Retained: retained, TolerableFailures: 5},
		Restart:    weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: 20},
		Logger:     slog.New(slog.DiscardHandler),
		OnEvent: func(ev weir.JobEvent) {
			if ev.Kind == weir.EventRunning {
				mu.Lock()
				attempts = append(attempts, ev.Attempt)
				mu.Unlock()
			}
		},
	}
	e, err := wordcount.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := e.Execute(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	reached := phase
	mu.Unlock()
	if reached != 3 {
		t.Fatalf("the faults were not injected (phase %d)", reached)
	}
	s, err := cleanScan(mem)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range s.Completed {
		if path.Base(unsure) == fmt.Sprintf("chk-%d", m.ID) {
			t.Errorf("checkpoint %s, whose commit failed, is still in storage as completed after the job finished (attempts %v; storage holds %v)", unsure, attempts, completedIDs(s))
		}
	}
}
