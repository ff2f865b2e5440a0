package postgres

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/pgtest"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestRestoreFromBeforeFreshIsRefused (issue 19, defect 4, gap 4): a
// savepoint of lineage A, restored after a run of lineage B started over
// (--fresh deleted A's rows) and was killed before its first checkpoint
// completed (so no newer checkpoint tells the runtime), is refused by every
// subtask with a permanent ErrStartedOver, and the table and B's prepared
// transaction are left as they are. So is a checkpoint of an older version
// (no lineage). B's own checkpoint then restores. Before, the savepoint
// restored into a table without its rows, silently.
func TestRestoreFromBeforeFreshIsRefused(t *testing.T) {
	pg := pgtest.Start(t)
	for mode, cfg := range modeConfigs(pg.URL) {
		t.Run(mode, func(t *testing.T) {
			exec(t, pg.URL, "DROP TABLE IF EXISTS counts", "DROP TABLE IF EXISTS "+ownerTable)
			w := &operatortest.MemWriter{}
			// open opens subtask sub of p in run, of lineage ("-": none),
			// restoring id (0: none).
			open := func(run *operatortest.Run, lineage string, sub, p int, id checkpoint.ID, hs []checkpoint.Handle, startOver bool) (weir.SinkWriter[count], error) {
				newSink, err := Sink(cfg)
				if err != nil {
					t.Fatal(err)
				}
				var r *operator.Restore
				if id != 0 {
					r = &operator.Restore{Checkpoint: id, Handles: hs, Read: w.Read}
				}
				ctx := run.Context("counts", sub, p, r)
				ctx.StartOver = startOver
				if lineage == "-" {
					ctx.Lineage = ""
				}
				s := newSink()
				t.Cleanup(func() { s.Close() })
				return s, s.Open(ctx)
			}
			a := &operatortest.Run{Lineage: "A"}
			s, err := open(a, "A", 0, 1, 0, nil, false)
			if err != nil {
				t.Fatal(err)
			}
			s.Write(count{"a", 1})
			s.Write(count{"b", 1})
			saved := snapshot(t, s, 1, w) // a savepoint, committed
			if err := s.NotifyComplete(1); err != nil {
				t.Fatal(err)
			}
			s.Close()
			a.Close()

			b := &operatortest.Run{Lineage: "B"}
			s, err = open(b, "B", 0, 1, 0, nil, true)
			if err != nil {
				t.Fatal(err)
			}
			s.Write(count{"c", 1})
			s.Write(count{"d", 1})
			ofB := snapshot(t, s, 2, w) // completes; killed before the notification
			b.Close()
			rowsBefore, gidsBefore := rows(t, pg.URL), preparedGIDs(t, pg.URL)

			for _, lineage := range []string{"A", "-"} {
				run := &operatortest.Run{Lineage: lineage}
				for sub := range 2 {
					_, err := open(run, lineage, sub, 2, 1, saved, false)
					if !errors.Is(err, operator.ErrStartedOver) || !operator.IsPermanent(err) {
						t.Fatalf("restore of lineage %q's savepoint after a --fresh run: subtask %d: %v, want a permanent ErrStartedOver", lineage, sub, err)
					}
				}
				run.Close()
				if got, gids := rows(t, pg.URL), preparedGIDs(t, pg.URL); !slices.Equal(got, rowsBefore) || !slices.Equal(gids, gidsBefore) {
					t.Fatalf("the refused restore changed the table or the prepared transactions: %v %v, was %v %v", got, gids, rowsBefore, gidsBefore)
				}
			}
			run := &operatortest.Run{Lineage: "B"}
			defer run.Close()
			if _, err := open(run, "B", 0, 1, 2, ofB, false); err != nil {
				t.Fatalf("restore of the --fresh run's checkpoint: %v", err)
			}
			if got := rows(t, pg.URL); !slices.Equal(got, []string{"c=1", "d=1"}) {
				t.Fatalf("after restoring the --fresh run's checkpoint: %v", got)
			}
		})
	}
}

// TestFreshDeletesTheRowsOfAnUpsertRunKilledBeforeItsFirstCheckpoint (issue
// 19, gap 5): such a run leaves rows and no ownership record, but its
// lineage: --fresh deletes every row, as after a run that recorded its
// output. Before, keys the fresh run never wrote again stayed (a=1).
func TestFreshDeletesTheRowsOfAnUpsertRunKilledBeforeItsFirstCheckpoint(t *testing.T) {
	pg := pgtest.Start(t)
	cfg := modeConfigs(pg.URL)["upsert"]
	exec(t, pg.URL, "DROP TABLE IF EXISTS counts", "DROP TABLE IF EXISTS "+ownerTable)
	first := &operatortest.Run{Lineage: "A"}
	s := openSink(t, first, cfg, 0, 1, nil)
	s.Write(count{"a", 1})
	s.Write(count{"b", 1}) // a batch of 2: committed
	first.Close()          // killed before its first checkpoint
	if got := rows(t, pg.URL); !slices.Equal(got, []string{"a=1", "b=1"}) {
		t.Fatalf("the first run left %v", got)
	}
	fresh := &operatortest.Run{Lineage: "B"}
	defer fresh.Close()
	newSink, err := Sink(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sinks, errs := make([]weir.SinkWriter[count], 2), make([]error, 2)
	var wg sync.WaitGroup
	for sub := range 2 {
		sinks[sub] = newSink()
		ctx := fresh.Context("counts", sub, 2, nil)
		ctx.StartOver = true
		wg.Go(func() { errs[sub] = sinks[sub].Open(ctx) })
	}
	wg.Wait()
	for sub, err := range errs {
		if err != nil {
			t.Fatalf("--fresh: subtask %d: %v", sub, err)
		}
		defer sinks[sub].Close()
	}
	sinks[1].Write(count{"c", 1})
	sinks[1].Write(count{"b", 2})
	if got := rows(t, pg.URL); !slices.Equal(got, []string{"b=2", "c=1"}) {
		t.Fatalf("after --fresh: %v, want b=2 c=1 (the killed run's a=1 deleted)", got)
	}
}
