package postgres

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/operator"

	"github.com/jackc/pgx/v5"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/pgtest"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestFailedPrepareFailsTheNextWriteOrSnapshot: a checkpoint's rows are
// committed when a later checkpoint completes, or the job fails; never
// dropped without a word. Found by an outside review (session 34).
//
// Checkpoint 1's PREPARE TRANSACTION fails with a retriable error (here
// 53200 "maximum number of prepared transactions reached", class 53; a
// 40001 serialization failure at PREPARE under SERIALIZABLE is another).
// PostgreSQL rolls the transaction back. With tolerable checkpoint
// failures the job goes on, and the next snapshot prepares p1 again, as
// Snapshot's NB promises for a PREPARE that "never ran": on a session that
// has no transaction any more, PREPARE TRANSACTION only warns ("there is no
// transaction in progress") and returns no error, so p1 counts as prepared,
// checkpoint 2 completes, and COMMIT PREPARED of p1 meets "does not exist",
// taken for committed: a=1 was lost. Now the next write or snapshot fails
// the task, saying so, and the job restores its latest checkpoint.
func TestFailedPrepareFailsTheNextWriteOrSnapshot(t *testing.T) {
	pg := pgtest.Start(t, "max_prepared_transactions=2") // the least a sink of parallelism 1 starts with
	ctx := context.Background()
	cfg := SinkConfig[count]{URL: pg.URL, Table: "counts", CreateTable: createAppend}
	w := &operatortest.MemWriter{}
	run := &operatortest.Run{}
	defer run.Close()
	s := openSink(t, run, cfg, 0, 1, nil)
	defer s.Close()

	// Another application holds both prepared-transaction slots.
	other, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	for _, q := range []string{"BEGIN", "CREATE TABLE other (x int)", "PREPARE TRANSACTION 'other-app'", "BEGIN", "CREATE TABLE other2 (x int)", "PREPARE TRANSACTION 'other-app-2'"} {
		if _, err := other.Exec(ctx, q); err != nil {
			t.Fatal(q, err)
		}
	}

	if err := s.Write(count{"a", 1}); err != nil {
		t.Fatal(err)
	}
	async, err := s.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = async(w)
	if err == nil {
		t.Fatal("checkpoint 1's PREPARE succeeded with no slot free")
	}
	t.Logf("checkpoint 1 declined (tolerated): %v", err)

	// The slot frees; the job went on (TolerableFailures >= 1).
	for _, gid := range []string{"other-app", "other-app-2"} {
		if _, err := other.Exec(ctx, "ROLLBACK PREPARED '"+gid+"'"); err != nil {
			t.Fatal(err)
		}
	}
	// The next write or snapshot fails the task, so that the job restores
	// at once and a=1 is written again.
	err = s.Write(count{"b", 2})
	if err == nil {
		var async operator.Async
		if async, err = s.Snapshot(2); err == nil {
			if _, err = async(w); err == nil {
				err = s.NotifyComplete(2)
				t.Fatalf("checkpoint 2 completed (commit: %v), and the table holds %v: checkpoint 1's rows, whose PREPARE failed, were lost silently", err, rows(t, pg.URL))
			}
		}
	}
	if !strings.Contains(err.Error(), "rows are gone") {
		t.Fatalf("after a failed PREPARE: %v, want the lost transaction named", err)
	}
}

// checkpointedA is run A's subtask 0, which wrote a=1 and took checkpoint
// 1 (prepared, the notification still on its way), and the restore of
// checkpoint 1.
func checkpointedA(t *testing.T, cfg SinkConfig[count]) (weir.SinkWriter[count], *operator.Restore) {
	w := &operatortest.MemWriter{}
	run := &operatortest.Run{}
	t.Cleanup(run.Close)
	a := openSink(t, run, cfg, 0, 1, nil)
	t.Cleanup(func() { a.Close() })
	if err := a.Write(count{"a", 1}); err != nil {
		t.Fatal(err)
	}
	hs := snapshot(t, a, 1, w)
	return a, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read}
}

// TestCommitOfATransactionAnotherRunRolledBackFails: a completed
// checkpoint's rows are never dropped silently. Run A prepared checkpoint
// 1's transaction, which completed, and has not yet been told. Run B of
// the same job starts on the same table without --restore (another host,
// another checkpoint directory, so the directory's lock does not see it);
// A's ownership record is inside A's prepared transaction, so B is not
// refused, and B rolls that transaction back as one no checkpoint it
// restores records. A's commit then meets "does not exist", which it took
// for committed: a=1 was lost without an error. It now finds B's record of
// the roll-back and fails with ErrRolledBack. Found by an outside review
// (session 34).
func TestCommitOfATransactionAnotherRunRolledBackFails(t *testing.T) {
	pg := pgtest.Start(t)
	cfg := SinkConfig[count]{URL: pg.URL, Table: "counts", CreateTable: createAppend}
	a, _ := checkpointedA(t, cfg)

	runB := &operatortest.Run{}
	defer runB.Close()
	b := openSink(t, runB, cfg, 0, 1, nil)
	defer b.Close()

	err := a.NotifyComplete(1)
	if !errors.Is(err, ErrRolledBack) || !operator.IsPermanent(err) {
		t.Fatalf("A's commit of the transaction B rolled back: %v (table %v), want a permanent ErrRolledBack", err, rows(t, pg.URL))
	}
	t.Log(err)
}

