package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/pgtest"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
	"github.com/weirstream/weir/state"
)

// Restores of a checkpoint whose prepared transaction an earlier start
// rolled back (issue 19, found and left alone 3).

// restoreSink opens subtask 0 of 1 restoring checkpoint id from hs, and
// returns it and Open's error.
func restoreSink(t *testing.T, cfg SinkConfig[count], id checkpoint.ID, hs []checkpoint.Handle, w *operatortest.MemWriter) error {
	t.Helper()
	newSink, err := Sink(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run := &operatortest.Run{}
	defer run.Close()
	s := newSink()
	defer s.Close()
	var r *operator.Restore
	if hs != nil {
		r = &operator.Restore{Checkpoint: id, Handles: hs, Read: w.Read}
	}
	return s.Open(run.Context("counts", 0, 1, r))
}

// twoCheckpoints runs subtask 0 of 1: a=1 commits with checkpoint 1; b=2 is
// prepared by checkpoint 2, which completes (a savepoint, say), but the
// process is killed before the sink is told. It returns both checkpoints'
// state.
func twoCheckpoints(t *testing.T, cfg SinkConfig[count], w *operatortest.MemWriter) (hs1, hs2 []checkpoint.Handle) {
	t.Helper()
	run := &operatortest.Run{}
	defer run.Close()
	s := openSink(t, run, cfg, 0, 1, nil)
	defer s.Close()
	s.Write(count{"a", 1})
	hs1 = snapshot(t, s, 1, w)
	if err := s.NotifyComplete(1); err != nil {
		t.Fatal(err)
	}
	s.Write(count{"b", 2})
	hs2 = snapshot(t, s, 2, w)
	return hs1, hs2
}

// TestRestoreOfARolledBackTransactionFails: checkpoint 2 completed with b=2
// prepared, not committed; a restore of checkpoint 1 rolled that
// transaction back; a restore of checkpoint 2 then met "prepared
// transaction does not exist", took it for committed, and started without
// b=2, silently. It must fail, permanently, saying what happened and what
// to do; a restore of a checkpoint taken after the roll-back, or --fresh,
// must still start.
func TestRestoreOfARolledBackTransactionFails(t *testing.T) {
	pg := pgtest.Start(t)
	cfg := SinkConfig[count]{URL: pg.URL, Table: "counts", CreateTable: createAppend}
	w := &operatortest.MemWriter{}
	hs1, hs2 := twoCheckpoints(t, cfg, w)
	gids := preparedGIDs(t, pg.URL)
	if len(gids) != 1 {
		t.Fatalf("prepared %v, want checkpoint 2's", gids)
	}
	if err := restoreSink(t, cfg, 1, hs1, w); err != nil { // rolls back checkpoint 2's transaction
		t.Fatal(err)
	}
	err := restoreSink(t, cfg, 2, hs2, w)
	if err == nil {
		t.Fatalf("restore of checkpoint 2 started, and the table holds %v: b=2, which checkpoint 2 records, is lost without a word", rows(t, pg.URL))
	}
	if !errors.Is(err, ErrRolledBack) || !operator.IsPermanent(err) {
		t.Fatalf("restore of checkpoint 2: %v (permanent %v), want a permanent ErrRolledBack", err, operator.IsPermanent(err))
	}
	for _, want := range []string{"restore of checkpoint 2", gids[0], "of checkpoint 2", "a restore of checkpoint 1", "rows are lost", "taken after that start", "--fresh"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v: does not say %q", err, want)
		}
	}
	if got := rows(t, pg.URL); !slices.Equal(got, []string{"a=1"}) {
		t.Fatalf("the refused restore changed the table: %v", got)
	}
	// A second try says the same: nothing was forgotten.
	if err := restoreSink(t, cfg, 2, hs2, w); !errors.Is(err, ErrRolledBack) {
		t.Fatalf("second restore of checkpoint 2: %v, want ErrRolledBack", err)
	}
	// The way out the error names: start over.
	newSink, err := Sink(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run := &operatortest.Run{}
	s := newSink()
	ctx := run.Context("counts", 0, 1, nil)
	ctx.StartOver = true
	if err := s.Open(ctx); err != nil {
		t.Fatalf("--fresh: %v", err)
	}
	s.Close()
	run.Close()
	if got := queryStrings(t, pg.URL, "SELECT gid FROM "+rolledBackTable); len(got) != 0 {
		t.Fatalf("--fresh left the rows of rolled-back transactions: %v", got)
	}
}

// TestRolledBackGIDOfAnEarlierAttemptSaysNothingOfALaterOne: checkpoint ids
// come again after a restore of an older checkpoint (storage reserves ids
// after the highest it still holds). Checkpoint 2's first transaction is
// rolled back by a restore of checkpoint 1; the next attempt's checkpoint 2
// commits; a restore of that checkpoint 2 must not take its transaction for
// the rolled-back one.
func TestRolledBackGIDOfAnEarlierAttemptSaysNothingOfALaterOne(t *testing.T) {
	pg := pgtest.Start(t)
	cfg := SinkConfig[count]{URL: pg.URL, Table: "counts", CreateTable: createAppend}
	w := &operatortest.MemWriter{}
	hs1, _ := twoCheckpoints(t, cfg, w)
	// The restore of checkpoint 1 rolls back checkpoint 2's transaction and
	// goes on: c=3 commits with its own checkpoint 2.
	run := &operatortest.Run{}
	s := openSink(t, run, cfg, 0, 1, &operator.Restore{Checkpoint: 1, Handles: hs1, Read: w.Read})
	s.Write(count{"c", 3})
	hs2 := snapshot(t, s, 2, w)
	if err := s.NotifyComplete(2); err != nil {
		t.Fatal(err)
	}
	s.Close()
	run.Close()
	if err := restoreSink(t, cfg, 2, hs2, w); err != nil {
		t.Fatalf("restore of the second checkpoint 2, whose transaction committed: %v", err)
	}
	if got := rows(t, pg.URL); !slices.Equal(got, []string{"a=1", "c=3"}) {
		t.Fatalf("rows %v", got)
	}
}

// TestRestoreAfterAStartKilledBeforeItsRollBack: a start recorded that it
// rolls back checkpoint 2's transaction and was killed before it did. A
// restore of checkpoint 2 finds the transaction still prepared: it commits
// it, and deletes the row, so that a second restore of checkpoint 2 takes
// the transaction for committed earlier.
func TestRestoreAfterAStartKilledBeforeItsRollBack(t *testing.T) {
	pg := pgtest.Start(t)
	cfg := SinkConfig[count]{URL: pg.URL, Table: "counts", CreateTable: createAppend}
	w := &operatortest.MemWriter{}
	_, hs2 := twoCheckpoints(t, cfg, w)
	gids := preparedGIDs(t, pg.URL)
	if len(gids) != 1 {
		t.Fatalf("prepared %v, want checkpoint 2's", gids)
	}
	exec(t, pg.URL, "INSERT INTO "+rolledBackTable+" (gid, job, uid, subtask, restored) VALUES ("+literal(gids[0])+", 'test', 'counts', 0, 1)")
	for range 2 {
		if err := restoreSink(t, cfg, 2, hs2, w); err != nil {
			t.Fatalf("restore of checkpoint 2: %v", err)
		}
		if got := rows(t, pg.URL); !slices.Equal(got, []string{"a=1", "b=2"}) {
			t.Fatalf("rows %v", got)
		}
	}
}

// TestRestoreOfStateWithGIDsWithoutAttempt: checkpoints taken before gids
// named their attempt record weir2:<job>:<uid>:<sub>:<checkpoint>. Such a
// transaction is committed by a restore that records it, rolled back by
// one that does not, and a restore of a checkpoint that records it after
// that fails as for any other.
func TestRestoreOfStateWithGIDsWithoutAttempt(t *testing.T) {
	pg := pgtest.Start(t)
	cfg := SinkConfig[count]{URL: pg.URL, Table: "counts", CreateTable: createAppend}
	if _, err := Sink(cfg); err != nil { // creates the table
		t.Fatal(err)
	}
	w := &operatortest.MemWriter{}
	prefix := gidPrefix("test", "counts")
	// The state the sink wrote then: one list item per transaction.
	type txn struct {
		gid string
		at  int
	}
	stateOf := func(txns ...txn) []checkpoint.Handle {
		var items [][]byte
		for _, p := range txns {
			item, err := json.Marshal(map[string]any{"gid": p.gid, "sub": 0, "at": p.at})
			if err != nil {
				t.Fatal(err)
			}
			items = append(items, item)
		}
		run := &operatortest.Run{}
		defer run.Close()
		hs, err := run.Context("counts", 0, 1, nil).SnapshotList(state.Union, "txns", items)(w)
		if err != nil {
			t.Fatal(err)
		}
		return hs
	}
	prepare := func(gid, word string) {
		conn, err := pgx.Connect(context.Background(), pg.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		for _, sql := range []string{"BEGIN", "INSERT INTO counts VALUES (" + literal(word) + ", 1)", "PREPARE TRANSACTION " + literal(gid)} {
			if _, err := conn.Exec(context.Background(), sql); err != nil {
				t.Fatal(err)
			}
		}
	}
	g1, g2 := prefix+"0:1", prefix+"0:2"
	prepare(g1, "a")
	prepare(g2, "b")
	hs1 := stateOf(txn{g1, 1})
	hs2 := stateOf(txn{g1, 1}, txn{g2, 2})
	if err := restoreSink(t, cfg, 1, hs1, w); err != nil {
		t.Fatalf("restore of checkpoint 1 in the old format: %v", err)
	}
	if got := rows(t, pg.URL); !slices.Equal(got, []string{"a=1"}) {
		t.Fatalf("after the restore of checkpoint 1: %v", got)
	}
	if gids := preparedGIDs(t, pg.URL); len(gids) != 0 {
		t.Fatalf("prepared %v: checkpoint 2's should be rolled back", gids)
	}
	if err := restoreSink(t, cfg, 2, hs2, w); !errors.Is(err, ErrRolledBack) || !strings.Contains(err.Error(), g2) {
		t.Fatalf("restore of checkpoint 2 in the old format after its transaction was rolled back: %v, want ErrRolledBack naming %s", err, g2)
	}
}
