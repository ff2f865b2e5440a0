package runtime

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/storage"
)

// reviewStart runs decideStart for one start on mem at now.
func reviewStart(mem storage.Storage, st Start, now time.Time) (*driver, error) {
	d := &driver{spec: Spec{Name: "j", Storage: mem, Start: st, Now: func() time.Time { return now }}, log: slog.New(slog.DiscardHandler)}
	_, err := d.decideStart()
	return d, err
}

func reviewCommit(t *testing.T, mem storage.Storage, m *checkpoint.Metadata) {
	t.Helper()
	if err := mem.Reserve(m.ID); err != nil {
		t.Fatal(err)
	}
	if err := mem.Commit(m); err != nil {
		t.Fatal(err)
	}
}

// The job's storage holds savepoint 8 of its lineage. The job moves back
// to it from another storage: a start restores that storage's checkpoint
// 20 (same lineage) and is killed before its first checkpoint; then a
// start goes back to savepoint 8, held in the storage and the newest
// there, and is killed too. Its sinks rolled back the output of 9 to 20:
// --restore latest must take 8, not refuse naming checkpoint 20, and a
// restore of 20 by path must be refused (ErrRolledBack).
func TestReviewRollbackBelowARestoreFromElsewhere(t *testing.T) {
	mem := storage.NewMemory(0)
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	sp8 := &checkpoint.Metadata{Job: "j", Lineage: "L", ID: 8, Savepoint: true, Triggered: t0}
	reviewCommit(t, mem, sp8)
	other := &RestorePoint{Metadata: &checkpoint.Metadata{Job: "j", Lineage: "L", ID: 20, Triggered: t0.Add(time.Hour)}, Where: "/other/j/chk-20"}
	if _, err := reviewStart(mem, Start{Point: other}, t0.Add(2*time.Hour)); err != nil {
		t.Fatalf("restore of %s: %v", other.Where, err)
	}
	own := &RestorePoint{Metadata: sp8, Where: "memory"}
	if _, err := reviewStart(mem, Start{Point: own}, t0.Add(3*time.Hour)); err != nil {
		t.Fatalf("restore of savepoint 8 after the start from %s: %v", other.Where, err)
	}
	d, err := reviewStart(mem, Start{Latest: true}, t0.Add(4*time.Hour))
	if err != nil || d.start == nil || d.start.Metadata.ID != 8 {
		t.Fatalf("--restore latest after the start from savepoint 8 (which rolled back the output of %s): %v, restoring %v; want savepoint 8", other.Where, err, d.start)
	}
	if _, err := reviewStart(mem, Start{Point: other}, t0.Add(5*time.Hour)); !errors.Is(err, ErrRolledBack) {
		t.Fatalf("restore of %s again, after a start from savepoint 8 rolled its output back: %v; want ErrRolledBack", other.Where, err)
	}
}

// A rollback record of one lineage (a start back to savepoint 4 over
// savepoint 8) must not be lost when a start of another lineage (a
// checkpoint restored from elsewhere) records its rollback with the same
// highest id: savepoint 8's output stays rolled back.
func TestReviewRollbackOfAnotherLineageKeepsTheRecord(t *testing.T) {
	mem := storage.NewMemory(0)
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	sp4 := &checkpoint.Metadata{Job: "j", Lineage: "A", ID: 4, Savepoint: true, Triggered: t0}
	sp8 := &checkpoint.Metadata{Job: "j", Lineage: "A", ID: 8, Savepoint: true, Triggered: t0.Add(time.Minute)}
	reviewCommit(t, mem, sp4)
	reviewCommit(t, mem, sp8)
	if _, err := reviewStart(mem, Start{Point: &RestorePoint{Metadata: sp4, Where: "memory"}}, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	c6 := &RestorePoint{Metadata: &checkpoint.Metadata{Job: "j", Lineage: "C", ID: 6, Triggered: t0.Add(time.Hour)}, Where: "/elsewhere/j/chk-6"}
	if _, err := reviewStart(mem, Start{Point: c6}, t0.Add(2*time.Hour)); err != nil {
		t.Fatalf("restore of %s: %v", c6.Where, err)
	}
	_, err := reviewStart(mem, Start{Point: &RestorePoint{Metadata: sp8, Where: "memory"}}, t0.Add(3*time.Hour))
	if !errors.Is(err, ErrRolledBack) || !strings.Contains(err.Error(), "checkpoint 4, which a start restored") {
		t.Fatalf("restore of savepoint 8, rolled back by the start from 4: %v; want ErrRolledBack naming 4", err)
	}
}
