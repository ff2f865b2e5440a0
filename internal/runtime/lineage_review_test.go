package runtime

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/storage"
)

// Review of d5fea69 (lineages): startedOverSince takes "newer" to mean a
// higher id, but ids are per storage (storage.Scan.MaxID is the highest
// directory present) and start again at 1 once the storage is empty: a run
// that started over in an emptied storage has lower ids than a checkpoint
// kept elsewhere from before it. Its checkpoints were triggered later, and
// they are of another lineage: the restore must be refused; it is not.
func TestReviewStartedOverSinceIgnoresNewerRunWithLowerIDs(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	saved := &checkpoint.Metadata{Job: "j", Lineage: "A", ID: 7, Triggered: t0}
	storage := []*checkpoint.Metadata{
		{Job: "j", Lineage: "C", ID: 1, Triggered: t0.Add(time.Hour)},
		{Job: "j", Lineage: "C", ID: 2, Triggered: t0.Add(time.Hour + time.Second)},
	}
	if err := startedOverSince(saved, storage); !errors.Is(err, operator.ErrStartedOver) {
		t.Fatalf("restore of lineage A's checkpoint %d (taken %s) while storage holds lineage C's checkpoints 1 and 2, taken an hour later: %v, want ErrStartedOver",
			saved.ID, saved.Triggered.Format(time.RFC3339), err)
	}
}

// Review of d5fea69 (lineages): when the restored checkpoint's state is
// damaged, the driver falls back to the previous checkpoint in storage
// (previous) without startedOverSince: a savepoint of lineage A, which
// --fresh keeps, is chosen behind lineage B's damaged checkpoint, and the
// run restores into output B's start over deleted (or, with Kafka,
// appends A's continuation after B's output), having first deleted
// (abandon) lineage B's checkpoints. The coordinator goes on stamping
// lineage B (lineage(RunID, d.start)) on checkpoints whose operators see
// lineage A.
func TestReviewFallbackCrossesAStartOver(t *testing.T) {
	mem := storage.NewMemory(0)
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, m := range []*checkpoint.Metadata{
		{Job: "j", Lineage: "A", ID: 3, Savepoint: true, Triggered: t0},
		{Job: "j", Lineage: "B", ID: 6, Triggered: t0.Add(time.Hour)},
	} {
		if err := mem.Reserve(m.ID); err != nil {
			t.Fatal(err)
		}
		if err := mem.Commit(m); err != nil {
			t.Fatal(err)
		}
	}
	d := &driver{spec: Spec{Name: "j", Storage: mem}, log: slog.New(slog.DiscardHandler), unsure: map[checkpoint.ID]bool{}, lineage: "B"}
	prev, _, err := d.previous(6)
	if err == nil && prev.Metadata.Lineage != "B" {
		t.Fatalf("checkpoint 6 (lineage B) is damaged: the fallback restores checkpoint %d of lineage %s, taken before lineage B started over; want a refusal (ErrStartedOver)",
			prev.Metadata.ID, prev.Metadata.Lineage)
	}
}
