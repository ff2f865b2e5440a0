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
	f := &failedCommit{blockLater: true}
	fs := errorfs.Wrap(mem, f)
	r := runOnce(data, fs, 0, nil)
	unsure, reached := f.state()
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
	f := &failedCommit{}
	fs := errorfs.Wrap(mem, f)
	var (
		attemptsMu sync.Mutex
		attempts   []int
	)
	o := wordcount.Options{
		Input: "/in/*.txt", Output: "/out", FS: data, Parallelism: 2, Restore: "latest",
		Checkpoint: weir.CheckpointConfig{Interval: time.Millisecond, Dir: root, FS: fs, Retained: retained, TolerableFailures: 5},
		Restart:    weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: 20},
		Logger:     slog.New(slog.DiscardHandler),
		OnEvent: func(ev weir.JobEvent) {
			if ev.Kind == weir.EventRunning {
				attemptsMu.Lock()
				attempts = append(attempts, ev.Attempt)
				attemptsMu.Unlock()
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
	unsure, reached := f.state()
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

// failedCommit is an errorfs injector: the commit of the first checkpoint
// after the first fails after its metadata was renamed into place (the
// directory sync fails), and so does the abort's delete of that metadata;
// with blockLater, no later checkpoint's commit succeeds either.
type failedCommit struct {
	blockLater bool

	mu     sync.Mutex
	phase  int    // 1: renamed, 2: the sync failed, 3: the delete failed
	unsure string // the checkpoint directory whose commit fails
}

func (f *failedCommit) state() (unsure string, phase int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.unsure, f.phase
}

func (f *failedCommit) String() string { return "a failed commit" }

func (f *failedCommit) MaybeError(op errorfs.Op) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	eio := &os.PathError{Op: "inject", Path: op.Path, Err: syscall.EIO}
	dir, name := path.Split(op.Path)
	dir = strings.TrimSuffix(dir, "/")
	switch {
	case f.phase == 0 && op.Kind == errorfs.OpRename && name == storage.MetadataFile+".tmp" && !strings.HasSuffix(dir, "chk-1"):
		f.phase, f.unsure = 1, dir
	case f.phase == 1 && op.Kind == errorfs.OpFileSync && op.Path == f.unsure:
		f.phase = 2
		return eio // the commit fails after the rename
	case f.phase == 2 && op.Kind == errorfs.OpRemove && op.Path == path.Join(f.unsure, storage.MetadataFile):
		f.phase = 3
		return eio // and so does the abort's delete
	case f.blockLater && f.phase == 3 && op.Kind == errorfs.OpRename && name == storage.MetadataFile+".tmp":
		// No later checkpoint completes: the run gives up with the
		// unsure one the newest in storage.
		return eio
	}
	return nil
}
