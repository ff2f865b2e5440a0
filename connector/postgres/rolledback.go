package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
)

// Rolled-back transactions. A restore commits the prepared transactions its
// checkpoint records, and takes "prepared transaction does not exist" for
// committed earlier: by the run that prepared it, or by an earlier restore.
// But a start also rolls back the job's prepared transactions that the
// checkpoint it restores does not record (those of newer checkpoints, when
// it restores an older one), and a later restore of a checkpoint that
// records one of them (a savepoint, or a checkpoint restored by path) meets
// the same "does not exist": its rows are lost, and it must not go on as if
// they were committed.
//
// So before a start rolls back a prepared transaction, it records its gid
// in weir_sink_rolled_back, beside weir_sink_owner in the table's schema.
// At a restore, a recorded transaction that does not exist and has such a
// row was rolled back: the restore fails (ErrRolledBack, permanent), naming
// the checkpoint, the transaction and the start that rolled it back; one
// without a row was committed earlier.
//
// Why a row per rollback rather than a marker per commit (a row written in
// each prepared transaction, whose presence would say "committed"): the
// table grows with the starts that roll something back, not with every
// checkpoint of every subtask, and a checkpoint costs no extra statement.
// A gid names one transaction only, since it carries its attempt
// (attemptTag): checkpoint ids come again after a restore of an older
// checkpoint, and the row of a rolled-back transaction must say nothing of
// a later one with the same checkpoint id.
//
// Crashes: a start killed between its insert and its roll-back leaves a row
// for a transaction still prepared; a restore that records it finds it
// prepared, deletes the row, then commits it. --fresh (operator.Context
// StartOver) deletes the rows of its sink but those of what it rolled back
// itself, once it deleted the table's rows: this bounds the table, and a
// checkpoint of the runs before it that is restored over its output is
// wrong anyway (found and left alone 4: it needs a run lineage).
//
// NB: a transaction an administrator rolls back by hand (ROLLBACK PREPARED)
// leaves no row, and a restore that records it takes it for committed.
const rolledBackTable = "weir_sink_rolled_back"

// createRolledBackSQL creates the table of rolled-back transactions; %s is
// its quoted name. restored is the checkpoint the start that rolled the
// transaction back restored (NULL: it restored none).
const createRolledBackSQL = `CREATE TABLE IF NOT EXISTS %s (
	gid text PRIMARY KEY,
	job text NOT NULL,
	uid text NOT NULL,
	subtask int NOT NULL,
	restored numeric(20),
	rolled_back_at timestamptz NOT NULL DEFAULT now())`

// ErrRolledBack is the error (wrapped, and marked permanent) of a restore
// whose checkpoint records a transaction that an earlier start rolled back:
// its rows are lost.
var ErrRolledBack = errors.New("a transaction the restored checkpoint records was rolled back, and its rows are lost")

// rolledBack is a subtask's view of the table of rolled-back transactions.
type rolledBack struct {
	name     string // quoted
	table    string // the output table, for messages
	job, uid string
	sub, p   int
	restored *checkpoint.ID // the checkpoint this start restores, if any
}

// openRolledBack creates the table of rolled-back transactions in o's
// schema if need be.
func openRolledBack(rctx context.Context, conn *pgx.Conn, o *owner, ctx *operator.Context) (*rolledBack, error) {
	r := &rolledBack{name: pgx.Identifier{o.schema, rolledBackTable}.Sanitize(), table: o.table, job: ctx.Job, uid: ctx.UID, sub: ctx.Subtask, p: ctx.Parallelism}
	if ctx.Restore != nil {
		id := ctx.Restore.Checkpoint
		r.restored = &id
	}
	if err := ensureTable(rctx, conn, r.name, createRolledBackSQL, "where the sink records the prepared transactions a start rolled back, so that a restore of a checkpoint that records one fails rather than loses its rows"); err != nil {
		return nil, err
	}
	return r, nil
}

