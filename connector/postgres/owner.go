package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
)

// Ownership records. A sink that commits output into a table records it, in
// the table's schema, in weir_sink_owner (created if missing): one row per
// table, job, sink UID and subtask, written when the subtask first commits
// output in an attempt that a restore would not take back:
//
//   - exactly-once: in the transaction that commits that output (the first
//     of the attempt, prepared with it), so an attempt killed before its
//     first commit leaves none. Rows are keyed per subtask so the prepared
//     transactions of two subtasks never wait on each other, and only the
//     first transaction writes one so later ones never wait on it;
//   - upsert: batches commit at once, but the record is written at the
//     first checkpoint completed after one (or at the end of input without
//     checkpoints), when exactly-once mode would have committed them: a run
//     killed before its first checkpoint leaves none, as in exactly-once
//     mode, and the next run (--restore latest finds no checkpoint, so it
//     starts from the beginning) rewrites its rows with the same values.
//     NB: so --fresh after such a run deletes nothing, and keys the next
//     run never writes again stay.
//
// A row also names the session of the subtask that wrote it (its backend pid
// and start time): the subtask's own connection, held from Open to Close.
// While that session lives, the row is the running attempt's; once it is
// gone (the run ended, failed, or was killed: the server closes a dead
// client's session), it is an earlier run's.
//
// At Open, a sink that restores no state (operator.Context.Restore nil):
//
//   - without StartOver, refuses to start when it finds a row of its own
//     (table, job, UID) from an earlier run (ErrEarlierOutput): it would add
//     a second copy of that output, or overwrite full counts with counts
//     from 1;
//   - with StartOver, deletes every row of the table and its earlier
//     records, in one transaction, in subtask 0 (which every parallelism
//     has); the other subtasks wait at Open until those records are gone,
//     so that none commits a row (upsert commits every batch at once)
//     before the deletion. It refuses (ErrSharedTable) when records of
//     other jobs or sinks show that they write the table too: their output
//     is not its own to delete.
//
// A sink that restores state checks nothing: the restore decides what is
// committed (exactly-once) or written again (upsert), at any parallelism.
//
// Which records are an earlier run's: a row also names the run and the
// attempt that wrote it (operator.Context.RunID, Attempt). Without
// checkpoints a subtask may commit, and even finish, before another has
// opened: a row of this run is never an earlier run's, so the check
// refuses only rows of other runs. With StartOver, the rows an
// earlier attempt of this run wrote are output this attempt writes again
// from the start: subtask 0 deletes them as it deletes an earlier run's,
// and the other subtasks wait for it; the rows of this attempt's subtasks
// are neither deleted nor waited for.
//
// Rows without a run (written before run ids, or by a sink that could not
// add the columns to a table an administrator made) are an earlier run's,
// except, without checkpoints, those of other subtasks in range whose
// session lives: those are taken for the running attempt's.
//
// NB: such a row whose session the server has not yet closed (its process
// killed a moment ago; a network partition until TCP keepalive notices)
// counts as running.
//
// Lineages. Beside its records, a sink keeps one row per (table, job, UID)
// with subtask lineageSubtask: the lineage (operator.Context.Lineage) of the
// output in the table, in run_id. Subtask 0 of a start that restores
// nothing writes it, before any subtask commits (with StartOver, in the
// transaction that deletes). A restore whose lineage is not the table's is
// refused (operator.ErrStartedOver): a run that started over since the
// checkpoint deleted the rows it builds on, or wrote its own beside them.
// Without the run columns there is no lineage row, and no such check.
const ownerTable = "weir_sink_owner"

// lineageSubtask is the subtask of a lineage row.
const lineageSubtask = -1

// createOwnerSQL creates the table of ownership records; %s is its quoted
// name. relation_name is for people: rows are matched by the table's OID, so
// a table dropped and created again starts without records.
const createOwnerSQL = `CREATE TABLE IF NOT EXISTS %s (
	relation oid NOT NULL,
	relation_name text NOT NULL,
	job text NOT NULL,
	uid text NOT NULL,
	subtask int NOT NULL,
	session_pid int NOT NULL,
	session_start timestamptz NOT NULL,
	committed_at timestamptz NOT NULL DEFAULT now(),
	run_id text,
	run_attempt int,
	PRIMARY KEY (relation, job, uid, subtask))`