// TestCommitOfATransactionARestoreCommittedSucceeds: a transaction gone
// without a record of its roll-back was committed by a restore of the
// checkpoint that records it (the job failed over while this attempt ran
// on); the commit takes it for committed, as before.
func TestCommitOfATransactionARestoreCommittedSucceeds(t *testing.T) {
	pg := pgtest.Start(t)
	cfg := SinkConfig[count]{URL: pg.URL, Table: "counts", CreateTable: createAppend}
	a, r := checkpointedA(t, cfg)

	runB := &operatortest.Run{}
	defer runB.Close()
	b := openSink(t, runB, cfg, 0, 1, r)
	defer b.Close()
	if err := a.NotifyComplete(1); err != nil {
		t.Fatalf("A's commit of the transaction B's restore committed: %v", err)
	}
	if got := rows(t, pg.URL); !slices.Equal(got, []string{"a=1"}) {
		t.Fatalf("table %v, want [a=1]", got)
	}
}

// TestDuplicateKeyAgainstOwnPreparedRowDoesNotHang: a row that
// PostgreSQL rejects for its key does not hang the job. Found by an
// outside review (session 34).
//
// Exactly-once into a table with a primary key: a=1 is written in
// checkpoint 1's transaction, which is prepared and waits for
// NotifyComplete(1). The next record a=2 is flushed (BatchRows 1) before
// that notification arrives: its COPY waits for the prepared transaction
// holding key a, which only NotifyComplete, on the same task thread
// blocked in Write, would commit: Write never returned. Now the wait is
// bounded (lock_timeout, at LockTimeout) and Write fails, retriable
// and saying why; the restart commits checkpoint 1, and the replayed a=2
// then fails on its key, permanently.
func TestDuplicateKeyAgainstOwnPreparedRowDoesNotHang(t *testing.T) {
	pg := pgtest.Start(t)
	cfg := SinkConfig[count]{URL: pg.URL, Table: "counts", CreateTable: createKeyed, BatchRows: 1, LockTimeout: 2 * time.Second}
	w := &operatortest.MemWriter{}
	run := &operatortest.Run{}
	defer run.Close()
	s := openSink(t, run, cfg, 0, 1, nil)
	defer s.Close()
	if err := s.Write(count{"a", 1}); err != nil {
		t.Fatal(err)
	}
	snapshot(t, s, 1, w) // prepared; NotifyComplete(1) is queued behind the next record
	done := make(chan error, 1)
	go func() { done <- s.Write(count{"a", 2}) }()
	select {
	case err := <-done:
		if err == nil || operator.IsPermanent(err) || !strings.Contains(err.Error(), "waited 2s (LockTimeout) for a lock on counts") {
			t.Fatalf("Write of a=2 beside a=1 prepared under a primary key: %v, want a retriable lock timeout that says why", err)
		}
		t.Logf("Write: %v", err)
	case <-time.After(15 * time.Second):
		// Unblock it (commit checkpoint 1 as the notification would) so
		// the goroutine ends.
		exec(t, pg.URL, "COMMIT PREPARED '"+preparedGIDs(t, pg.URL)[0]+"'")
		err := <-done
		t.Fatalf("Write of a row whose key a prepared transaction of the same subtask holds blocked for 15s (LockTimeout 2s): the task cannot take the notification that would release it; the job hangs instead of failing. Once the prepared transaction was committed by hand, Write said: %v", err)
	}
}

// TestUpsertRefusesANullableKey: ON CONFLICT never matches a NULL key (a
// unique index takes NULLs for distinct), so every replay of a record with
// a NULL key inserted its row again, while DISTINCT ON kept one of a
// batch's NULL-key rows. Sink refuses a key column that may be NULL,
// naming it, unless the key's unique index is NULLS NOT DISTINCT. Found by
// an outside review (session 34).
func TestUpsertRefusesANullableKey(t *testing.T) {
	pg := pgtest.Start(t)
	type rec struct {
		Word  *string
		Count int64
	}
	cfg := SinkConfig[rec]{URL: pg.URL, Table: "counts", Key: []string{"word"}, Mode: Upsert,
		CreateTable: `CREATE TABLE counts (word text UNIQUE, count bigint NOT NULL)`}
	_, err := Sink(cfg)
	if err == nil || !strings.Contains(err.Error(), "key column word may be NULL") {
		t.Fatalf("Sink with a nullable key: %v, want it refused, naming the column", err)
	}
	t.Log(err)
	exec(t, pg.URL, "DROP TABLE counts", `CREATE TABLE counts (word text, count bigint NOT NULL, UNIQUE NULLS NOT DISTINCT (word))`)
	if _, err := Sink(cfg); err != nil {
		t.Fatalf("Sink with a NULLS NOT DISTINCT key: %v", err)
	}
}