// check is run at a restore before it commits the transactions gids
// (subtask sub's, of checkpoint at) that the checkpoint records: it fails
// with ErrRolledBack for one that an earlier start rolled back, and deletes
// the rows of those still prepared (the start that wrote them was killed
// before its roll-back).
func (r *rolledBack) check(ctx context.Context, conn *pgx.Conn, txns []*prepared) error {
	if len(txns) == 0 || planted.rolledBackIsCommitted.Load() {
		return nil
	}
	gids := make([]string, len(txns))
	for i, p := range txns {
		gids[i] = p.GID
	}
	x, err := r.lost(ctx, conn, txns, gids)
	if err == nil && x != nil {
		// NB: pg_prepared_xacts is not read in the query's snapshot: a
		// sibling that deleted its stale row (below) and then committed the
		// transaction in between looks rolled back. A second look, in a
		// newer snapshot, does not see that row.
		x, err = r.lost(ctx, conn, txns, gids)
	}
	if err != nil || x == nil {
		return err
	}
	by := "a start that restored no checkpoint (--fresh, or a run without --restore)"
	if x.restored != nil {
		by = "a restore of checkpoint " + *x.restored
	}
	return operator.Permanent(fmt.Errorf("postgres sink: restore of checkpoint %s: subtask %d's transaction %s of checkpoint %d was rolled back at %s by %s, which did not record it (a start rolls back the prepared transactions the checkpoint it restores does not record): %w; restore a checkpoint or savepoint taken after that start, or start over with --fresh (Config.Fresh), which deletes every row of %s",
		r.describeRestored(), x.p.Sub, x.p.GID, x.p.At, x.at.UTC().Format(time.RFC3339), by, ErrRolledBack, r.table))
}

// rollback is a recorded transaction that a start rolled back.
type rollback struct {
	p        *prepared
	restored *string // the checkpoint that start restored, if any
	at       time.Time
}

// lost returns the first of txns (gids, their ids) that a start rolled
// back, or nil, deleting the rows of those still prepared.
func (r *rolledBack) lost(ctx context.Context, conn *pgx.Conn, txns []*prepared, gids []string) (*rollback, error) {
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT r.gid, r.restored::text, r.rolled_back_at,
	EXISTS (SELECT 1 FROM pg_prepared_xacts p WHERE p.gid = r.gid AND p.database = current_database())
FROM %s r WHERE r.gid = ANY($1)`, r.name), gids)
	if err != nil {
		return nil, classify("postgres sink: read "+r.name, err)
	}
	type row struct {
		gid      string
		restored *string
		at       time.Time
		prepared bool
	}
	found, err := pgx.CollectRows(rows, func(cr pgx.CollectableRow) (row, error) {
		var x row
		err := cr.Scan(&x.gid, &x.restored, &x.at, &x.prepared)
		return x, err
	})
	if err != nil {
		return nil, classify("postgres sink: read "+r.name, err)
	}
	var stale []string
	for _, p := range txns {
		for _, x := range found {
			if x.gid != p.GID {
				continue
			}
			if !x.prepared {
				return &rollback{p, x.restored, x.at}, nil
			}
			stale = append(stale, x.gid)
		}
	}
	if len(stale) > 0 {
		if _, err := conn.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE gid = ANY($1)", r.name), stale); err != nil {
			return nil, classify("postgres sink: delete from "+r.name, err)
		}
	}
	return nil, nil
}

func (r *rolledBack) describeRestored() string {
	if r.restored == nil {
		return "(none)"
	}
	return strconv.FormatUint(uint64(*r.restored), 10)
}

// record records, before its roll-back, that this start rolls back gid,
// subtask sub's.
func (r *rolledBack) record(ctx context.Context, conn *pgx.Conn, gid string, sub int) error {
	var restored *string
	if r.restored != nil {
		s := strconv.FormatUint(uint64(*r.restored), 10)
		restored = &s
	}
	_, err := conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (gid, job, uid, subtask, restored) VALUES ($1, $2, $3, $4, $5::numeric)
ON CONFLICT (gid) DO UPDATE SET restored = EXCLUDED.restored, rolled_back_at = now()`, r.name), gid, r.job, r.uid, sub, restored)
	return classify("postgres sink: record the roll-back of "+gid+" in "+r.name, err)
}

// forget deletes the rows of the subtasks this subtask stands for (their
// number modulo the parallelism is its own) but those of the gids kept,
// which this start rolled back: a start over.
func (r *rolledBack) forget(ctx context.Context, conn *pgx.Conn, kept []string) error {
	_, err := conn.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE job = $1 AND uid = $2 AND subtask %% $3 = $4 AND gid <> ALL($5)", r.name), r.job, r.uid, r.p, r.sub, kept)
	return classify("postgres sink: start over: delete from "+r.name, err)
}
