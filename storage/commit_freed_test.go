package storage

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/s3test"
)

// TestCommitWhoseFreedFilesStaySaysItCommitted: checkpoints 2 and 3 are in
// flight; 1 is discarded, so its shared file waits for 2 to settle. Every
// DELETE then fails (S3 throttling deletes), and 2 is committed: its
// metadata is written, so 2 is complete, and Commit must say so, with
// ErrFreedFilesStay, not as a failure to commit (the run then discarded a
// complete checkpoint and counted a failure).
func TestCommitWhoseFreedFilesStaySaysItCommitted(t *testing.T) {
	s3 := s3test.Start(t)
	b, err := OpenBlob(context.Background(), s3.URL, "job")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Scan(); err != nil {
		t.Fatal(err)
	}
	write := func(id checkpoint.ID, f string) checkpoint.Handle {
		h, err := b.WriteShared(id, checkpoint.Handle{Operator: "count", Parallelism: 1, Kind: "pebble-data", File: f}, strings.NewReader(f))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	meta := func(id checkpoint.ID, hs ...checkpoint.Handle) *checkpoint.Metadata {
		return &checkpoint.Metadata{Job: "job", ID: id, Triggered: t0, Operators: operators, Tasks: []checkpoint.TaskState{{Task: task, Handles: hs}}}
	}
	for _, id := range []checkpoint.ID{1, 2, 3} {
		if err := b.Reserve(id); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(meta(1, write(1, "a"))); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(meta(3, write(3, "b"))); err != nil {
		t.Fatal(err)
	}
	if err := b.Discard(1); err != nil { // a waits for 2 to settle
		t.Fatal(err)
	}
	c := write(2, "c")
	s3.FailDeletes.Store(true)
	err = b.Commit(meta(2, c))
	s3.FailDeletes.Store(false)
	if !errors.Is(err, ErrFreedFilesStay) || s3.Failed.Load() == 0 {
		t.Fatalf("Commit(2) with every DELETE failing (%d failed): %v, want an error wrapping ErrFreedFilesStay", s3.Failed.Load(), err)
	}
	scan, err := b.Scan()
	if err != nil {
		t.Fatal(err)
	}
	var completed []checkpoint.ID
	for _, m := range scan.Completed {
		completed = append(completed, m.ID)
	}
	if len(completed) != 2 || completed[0] != 2 || completed[1] != 3 {
		t.Fatalf("storage lists completed %v, want [2 3]", completed)
	}
}