// ensureTable creates the table quoted (createSQL, with %s for its name) if
// it does not exist; why says what the sink keeps in it.
func ensureTable(rctx context.Context, conn *pgx.Conn, quoted, createSQL, why string) error {
	// NB: CREATE TABLE IF NOT EXISTS needs the CREATE privilege on the
	// schema even when the table exists, so a table an administrator made
	// for a user without it is looked for first. Run by two sessions at
	// once, it can fail with a unique violation in the catalog: the lock
	// makes one wait.
	var exists bool
	err := conn.QueryRow(rctx, "SELECT to_regclass($1) IS NOT NULL", quoted).Scan(&exists)
	if err == nil && !exists {
		err = pgx.BeginFunc(rctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(rctx, "SELECT pg_advisory_xact_lock(hashtext($1))", quoted); err != nil {
				return err
			}
			_, err := tx.Exec(rctx, fmt.Sprintf(createSQL, quoted))
			return err
		})
	}
	if err != nil {
		return classify(fmt.Sprintf("postgres sink: create %s, %s (if the sink's user may not, create it by hand: %s; and grant the user SELECT, INSERT, UPDATE, DELETE on it)",
			quoted, why, strings.Join(strings.Fields(fmt.Sprintf(createSQL, quoted)), " ")), err)
	}
	return nil
}

// addRunSQL adds the run columns to a records table made before them; %s is
// its quoted name. Rows written before have none: an earlier run's.
const addRunSQL = `ALTER TABLE %s ADD COLUMN IF NOT EXISTS run_id text, ADD COLUMN IF NOT EXISTS run_attempt int`

// addRunLockTimeout bounds how long adding the run columns waits for its
// lock: a transaction that wrote a record and is prepared (a run killed
// before its commit) holds one until a restore ends it, and every reader of
// the table would queue behind the ALTER meanwhile.
const addRunLockTimeout = 500 * time.Millisecond

// ErrEarlierOutput is the error (wrapped, and marked permanent) of a sink
// that starts without state into a table holding output its job committed in
// an earlier run.
var ErrEarlierOutput = errors.New("the table holds output of an earlier run")

// ErrSharedTable is the error (wrapped, and marked permanent) of a sink
// asked to start over (--fresh) in a table other jobs or sinks write too.
var ErrSharedTable = errors.New("other jobs or sinks write the table too")

// owner is one subtask's view of the ownership records of its table.
type owner struct {
	table    string // as configured, for messages
	schema   string // the table's
	records  string // quoted name of the records table
	relation uint32 // the table's OID
	job, uid string
	sub, p   int
	// run, attempt: operator.Context.RunID and Attempt; runs: the records
	// table has their columns (else the sink writes none, as before them).
	run     string
	attempt int
	runs    bool
	// lineage is operator.Context.Lineage; unrecorded: the sink commits
	// rows before it records them (upsert).
	lineage    string
	unrecorded bool
	// early: a subtask may record before the others opened (no
	// checkpoints), so live sessions' records are the running attempt's.
	early bool
	// pid, start name this subtask's session (pg_stat_activity).
	pid   int32
	start time.Time
	// written: this attempt's first transaction wrote the record.
	written bool
	// kind is the table's pg_class.relkind; inherits, whether it has
	// partitions, is one, or takes part in inheritance.
	kind     string
	inherits bool
}

// related says why deleting every row of the table may delete rows of
// other tables, or rows other writers put there through other tables
// (partitions, inheritance, a view's base table): "" if it cannot.
func (o *owner) related() string {
	switch {
	case o.kind == "p":
		return "a partitioned table (whose partitions other jobs may write directly)"
	case o.kind != "r":
		return "not a plain table (relkind " + o.kind + ")"
	case o.inherits:
		return "a partition, or a table with inheritance parents or children (which other jobs may write)"
	}
	return ""
}

// openOwner creates the records table if need be and returns subtask ctx's
// owner of table, on conn: the subtask's own connection, open until it
// closes.
func openOwner(rctx context.Context, conn *pgx.Conn, table string, ctx *operator.Context, early bool) (*owner, error) {
	o := &owner{table: table, job: ctx.Job, uid: ctx.UID, sub: ctx.Subtask, p: ctx.Parallelism, run: ctx.RunID, attempt: ctx.Attempt, lineage: ctx.Lineage, early: early}
	var schema string
	err := conn.QueryRow(rctx, `SELECT c.oid, n.nspname::text, c.relkind::text,
	EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = c.oid OR i.inhparent = c.oid)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`,
		quoteTable(table)).Scan(&o.relation, &schema, &o.kind, &o.inherits)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, operator.Permanent(fmt.Errorf("postgres sink: table %s does not exist (was it dropped after the job was built?)", table))
	}
	if err != nil {
		return nil, classify("postgres sink: table "+table, err)
	}
	o.schema = schema
	o.records = pgx.Identifier{schema, ownerTable}.Sanitize()
	if err := ensureTable(rctx, conn, o.records, createOwnerSQL, "where the sink records that it wrote into "+table); err != nil {
		return nil, err
	}
	if o.runs, err = addRun(rctx, conn, o.records, ctx); err != nil {
		return nil, err
	}
	if err := conn.QueryRow(rctx, "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()").Scan(&o.pid, &o.start); err != nil {
		return nil, classify("postgres sink: read the session's start", err)
	}
	return o, nil
}

