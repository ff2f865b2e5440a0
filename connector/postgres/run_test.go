package postgres

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/pgtest"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// Run ids in the ownership records (issue 19, leftover 1 of the second
// session): a subtask that commits, and finishes, before another opened is
// part of the running attempt, not an earlier run.

// noneContext is subtask sub of p's context in attempt of run, without
// checkpoints.
func noneContext(run *operatortest.Run, sub, p, attempt int, startOver bool) *operator.Context {
	c := run.Context("counts", sub, p, nil)
	c.CheckpointingEnabled, c.Attempt, c.StartOver = false, attempt, startOver
	return c
}

// finishAlone opens subtask sub of p in ctx, writes w=sub+1 and finishes
// (commits, without checkpoints), and closes: its session ends.
func finishAlone(t *testing.T, newSink func() weir.SinkWriter[count], ctx *operator.Context, w string) {
	t.Helper()
	s := newSink()
	defer s.Close()
	if err := s.Open(ctx); err != nil {
		t.Fatalf("subtask %d (attempt %d): %v", ctx.Subtask, ctx.Attempt, err)
	}
	if err := s.Write(count{w, int64(ctx.Subtask + 1)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
}

// TestSiblingThatFinishedFirstIsNotAnEarlierRun: without checkpoints,
// subtask 1 of 2 commits its output and closes before subtask 0 opens. It
// was refused with ErrEarlierOutput: the record of subtask 1, whose session
// had ended, looked like an earlier run's. It must complete with every row
// once; a second run is still refused.
func TestSiblingThatFinishedFirstIsNotAnEarlierRun(t *testing.T) {
	pg := pgtest.Start(t)
	for mode, cfg := range modeConfigs(pg.URL) {
		t.Run(mode, func(t *testing.T) {
			exec(t, pg.URL, "DROP TABLE IF EXISTS counts")
			newSink, err := Sink(cfg)
			if err != nil {
				t.Fatal(err)
			}
			run := &operatortest.Run{}
			defer run.Close()
			finishAlone(t, newSink, noneContext(run, 1, 2, 1, false), "world")
			finishAlone(t, newSink, noneContext(run, 0, 2, 1, false), "hello")
			if got, want := rows(t, pg.URL), []string{"hello=1", "world=2"}; !slices.Equal(got, want) {
				t.Fatalf("rows %v, want %v", got, want)
			}
			again := newSink()
			defer again.Close()
			if err := again.Open(noneContext(&operatortest.Run{}, 0, 2, 1, false)); !errors.Is(err, ErrEarlierOutput) {
				t.Fatalf("a second run: %v, want ErrEarlierOutput", err)
			}
		})
	}
}

// TestFreshWaitSkipsThisAttemptsRecords: --fresh over a table without
// earlier output, without checkpoints: subtask 0 opens and finds nothing to
// delete, subtask 2 commits and closes, then subtask 1 opens. Subtask 1
// took subtask 2's record for an earlier run's and waited for subtask 0 to
// delete it until its timeout. Then a restart of the run (attempt 2, which
// starts over as attempt 1 restored nothing) must still delete attempt 1's
// rows, which it writes again, and not those of its own subtasks.
func TestFreshWaitSkipsThisAttemptsRecords(t *testing.T) {
	pg := pgtest.Start(t)
	for mode, cfg := range modeConfigs(pg.URL) {
		t.Run(mode, func(t *testing.T) {
			exec(t, pg.URL, "DROP TABLE IF EXISTS counts")
			cfg.Timeout = 3 * time.Second
			newSink, err := Sink(cfg)
			if err != nil {
				t.Fatal(err)
			}
			run := &operatortest.Run{}
			defer run.Close()
			s0 := newSink()
			defer s0.Close()
			if err := s0.Open(noneContext(run, 0, 3, 1, true)); err != nil {
				t.Fatal(err)
			}
			finishAlone(t, newSink, noneContext(run, 2, 3, 1, true), "c")
			finishAlone(t, newSink, noneContext(run, 1, 3, 1, true), "b")
			if got, want := rows(t, pg.URL), []string{"b=2", "c=3"}; !slices.Equal(got, want) {
				t.Fatalf("attempt 1: rows %v, want %v", got, want)
			}
			s0.Close() // attempt 1 fails before subtask 0 finished

			// Attempt 2: subtasks 1 and 2 open before subtask 0, which
			// deletes attempt 1's rows; subtask 2 then finishes first.
			opened := make([]chan error, 3)
			sinks := make([]weir.SinkWriter[count], 3)
			for sub := range 3 {
				opened[sub], sinks[sub] = make(chan error, 1), newSink()
				defer sinks[sub].Close()
			}
			for _, sub := range []int{1, 2} {
				go func() { opened[sub] <- sinks[sub].Open(noneContext(run, sub, 3, 2, true)) }()
			}
			opened[0] <- sinks[0].Open(noneContext(run, 0, 3, 2, true))
			for _, sub := range []int{0, 2, 1} {
				if err := <-opened[sub]; err != nil {
					t.Fatalf("attempt 2, subtask %d: %v", sub, err)
				}
				sinks[sub].Write(count{fmt.Sprint("abc"[sub : sub+1]), int64(10 + sub)})
				if err := sinks[sub].Finish(); err != nil {
					t.Fatal(err)
				}
				sinks[sub].Close()
			}
			if got, want := rows(t, pg.URL), []string{"a=10", "b=11", "c=12"}; !slices.Equal(got, want) {
				t.Fatalf("attempt 2: rows %v, want %v", got, want)
			}
		})
	}
}

// oldCreateOwnerSQL is createOwnerSQL before run ids, as tables made by
// earlier versions, or by an administrator following their error, are.
const oldCreateOwnerSQL = `CREATE TABLE IF NOT EXISTS weir_sink_owner (
	relation oid NOT NULL,
	relation_name text NOT NULL,
	job text NOT NULL,
	uid text NOT NULL,
	subtask int NOT NULL,
	session_pid int NOT NULL,
	session_start timestamptz NOT NULL,
	committed_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (relation, job, uid, subtask))`

// TestRecordsWithoutARunAreEarlierOutput: a records table an earlier
// version made, holding its record of a run that committed hello=1: the
// sink adds the run columns, a run that does not restore is refused for
// that record, and --fresh deletes it with the rows.
func TestRecordsWithoutARunAreEarlierOutput(t *testing.T) {
	pg := pgtest.Start(t)
	for mode, cfg := range modeConfigs(pg.URL) {
		t.Run(mode, func(t *testing.T) {
			exec(t, pg.URL, "DROP TABLE IF EXISTS counts", "DROP TABLE IF EXISTS weir_sink_owner",
				strings.Replace(cfg.CreateTable, "CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1), oldCreateOwnerSQL,
				"INSERT INTO counts VALUES ('hello', 1)",
				// as the earlier version wrote it, its session long gone
				"INSERT INTO weir_sink_owner (relation, relation_name, job, uid, subtask, session_pid, session_start) VALUES ('counts'::regclass, 'counts', 'test', 'counts', 1, 0, now())")
			for _, checkpoints := range []bool{true, false} {
				_, errs := openAll(t, cfg, 2, func(c *operator.Context) { c.CheckpointingEnabled = checkpoints })
				for sub, err := range errs {
					if !errors.Is(err, ErrEarlierOutput) {
						t.Fatalf("checkpoints %v, subtask %d: %v, want ErrEarlierOutput for the record without a run", checkpoints, sub, err)
					}
				}
			}
			if got := queryStrings(t, pg.URL, "SELECT attname::text FROM pg_attribute WHERE attrelid = 'weir_sink_owner'::regclass AND attname LIKE 'run%'"); !slices.Equal(got, []string{"run_attempt", "run_id"}) {
				t.Fatalf("columns %v: the sink did not add the run columns", got)
			}
			sinks, errs := openAll(t, cfg, 2, func(c *operator.Context) { c.StartOver = true })
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			if got := rows(t, pg.URL); len(got) != 0 {
				t.Fatalf("after --fresh: %v", got)
			}
			for _, s := range sinks {
				s.Close()
			}
		})
	}
}

// TestPrecreatedOwnerTableWithoutRunColumns: an administrator made
// weir_sink_owner with the statement of a version before run ids (and
// weir_sink_rolled_back, as the README asks), and the sink's user may not
// alter it. The sink works as before run ids: a run commits, and the next is
// refused.
func TestPrecreatedOwnerTableWithoutRunColumns(t *testing.T) {
	pg := pgtest.Start(t)
	exec(t, pg.URL,
		createAppend,
		oldCreateOwnerSQL,
		fmt.Sprintf(createRolledBackSQL, rolledBackTable),
		"CREATE ROLE weirsink LOGIN",
		"REVOKE CREATE ON SCHEMA public FROM PUBLIC",
		"GRANT USAGE ON SCHEMA public TO weirsink",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON counts, weir_sink_owner, weir_sink_rolled_back TO weirsink")
	url := strings.Replace(pg.URL, "postgres@", "weirsink@", 1)
	if url == pg.URL {
		t.Fatalf("cannot make the URL of user weirsink from %s", pg.URL)
	}
	cfg := SinkConfig[count]{URL: url, Table: "counts", BatchRows: 2}
	firstRun(t, cfg, "test")
	if got := rows(t, pg.URL); !slices.Equal(got, []string{"hello=1", "world=1"}) {
		t.Fatalf("rows %v", got)
	}
	_, errs := openAll(t, cfg, 1, func(*operator.Context) {})
	if !errors.Is(errs[0], ErrEarlierOutput) {
		t.Fatalf("a second run: %v, want ErrEarlierOutput", errs[0])
	}
	if got := queryStrings(t, pg.URL, "SELECT attname::text FROM pg_attribute WHERE attrelid = 'weir_sink_owner'::regclass AND attname LIKE 'run%'"); len(got) != 0 {
		t.Fatalf("columns %v added by a user who may not", got)
	}
}

// TestRunColumnsWaitBoundedForALock: a records table made before run ids,
// and a prepared transaction (a run killed before its commit, left for the
// restore) holding a lock on it. Adding the columns waits at most
// addRunLockTimeout for the lock, instead of until the sink's timeout,
// when it failed; the sink then goes on without them.
func TestRunColumnsWaitBoundedForALock(t *testing.T) {
	pg := pgtest.Start(t)
	exec(t, pg.URL, createAppend, oldCreateOwnerSQL,
		"BEGIN",
		"INSERT INTO weir_sink_owner (relation, relation_name, job, uid, subtask, session_pid, session_start) VALUES ('counts'::regclass, 'counts', 'other', 'counts', 0, 0, now())",
		"PREPARE TRANSACTION 'held'")
	defer exec(t, pg.URL, "ROLLBACK PREPARED 'held'")
	cfg := SinkConfig[count]{URL: pg.URL, Table: "counts", BatchRows: 2, Timeout: 30 * time.Second}
	firstRun(t, cfg, "test") // else it waits until cfg.Timeout, and fails
	if got := rows(t, pg.URL); !slices.Equal(got, []string{"hello=1", "world=1"}) {
		t.Fatalf("rows %v", got)
	}
	if got := queryStrings(t, pg.URL, "SELECT attname::text FROM pg_attribute WHERE attrelid = 'weir_sink_owner'::regclass AND attname LIKE 'run%'"); len(got) != 0 {
		t.Fatalf("columns %v added while a prepared transaction held the table", got)
	}
}
