package weir_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/examples/wordcount"
)

// stopWithSavepoint runs the word count (o.Restore as given) until k
// checkpoints completed, stops it with a savepoint and returns its id.
func stopWithSavepoint(t *testing.T, o wordcount.Options, k int) checkpoint.ID {
	t.Helper()
	o.BeforeCount = wordcount.Paced(200)
	addrs := make(chan string, 1)
	o.Web, o.WebToken, o.OnWeb = "127.0.0.1:0", "tok", func(a string) { addrs <- a }
	completed := make(chan struct{}, 64)
	o.OnEvent = func(ev weir.JobEvent) {
		if ev.Kind == weir.EventCheckpointCompleted {
			completed <- struct{}{}
		}
	}
	e, err := wordcount.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		r   weir.Result
		err error
	}
	done := make(chan res, 1)
	go func() {
		r, err := e.Execute(context.Background())
		done <- res{r, err}
	}()
	addr := <-addrs
	for range k {
		<-completed
	}
	if _, err := postSavepoint(addr, true); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.r.StoppedWith == 0 {
		t.Fatalf("run to stop with a savepoint: %v, stopped with %d (the input must outlast %d checkpoints)", r.err, r.r.StoppedWith, k)
	}
	return r.r.StoppedWith
}

// stopBeforeACheckpoint runs the word count from o.Restore and cancels it
// at its first word counted, after its sinks opened (and rolled back) and
// before any checkpoint of its own.
func stopBeforeACheckpoint(t *testing.T, o wordcount.Options) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o.BeforeCount = func(string) { cancel() }
	o.OnEvent = func(ev weir.JobEvent) {
		if ev.Kind == weir.EventCheckpointCompleted {
			t.Errorf("checkpoint %d completed in the run meant to stop before its first", ev.ID)
		}
	}
	e, err := wordcount.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Execute(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("run from %s: %v", o.Restore, err)
	}
}

// A run that restores an older savepoint than the storage's newest rolls
// back the output committed after it. Killed before it completes a
// checkpoint of its own, the next start with --restore latest must restore
// that savepoint again, not the newer one whose output is gone.
func TestLatestAfterARollbackIsItsPoint(t *testing.T) {
	dir := t.TempDir()
	o := wcInput(t, dir)
	a := stopWithSavepoint(t, o, 2)
	o.Restore = "latest"
	b := stopWithSavepoint(t, o, 2)
	if b <= a {
		t.Fatalf("savepoints %d, %d", a, b)
	}
	// Restore a by path; the run stops before its first checkpoint.
	o.Restore = filepath.Join(dir, "ckpt", "wordcount", fmt.Sprintf("chk-%d", a))
	stopBeforeACheckpoint(t, o)
	// Savepoint b's output is rolled back: its restore is refused, and
	// deletes nothing.
	o.Restore = filepath.Join(dir, "ckpt", "wordcount", fmt.Sprintf("chk-%d", b))
	if _, err := executeErr(t, o); !errors.Is(err, weir.ErrRolledBack) || !strings.Contains(err.Error(), fmt.Sprintf("checkpoint %d, which a start restored", a)) {
		t.Fatalf("restore of savepoint %d after the rollback to %d: %v; want it refused (weir.ErrRolledBack), naming %d", b, a, err, a)
	}
	o.Restore = "latest"
	var restored []checkpoint.ID
	o.OnEvent = func(ev weir.JobEvent) {
		if ev.Kind == weir.EventRunning {
			restored = append(restored, ev.RestoredFrom)
		}
	}
	if _, err := executeErr(t, o); err != nil {
		t.Fatalf("--restore latest after the rollback to savepoint %d (savepoint %d is newer): %v", a, b, err)
	}
	if len(restored) == 0 || restored[0] != a {
		t.Errorf("--restore latest restored %v; want savepoint %d, which the last run started from", restored, a)
	}
	if rep := report(t, o); !rep.OK() {
		t.Fatalf("after --restore latest: %v", rep)
	}
}

// A run that restores a savepoint moved out of the job's storage and stops
// before its first checkpoint leaves --restore latest nothing right to
// restore in the storage: it is refused, naming the savepoint to restore
// again.
func TestLatestAfterARestoreFromElsewhereNamesIt(t *testing.T) {
	dir := t.TempDir()
	o := wcInput(t, dir)
	a := stopWithSavepoint(t, o, 2)
	o.Restore = "latest"
	stopWithSavepoint(t, o, 2)
	// The savepoint moves out, with the shared files it references.
	job := filepath.Join(dir, "ckpt", "wordcount")
	if err := os.CopyFS(filepath.Join(dir, "kept"), os.DirFS(job)); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(job, fmt.Sprintf("chk-%d", a))); err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(dir, "kept", fmt.Sprintf("chk-%d", a))
	o.Restore = kept
	stopBeforeACheckpoint(t, o)
	o.Restore = "latest"
	if _, err := executeErr(t, o); err == nil || !strings.Contains(err.Error(), "--restore "+kept) {
		t.Fatalf("--restore latest after a start from %s that completed no checkpoint: %v; want it refused, naming it", kept, err)
	}
	// Nor does verify compare the output with the storage's own newest.
	v, err := wordcount.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), weir.VerifyConfig{}); err == nil || !strings.Contains(err.Error(), "no checkpoint has completed since") {
		t.Fatalf("verify after a start from %s that completed no checkpoint: %v; want it refused, naming it", kept, err)
	}
	o.Restore = kept
	if _, err := executeErr(t, o); err != nil {
		t.Fatalf("restore of %s again: %v", kept, err)
	}
	if rep := report(t, o); !rep.OK() {
		t.Fatalf("after restoring %s again: %v", kept, rep)
	}
}

// The checkpoints a rollback deletes (the newer ones that are not
// savepoints) leave their ids in its record's range: the checkpoints of
// the runs after it take ids above that range, or --restore latest would
// take them for rolled back and restore the older checkpoint again.
func TestCheckpointsAfterARollbackAreNotRolledBack(t *testing.T) {
	dir := t.TempDir()
	o := wcInput(t, dir)
	a := stopWithSavepoint(t, o, 2)
	o.Restore = "latest"
	cancelAfter(t, o, 3) // checkpoints after a, none a savepoint
	// Back to a, stopped before its first checkpoint: the newer
	// checkpoints are deleted.
	o.Restore = filepath.Join(dir, "ckpt", "wordcount", fmt.Sprintf("chk-%d", a))
	stopBeforeACheckpoint(t, o)
	o.Restore = "latest"
	cancelAfter(t, o, 2)
	chks := completedCheckpoints(dir)
	last := filepath.Base(chks[len(chks)-1])
	var restored []checkpoint.ID
	o.OnEvent = func(ev weir.JobEvent) {
		if ev.Kind == weir.EventRunning {
			restored = append(restored, ev.RestoredFrom)
		}
	}
	if _, err := executeErr(t, o); err != nil {
		t.Fatal(err)
	}
	if len(restored) == 0 || fmt.Sprint("chk-", restored[0]) != last {
		t.Errorf("--restore latest restored %v; want %s, the newest (the storage holds %v after the rollback to %d)", restored, last, chks, a)
	}
	if rep := report(t, o); !rep.OK() {
		t.Fatalf("after --restore latest: %v", rep)
	}
}