// addRun adds the run columns to the records table if they are missing,
// and reports whether it has them. A sink that may not (the table is an
// administrator's) or that waited addRunLockTimeout for the lock goes on
// without: it writes its records as before run ids, and says how to add
// them.
func addRun(ctx context.Context, conn *pgx.Conn, records string, octx *operator.Context) (bool, error) {
	var n int
	err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname IN ('run_id', 'run_attempt') AND NOT attisdropped`, records).Scan(&n)
	if err != nil || n == 2 {
		return n == 2, classify("postgres sink: read the columns of "+records, err)
	}
	alter := fmt.Sprintf(addRunSQL, records)
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// NB: no advisory lock to take turns: the subtasks of a start wait
		// for the table's lock side by side, each at most
		// addRunLockTimeout (in turns, the waits added up past the sink's
		// timeout), and a second ALTER finds the columns the first added.
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", addRunLockTimeout.Milliseconds())); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, alter)
		return err
	})
	var pg *pgconn.PgError
	if errors.As(err, &pg) && (pg.Code == "42501" || pg.Code == "55P03") { // insufficient_privilege, lock_not_available
		octx.Logger.Warn("postgres sink: the ownership records table has no run columns, and the sink could not add them: records are written without this run's id, and without checkpoints a subtask that committed and closed before another opened has the run taken for an earlier one; have the table's owner add them",
			"table", records, "statement", alter, "err", err)
		return false, nil
	}
	if err != nil {
		return false, classify("postgres sink: "+alter, err)
	}
	return true, nil
}

// startingOver says why the sink starts over: the user asked (--fresh), or
// a restart of a run that completed no checkpoint rewrites what its
// earlier attempts committed.
func (o *owner) startingOver() string {
	if o.attempt > 1 {
		return fmt.Sprintf("attempt %d of this run, which completed no checkpoint to restore, must delete what earlier attempts committed, or --fresh was given; with checkpoints enabled a restart restores instead", o.attempt)
	}
	return "--fresh, Config.Fresh"
}

// record is one row of the records table, as read at Open.
type record struct {
	job, uid string
	sub      int
	live     bool // its session still lives
	// run and attempt wrote it; run "": before run ids.
	run     string
	attempt int
}

func (r record) String() string { return fmt.Sprintf("job %q sink %q subtask %d", r.job, r.uid, r.sub) }

// read returns the table's records: the earlier ones of this sink (with
// startOver, those of this run's earlier attempts too), and those of other
// sinks.
func (o *owner) read(ctx context.Context, conn *pgx.Conn, startOver bool) (earlier, others []record, err error) {
	run := "NULL::text, NULL::int"
	if o.runs {
		run = "o.run_id, o.run_attempt"
	}
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT o.job, o.uid, o.subtask, EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = o.session_pid AND a.backend_start = o.session_start), %s
FROM %s o WHERE o.relation = $1 AND o.subtask <> %d ORDER BY o.job, o.uid, o.subtask`, run, o.records, lineageSubtask), o.relation)
	if err != nil {
		return nil, nil, classify("postgres sink: read "+o.records, err)
	}
	all, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (record, error) {
		var r record
		var run *string
		var attempt *int32
		err := row.Scan(&r.job, &r.uid, &r.sub, &r.live, &run, &attempt)
		if run != nil {
			r.run = *run
		}
		if attempt != nil {
			r.attempt = int(*attempt)
		}
		return r, err
	})
	if err != nil {
		return nil, nil, classify("postgres sink: read "+o.records, err)
	}
	for _, r := range all {
		switch {
		case r.job != o.job || r.uid != o.uid:
			others = append(others, r)
		case o.earlier(r, startOver):
			earlier = append(earlier, r)
		}
	}
	return earlier, others, nil
}

