package runtime

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/storage"
)

// A run restored savepoint 4 over savepoint 8 (a rollback, recorded) and
// completed checkpoint 9, whose state turns out damaged. The fallback
// skips savepoint 8, whose output the rollback deleted, restores 4, and
// records that it rolls back 9 too.
func TestFallbackSkipsRolledBackSavepoints(t *testing.T) {
	mem := storage.NewMemory(0)
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	for _, m := range []*checkpoint.Metadata{
		{Job: "j", Lineage: "L", ID: 4, Savepoint: true, Triggered: t0},
		{Job: "j", Lineage: "L", ID: 8, Savepoint: true, Triggered: t0.Add(time.Minute)},
		{Job: "j", Lineage: "L", ID: 9, Triggered: t0.Add(2 * time.Minute)},
	} {
		if err := mem.Reserve(m.ID); err != nil {
			t.Fatal(err)
		}
		if err := mem.Commit(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := mem.RecordRollback(storage.Rollback{Restored: 4, Lineage: "L", Through: 8, At: t0.Add(90 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Hour)
	d := &driver{spec: Spec{Name: "j", Storage: mem, Now: func() time.Time { return now }}, log: slog.New(slog.DiscardHandler), unsure: map[checkpoint.ID]bool{}, lineage: "L"}
	prev, abandoned, err := d.previous(9)
	if err != nil || prev.Metadata.ID != 4 || len(abandoned) != 1 || abandoned[0] != 9 {
		t.Fatalf("checkpoint 9 is damaged: the fallback restores %v, abandons %v (%v); want savepoint 4, abandoning 9", prev, abandoned, err)
	}
	if err := d.abandon(abandoned); err != nil {
		t.Fatal(err)
	}
	scan, err := mem.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if m := scan.Latest(); m == nil || m.ID != 4 {
		t.Fatalf("after the fallback to 4, --restore latest would restore %v; want 4", m)
	}
	if r := scan.Rollbacks[len(scan.Rollbacks)-1]; r.Restored != 4 || r.Through != 9 || !r.At.Equal(now) {
		t.Fatalf("the fallback recorded %+v; want a rollback to 4 through 9, now", r)
	}
}

// When every checkpoint in storage was rolled back and the one the
// rollback restored is gone (disposed), neither --restore latest nor a
// start without a restore begins from nothing over them.
func TestNothingLeftButRolledBackIsRefused(t *testing.T) {
	mem := storage.NewMemory(0)
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	m := &checkpoint.Metadata{Job: "j", Lineage: "L", ID: 8, Savepoint: true, Triggered: t0}
	if err := mem.Reserve(8); err != nil {
		t.Fatal(err)
	}
	if err := mem.Commit(m); err != nil {
		t.Fatal(err)
	}
	if err := mem.RecordRollback(storage.Rollback{Restored: 4, Lineage: "L", Through: 8, At: t0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	for _, latest := range []bool{true, false} {
		d := &driver{spec: Spec{Name: "j", Storage: mem, Start: Start{Latest: latest}}, log: slog.New(slog.DiscardHandler)}
		if _, err := d.decideStart(); !errors.Is(err, ErrEarlierRun) || d.start != nil {
			t.Fatalf("start (latest %v) over savepoint 8 alone, rolled back to 4: %v, restoring %v; want it refused (ErrEarlierRun)", latest, err, d.start)
		}
	}
}