// TestValueOfTheWrongTypeNamesItsColumn checks the rule: an error the
// user must fix in the table or the job names the table and the column.
//
// A Go string for an integer column fails the COPY with pgx's "unable to
// encode "abcdef" into binary format for int4 (OID 23): cannot find encode
// plan": neither the column nor the Go field is named, and a wide table
// leaves the user guessing. (Sink knows each column's type at start, so
// such a mismatch of a struct field's type could even be refused there.)
func TestValueOfTheWrongTypeNamesItsColumn(t *testing.T) {
	pg := pgtest.Start(t)
	cfg := SinkConfig[count]{URL: pg.URL, Table: "counts", CreateTable: `CREATE TABLE counts (word int, count bigint)`, BatchRows: 1}
	newSink, err := Sink(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run := &operatortest.Run{}
	defer run.Close()
	s := newSink()
	defer s.Close()
	if err := s.Open(run.Context("counts", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	err = s.Write(count{"abcdef", 1})
	if err == nil {
		t.Fatal("a string written into an int column")
	}
	if !operator.IsPermanent(err) || !strings.Contains(err.Error(), "word") {
		t.Fatalf("error %q (permanent %v): does not name column word", err, operator.IsPermanent(err))
	}
}

// TestRowWithMoreValuesThanColumnsFailsWithAnError: a Row that returns more
// values than Columns is the user's mistake, which pgx's error names
// ("expected 2 values, got 3 values"; the upsert's staging table has one
// column more), permanent, in both modes. The first
// copyError read past the columns and panicked. Found by an outside review
// of session 34's fixes.
func TestRowWithMoreValuesThanColumnsFailsWithAnError(t *testing.T) {
	pg := pgtest.Start(t)
	row := func(c count) []any { return []any{c.Word, c.Count, "extra"} }
	for i, cfg := range []SinkConfig[count]{
		{URL: pg.URL, Table: "counts", CreateTable: createAppend, BatchRows: 1, Columns: []string{"word", "count"}, Row: row},
		{URL: pg.URL, Table: "keyed", CreateTable: strings.Replace(createKeyed, "counts", "keyed", 1), BatchRows: 1, Mode: Upsert, Key: []string{"word"}, Columns: []string{"word", "count"}, Row: row},
	} {
		run := &operatortest.Run{}
		s := openSink(t, run, cfg, 0, 1, nil)
		err := s.Write(count{"a", 1})
		s.Close()
		run.Close()
		if err == nil || !operator.IsPermanent(err) || !strings.Contains(err.Error(), "values, got") {
			t.Fatalf("mode %d: Write of 3 values for 2 columns: %v, want a permanent error that says so", i, err)
		}
	}
}

// TestLockTimeoutOfAnyLengthWrites: PostgreSQL takes a lock_timeout of at
// most 2147483647 ms; a longer LockTimeout (the first fix used Timeout,
// which may be anything) failed every BEGIN with 22023, permanently. It is
// capped. Found by an outside review of session 34's fixes.
func TestLockTimeoutOfAnyLengthWrites(t *testing.T) {
	pg := pgtest.Start(t)
	cfg := SinkConfig[count]{URL: pg.URL, Table: "counts", CreateTable: createAppend, BatchRows: 1, LockTimeout: 30 * 24 * time.Hour}
	run := &operatortest.Run{}
	defer run.Close()
	s := openSink(t, run, cfg, 0, 1, nil)
	defer s.Close()
	if err := s.Write(count{"a", 1}); err != nil {
		t.Fatalf("Write with LockTimeout 720h: %v", err)
	}
}

// TestWriteWaitsOutAnotherSessionsTableLock: another session's lock on the
// output table (CREATE INDEX takes SHARE) is waited out for LockTimeout (a
// minute by default), not for the sink's Timeout: the first fix bounded the
// wait by Timeout (10 s by default), and an index build of two minutes
// failed the job for good after its restarts. Found by an outside review
// of session 34's fixes.
func TestWriteWaitsOutAnotherSessionsTableLock(t *testing.T) {
	pg := pgtest.Start(t)
	cfg := SinkConfig[count]{URL: pg.URL, Table: "counts", CreateTable: createAppend, BatchRows: 1, Timeout: 500 * time.Millisecond}
	run := &operatortest.Run{}
	defer run.Close()
	s := openSink(t, run, cfg, 0, 1, nil)
	defer s.Close()
	ctx := t.Context()
	dba, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer dba.Close(ctx)
	for _, q := range []string{"BEGIN", "LOCK TABLE counts IN SHARE MODE"} {
		if _, err := dba.Exec(ctx, q); err != nil {
			t.Fatal(q, err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- s.Write(count{"a", 1}) }()
	// The write waits for the lock; it must still wait well past Timeout.
	probe, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close(ctx)
	for waiting := false; !waiting; {
		if err := probe.QueryRow(ctx, "SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event_type = 'Lock'").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("the write gave up waiting for another session's lock: %v", err)
	case <-time.After(4 * cfg.Timeout): // the time the lock is held past the start of the wait
	}
	if _, err := dba.Exec(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the write after the lock was released: %v", err)
	}
}