// earlier reports whether r, a record of this sink, is output this run does
// not write again: an earlier run's, or with startOver also an earlier
// attempt's of this run (see ownerTable).
func (o *owner) earlier(r record, startOver bool) bool {
	if r.run == "" || o.run == "" || planted.noRunID.Load() {
		// Before run ids: a record of the running attempt is another
		// subtask's, in range, written by a live session, and only where
		// subtasks commit early.
		return !o.early || !r.live || r.sub == o.sub || r.sub >= o.p
	}
	if r.run != o.run {
		return true
	}
	return startOver && r.attempt != o.attempt
}

// check is the check at Open of a sink that restores no state; see
// ownerTable. ctx bounds how long a subtask other than 0 waits for subtask 0
// to delete what an earlier run wrote. log logs the deletion.
func (o *owner) check(ctx context.Context, conn *pgx.Conn, startOver bool, log func(msg string, args ...any)) error {
	if planted.noOwnerCheck.Load() {
		return nil
	}
	for {
		earlier, others, err := o.read(ctx, conn, startOver)
		if err != nil {
			return err
		}
		if len(earlier) == 0 && startOver && o.unrecorded && len(others) == 0 && o.related() == "" {
			// An upsert run killed before its first checkpoint left rows
			// and no record, but its lineage: --fresh deletes them too.
			other, _, err := o.tableLineage(ctx, conn)
			if err != nil {
				return err
			}
			if other != "" && other != o.lineage {
				earlier = append(earlier, record{job: o.job, uid: o.uid, sub: lineageSubtask})
			}
		}
		if len(earlier) == 0 {
			if o.sub == 0 {
				return o.markLineage(ctx, conn)
			}
			return nil
		}
		if !startOver {
			return operator.Permanent(fmt.Errorf("postgres sink: table %s: %w: job %q, sink %q committed output into it (subtasks %s)%s: resume that run with --restore latest (Config.Restore \"latest\"), or start over with --fresh (Config.Fresh), which deletes every row of %s",
				o.table, ErrEarlierOutput, o.job, o.uid, subtasks(earlier), othersNote(others), o.table))
		}
		if why := o.related(); why != "" {
			return operator.Permanent(fmt.Errorf("postgres sink: table %s: cannot start over (%s) by deleting the output earlier runs of job %q, sink %q committed: %w: it is %s; delete those rows by hand, then their records (DELETE FROM %s WHERE job = '%s' AND uid = '%s'), and start without --fresh",
				o.table, o.startingOver(), o.job, o.uid, ErrSharedTable, why, o.records, strings.ReplaceAll(o.job, "'", "''"), strings.ReplaceAll(o.uid, "'", "''")))
		}
		if len(others) > 0 {
			return operator.Permanent(fmt.Errorf("postgres sink: table %s: cannot start over (%s) by deleting the output earlier runs of job %q, sink %q committed: %w: %s; give this sink a table of its own, or delete the rows by hand and then the records in %s",
				o.table, o.startingOver(), o.job, o.uid, ErrSharedTable, names(others), o.records))
		}
		if o.sub != 0 {
			// Subtask 0 deletes; commit nothing before it did.
			select {
			case <-ctx.Done():
				return fmt.Errorf("postgres sink: table %s: waiting for subtask 0 to delete the output of earlier runs (--fresh): %w", o.table, context.Cause(ctx))
			case <-time.After(ownerPollInterval):
			}
			continue
		}
		var deleted int64
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, "DELETE FROM "+quoteTable(o.table))
			if err != nil {
				return err
			}
			deleted = tag.RowsAffected()
			for _, r := range earlier {
				if r.sub == lineageSubtask {
					continue // markLineage replaces it
				}
				del, args := fmt.Sprintf("DELETE FROM %s WHERE relation = $1 AND job = $2 AND uid = $3 AND subtask = $4", o.records), []any{o.relation, r.job, r.uid, r.sub}
				if o.runs {
					// NB: only the record read: not one a subtask of this
					// attempt wrote since under the same key.
					del += " AND run_id IS NOT DISTINCT FROM $5 AND run_attempt IS NOT DISTINCT FROM $6"
					args = append(args, nullIfEmpty(r.run), nullIfZero(r.attempt))
				}
				if _, err := tx.Exec(ctx, del, args...); err != nil {
					return err
				}
			}
			return o.markLineage(ctx, tx)
		})
		if err != nil {
			return classify("postgres sink: start over: delete the rows of "+o.table, err)
		}
		log("postgres sink: starting over: deleted the output of earlier runs", "table", o.table, "rows", deleted, "subtasks", subtasks(earlier))
		return nil
	}
}

