package postgres

import (
	"errors"
	"testing"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/pgtest"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// Review: a restore refused with ErrRolledBack is refused by the subtask
// that recorded the rolled-back transaction only. The other subtasks of the
// same (refused) restore go on with their Open and roll back every prepared
// transaction the refused checkpoint does not record, including those of
// the latest checkpoint, which was completed but not yet committed. The
// error then tells the user to "restore a checkpoint or savepoint taken
// after that start", and that restore (the latest checkpoint) is now refused
// as well: the refused restore destroyed the rows of the latest checkpoint
// (lost output; only --fresh is left).
//
// Scenario, parallelism 2:
//  1. run 1: checkpoint 1 commits a=1 (sub 0) and x=1 (sub 1); sub 0 writes
//     b=2, savepoint 2 completes (sub 1 wrote nothing in it), the process dies.
//  2. restore of checkpoint 1: rolls back sub 0's b=2 (recorded).
//     c=3 (sub 0) and z=3 (sub 1) are prepared by checkpoint 3, which
//     completes; the process dies before the sink is told.
//  3. the user restores savepoint 2 by mistake: sub 0 refuses (ErrRolledBack),
//     as it should; sub 1 rolls back checkpoint 3's z=3.
//  4. the user restores checkpoint 3 (taken after the start that rolled b=2
//     back, as the error says): refused, z=3 is lost.
func TestRefusedRestoreRollsBackTheLatestCheckpointReview(t *testing.T) {
	pg := pgtest.Start(t)
	cfg := SinkConfig[count]{URL: pg.URL, Table: "counts", CreateTable: createAppend}
	w := &operatortest.MemWriter{}

	// 1.
	run1 := &operatortest.Run{}
	s0 := openSink(t, run1, cfg, 0, 2, nil)
	s1 := openSink(t, run1, cfg, 1, 2, nil)
	s0.Write(count{"a", 1})
	s1.Write(count{"x", 1})
	hs1 := append(snapshot(t, s0, 1, w), snapshot(t, s1, 1, w)...)
	if err := s0.NotifyComplete(1); err != nil {
		t.Fatal(err)
	}
	if err := s1.NotifyComplete(1); err != nil {
		t.Fatal(err)
	}
	s0.Write(count{"b", 2})
	hs2 := append(snapshot(t, s0, 2, w), snapshot(t, s1, 2, w)...)
	s0.Close()
	s1.Close()
	run1.Close()

	// 2.
	run2 := &operatortest.Run{}
	r1 := func() *operator.Restore { return &operator.Restore{Checkpoint: 1, Handles: hs1, Read: w.Read} }
	s0 = openSink(t, run2, cfg, 0, 2, r1())
	s1 = openSink(t, run2, cfg, 1, 2, r1())
	s0.Write(count{"c", 3})
	s1.Write(count{"z", 3})
	hs3 := append(snapshot(t, s0, 3, w), snapshot(t, s1, 3, w)...)
	s0.Close()
	s1.Close()
	run2.Close()
	t.Logf("prepared before the restore of savepoint 2: %v", preparedGIDs(t, pg.URL))

	// 3.
	open := func(id checkpoint.ID, hs []checkpoint.Handle) (err0, err1 error) {
		run := &operatortest.Run{}
		defer run.Close()
		newSink, err := Sink(cfg)
		if err != nil {
			t.Fatal(err)
		}
		a, b := newSink(), newSink()
		defer a.Close()
		defer b.Close()
		err0 = a.Open(run.Context("counts", 0, 2, &operator.Restore{Checkpoint: id, Handles: hs, Read: w.Read}))
		err1 = b.Open(run.Context("counts", 1, 2, &operator.Restore{Checkpoint: id, Handles: hs, Read: w.Read}))
		return err0, err1
	}
	err0, err1 := open(2, hs2)
	if !errors.Is(err0, ErrRolledBack) {
		t.Fatalf("restore of savepoint 2, subtask 0: %v, want ErrRolledBack", err0)
	}
	t.Logf("restore of savepoint 2: subtask 0: %v; subtask 1: %v", err0, err1)
	t.Logf("prepared after the refused restore: %v", preparedGIDs(t, pg.URL))

	// 4.
	err0, err1 = open(3, hs3)
	if err0 != nil || err1 != nil {
		t.Fatalf("restore of checkpoint 3 (the latest, taken after the start that rolled b=2 back, as the error advises) refused after the refused restore of savepoint 2:\nsubtask 0: %v\nsubtask 1: %v\ntable: %v", err0, err1, rows(t, pg.URL))
	}
	if got, want := rows(t, pg.URL), []string{"a=1", "c=3", "x=1", "z=3"}; len(got) != len(want) {
		t.Fatalf("after restoring checkpoint 3: %v, want %v", got, want)
	}
}
