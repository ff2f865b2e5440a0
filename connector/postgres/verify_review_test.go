package postgres

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/pgtest"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// committedOnce writes vs through a new subtask of newSink, completes
// checkpoint 1 (committing them) and returns its handles; the subtask is
// left open (the job runs) unless stop.
func committedOnce(t *testing.T, run *operatortest.Run, newSink func() weir.SinkWriter[count], w *operatortest.MemWriter, stop bool, vs ...count) []checkpoint.Handle {
	t.Helper()
	s := newSink()
	if err := s.Open(run.Context("counts", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		if err := s.Write(v); err != nil {
			t.Fatal(err)
		}
	}
	hs := snapshotSink(t, s, 1, w)
	if err := s.NotifyComplete(1); err != nil {
		t.Fatal(err)
	}
	if stop {
		s.Close()
	} else {
		t.Cleanup(func() { s.Close() })
	}
	return hs
}

// TestReviewVarcharTrailingSpaces: Verifiable lets varchar(n) through as a
// type that "stores what it takes or fails the write". It does not:
// PostgreSQL truncates a longer value whose excess characters are all
// spaces to n (COPY too), and the write succeeds. The rerun's record keeps
// the spaces, the table's row does not: verify reports correct output as
// changed (a false mismatch) where it should refuse, or compare the value
// as the column holds it.
func TestReviewVarcharTrailingSpaces(t *testing.T) {
	pg := pgtest.Start(t).URL
	newSink, err := Sink(SinkConfig[count]{URL: pg, Table: "counts", CreateTable: `CREATE TABLE counts (word varchar(3) NOT NULL, count bigint NOT NULL)`})
	if err != nil {
		t.Fatal(err)
	}
	w := &operatortest.MemWriter{}
	run := &operatortest.Run{}
	defer run.Close()
	in := count{"ab    ", 1}
	hs := committedOnce(t, run, newSink, w, true, in)
	var made []string
	newSink().(weir.VerifiedSink[count]).Records(in, func(rec []byte) { made = append(made, string(rec)) })
	got, err := readBack(run, newSink, 1, hs, w)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, made) {
		t.Fatalf("the rerun makes %q, the table holds %q: a false mismatch (Verifiable lets varchar(n) through)", made, got)
	}
}

// TestReviewReadingALargeTableIsBoundedByTheTimeout: Committed reads the
// whole table under one context of w.cfg.Timeout (DefaultTimeout, 10 s:
// "the statements run at start and at snapshots"). A table that takes
// longer to read than that (a large one; here, a reader that takes its
// time over the first row, standing for millions of rows) fails verify
// with a deadline, whatever its content: a large table can never be
// verified.
func TestReviewReadingALargeTableIsBoundedByTheTimeout(t *testing.T) {
	pg := pgtest.Start(t).URL
	const timeout = time.Second
	newSink, err := Sink(SinkConfig[count]{URL: pg, Table: "counts", CreateTable: createAppend, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	w := &operatortest.MemWriter{}
	run := &operatortest.Run{}
	defer run.Close()
	hs := committedOnce(t, run, newSink, w, true, count{"a", 1})
	// Enough rows that the read goes back to the server after the first.
	exec(t, pg, "INSERT INTO counts SELECT 'w' || i, i FROM generate_series(1, 200000) i")
	n := 0
	err = newSink().(weir.VerifiedSink[count]).Committed(run.Context("counts", 0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read}), func([]byte) {
		if n++; n == 1 {
			<-time.After(2 * timeout) // the time a large table's read takes
		}
	})
	if err != nil {
		t.Fatalf("read %d rows: %v: the read of the whole table is bounded by the sink's statement timeout", n, err)
	}
}

// TestReviewVerifyUnderAnotherRoleDoesNotSeeTheJobRunning: verify refuses a
// table while a subtask's session that committed into it lives, found in
// pg_stat_activity by pid and backend_start. A role that is neither the
// job's nor has pg_read_all_stats sees backend_start as NULL for the
// job's sessions, so the join finds none: verify, run by a read-only role
// (it only reads), reads the table of a running job instead of refusing.
func TestReviewVerifyUnderAnotherRoleDoesNotSeeTheJobRunning(t *testing.T) {
	pg := pgtest.Start(t).URL
	newSink, err := Sink(SinkConfig[count]{URL: pg, Table: "counts", CreateTable: createAppend})
	if err != nil {
		t.Fatal(err)
	}
	w := &operatortest.MemWriter{}
	run := &operatortest.Run{}
	defer run.Close()
	hs := committedOnce(t, run, newSink, w, false, count{"a", 1}) // the job runs on
	runningJob(t)
	if _, err := readBack(run, newSink, 1, hs, w); err == nil || !strings.Contains(err.Error(), "is writing table counts") {
		t.Fatalf("as the job's role, while the job runs: %v", err)
	}
	exec(t, pg, "CREATE ROLE checker LOGIN", "GRANT SELECT ON counts, weir_sink_owner TO checker")
	asChecker := strings.Replace(pg, "postgres://postgres@", "postgres://checker@", 1)
	// Why: the job's session, as the checker sees it, has no start.
	conn, err := pgx.Connect(context.Background(), asChecker)
	if err != nil {
		t.Fatal(err)
	}
	var started *time.Time
	err = conn.QueryRow(context.Background(), `SELECT a.backend_start FROM pg_stat_activity a JOIN weir_sink_owner o ON o.session_pid = a.pid WHERE o.subtask = 0`).Scan(&started)
	conn.Close(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the job's session's backend_start, as role checker sees it: %v", started)
	checkerSink, err := Sink(SinkConfig[count]{URL: asChecker, Table: "counts"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := readBack(run, checkerSink, 1, hs, w); err == nil || !strings.Contains(err.Error(), "is writing table counts") {
		t.Fatalf("as another role, while the job runs: read %q, %v; want the refusal (the job is writing the table)", got, err)
	}
}