// markLineage records the run's lineage as the table's (see ownerTable).
func (o *owner) markLineage(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}) error {
	if !o.runs || o.lineage == "" {
		return nil
	}
	_, err := q.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (relation, relation_name, job, uid, subtask, session_pid, session_start, run_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (relation, job, uid, subtask) DO UPDATE SET relation_name = EXCLUDED.relation_name, session_pid = EXCLUDED.session_pid, session_start = EXCLUDED.session_start, committed_at = now(), run_id = EXCLUDED.run_id`, o.records),
		o.relation, o.table, o.job, o.uid, lineageSubtask, o.pid, o.start, o.lineage)
	return classify("postgres sink: record the lineage of the output in "+o.records, err)
}

// tableLineage reads the lineage of the table's output, and when it was
// recorded: "" if none is.
func (o *owner) tableLineage(ctx context.Context, conn *pgx.Conn) (string, time.Time, error) {
	if !o.runs {
		return "", time.Time{}, nil
	}
	var lineage string
	var at time.Time
	err := conn.QueryRow(ctx, fmt.Sprintf("SELECT run_id, committed_at FROM %s WHERE relation = $1 AND job = $2 AND uid = $3 AND subtask = $4 AND run_id IS NOT NULL", o.records),
		o.relation, o.job, o.uid, lineageSubtask).Scan(&lineage, &at)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", time.Time{}, nil
	}
	return lineage, at, classify("postgres sink: read the lineage of the output in "+o.records, err)
}

// checkLineage refuses to resume checkpoint id when the table's output is
// of another lineage than the run's (see ownerTable). A table without a
// recorded lineage (written before lineages) is taken as it is.
func (o *owner) checkLineage(ctx context.Context, conn *pgx.Conn, id checkpoint.ID) error {
	if planted.noLineage.Load() {
		return nil
	}
	lineage, at, err := o.tableLineage(ctx, conn)
	if err != nil || lineage == "" || lineage == o.lineage {
		return err
	}
	was := o.lineage
	if was == "" {
		was = "(none recorded: a checkpoint of an older version of Weir)"
	}
	return operator.Permanent(fmt.Errorf("postgres sink: table %s: %w: checkpoint %d continues the runs of lineage %s, but a run that started over at %s (lineage %s: --fresh, which deleted every row of the table, or a first run) writes the table now: restoring it would lose or mix rows. Restore a checkpoint or savepoint that run took, if it took one, or start over with --fresh",
		o.table, operator.ErrStartedOver, id, was, at.Format(time.RFC3339), lineage))
}

// ownerPollInterval is how often a subtask looks whether subtask 0 deleted
// an earlier run's output.
const ownerPollInterval = 20 * time.Millisecond

// writeSQL is the statement, and its arguments, that records this subtask's
// output in the transaction that commits it.
func (o *owner) writeSQL() (string, []any) {
	if !o.runs {
		return fmt.Sprintf(`INSERT INTO %s (relation, relation_name, job, uid, subtask, session_pid, session_start) VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (relation, job, uid, subtask) DO UPDATE SET relation_name = EXCLUDED.relation_name, session_pid = EXCLUDED.session_pid, session_start = EXCLUDED.session_start, committed_at = now()`, o.records),
			[]any{o.relation, o.table, o.job, o.uid, o.sub, o.pid, o.start}
	}
	return fmt.Sprintf(`INSERT INTO %s (relation, relation_name, job, uid, subtask, session_pid, session_start, run_id, run_attempt) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (relation, job, uid, subtask) DO UPDATE SET relation_name = EXCLUDED.relation_name, session_pid = EXCLUDED.session_pid, session_start = EXCLUDED.session_start, committed_at = now(), run_id = EXCLUDED.run_id, run_attempt = EXCLUDED.run_attempt`, o.records),
		[]any{o.relation, o.table, o.job, o.uid, o.sub, o.pid, o.start, nullIfEmpty(o.run), nullIfZero(o.attempt)}
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nullIfZero(n int) *int32 {
	if n == 0 {
		return nil
	}
	v := int32(n)
	return &v
}

func subtasks(rs []record) string {
	var s []string
	for _, r := range rs {
		s = append(s, fmt.Sprint(r.sub))
	}
	return strings.Join(s, ", ")
}

// names names the sinks of rs, each once.
func names(rs []record) string {
	var s []string
	for _, r := range rs {
		n := fmt.Sprintf("job %q sink %q", r.job, r.uid)
		if !slices.Contains(s, n) {
			s = append(s, n)
		}
	}
	return strings.Join(s, ", ")
}

func othersNote(others []record) string {
	if len(others) == 0 {
		return ""
	}
	return " (" + names(others) + " write it too, and --fresh refuses to delete their rows)"
}
