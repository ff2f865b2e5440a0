package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state"
)

// column is a column's type, as Sink found it.
type column struct {
	OID uint32
	Mod int32 // type modifier, -1 without: varchar(n), numeric(p,s), ...
}

// Records calls f with the row v becomes, as verify compares it: each
// column's value as PostgreSQL's type would hold it (encoded for the
// column's type and decoded back, so that an int64 written into a numeric
// column compares with what is read back), quoted, name=value.
func (w *txWriter[T]) Records(v T, f func(rec []byte)) {
	if w.types == nil {
		w.types = pgtype.NewMap()
	}
	vals := w.cfg.Row(v)
	w.buf = w.buf[:0]
	for i, c := range w.cfg.columns {
		var x any
		if i < len(vals) {
			x = c.fit(w.typed(c.OID, vals[i]))
		}
		w.buf = w.appendValue(w.buf, i, c.OID, x)
	}
	f(w.buf)
}

// fit is what PostgreSQL stores of v in the column: a varchar(n) value of
// more than n characters is cut to n if the rest is spaces (else the write
// fails).
func (c column) fit(v any) any {
	s, ok := v.(string)
	if !ok || c.OID != pgtype.VarcharOID || c.Mod < 4 {
		return v
	}
	n, i := int(c.Mod-4), 0 // the modifier is n plus the header's 4 bytes
	for at := range s {
		if i == n {
			if strings.Trim(s[at:], " ") == "" {
				return s[:at]
			}
			break
		}
		i++
	}
	return s
}

// typed is what a column of type oid holds of v, as pgx decodes it: v
// encoded the way a COPY writes it, decoded as a read returns it. A value
// the type cannot take (the job would fail writing it) stays as it is.
func (w *txWriter[T]) typed(oid uint32, v any) any {
	if v == nil {
		return nil
	}
	format := w.types.FormatCodeForOID(oid)
	// NB: into a buffer, not nil: Encode returns nil for NULL only then.
	b, err := w.types.Encode(oid, format, v, make([]byte, 0, 16))
	switch {
	case err != nil:
		return v
	case b == nil:
		return nil // NULL: a nil pointer, sql.Null*, ...
	}
	t, ok := w.types.TypeForOID(oid)
	if !ok {
		return string(b)
	}
	d, err := t.Codec.DecodeValue(w.types, oid, format, b)
	if err != nil {
		return v
	}
	return d
}

// appendValue appends column i's name=value, the value in the type's text
// form (as pgx writes it), quoted, or null.
func (w *txWriter[T]) appendValue(b []byte, i int, oid uint32, v any) []byte {
	if i > 0 {
		b = append(b, ' ')
	}
	b = append(append(b, w.cfg.Columns[i]...), '=')
	if v == nil {
		return append(b, "null"...)
	}
	text, err := w.types.Encode(oid, pgtype.TextFormatCode, v, nil)
	if err != nil {
		text = fmt.Append(nil, v)
	}
	return strconv.AppendQuote(b, string(text))
}

// Verifiable refuses columns whose type has a modifier (varchar(n) aside:
// Records cuts trailing spaces beyond n as PostgreSQL does, and any other
// value too long fails the write).
func (w *txWriter[T]) Verifiable() error {
	for i, c := range w.cfg.columns {
		if c.Mod != -1 && c.OID != pgtype.VarcharOID {
			return fmt.Errorf("postgres sink: column %s of table %s has a type modifier (numeric(p,s), char(n), timestamp(p), ...): PostgreSQL rounds or pads what the job writes into it, which the rerun's values do not show, so the table cannot be verified",
				w.cfg.Columns[i], w.cfg.Table)
		}
	}
	return nil
}

// Verifiable refuses: an upsert table keeps the last row of each key, and
// verify compares every record the rerun makes.
func (w *upsertWriter[T]) Verifiable() error {
	return fmt.Errorf("postgres sink into %s writes in upsert mode: the table keeps the last row of each key, not every record, and verify compares every record; verify reads back exactly-once tables only", w.cfg.Table)
}

// Committed reads the rows of the table, which must hold the sink's output
// up to checkpoint ctx.Restore.Checkpoint and no later one: the job must
// not be running (no subtask's session that committed rows lives), and the
// transactions the checkpoint recorded must be committed (a prepared
// transaction's rows cannot be read). Rows other writers put in the table
// are read too: the comparison reports them unexpected. It reads in one
// REPEATABLE READ transaction, and changes nothing.
func (w *txWriter[T]) Committed(ctx *operator.Context, f func(rec []byte)) error {
	rctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
	defer cancel()
	conn, err := connect(rctx, w.cfg.URL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var relation uint32
	var schema string
	err = conn.QueryRow(rctx, `SELECT c.oid, n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`, quoteTable(w.cfg.Table)).Scan(&relation, &schema)
	if err != nil {
		return classify("postgres sink: table "+w.cfg.Table, err)
	}
	records := pgx.Identifier{schema, ownerTable}.Sanitize()
	// NB: the job running is said first: its checkpoint's transactions may
	// be prepared because it has not committed them yet. A job that just
	// stopped leaves its sessions a moment longer: the server ends them
	// once it sees the connections closed.
	for wait := time.Now().Add(sessionEndWait); ; {
		err := w.notRunning(rctx, conn, ctx, relation, records)
		if err == nil {
			break
		}
		if !errors.Is(err, errRunning) || time.Now().After(wait) {
			return err
		}
		select {
		case <-time.After(50 * time.Millisecond): // polls the server for a condition
		case <-rctx.Done():
			return err
		}
	}
	// NB: before the snapshot: a transaction committed after it would be
	// neither prepared nor read.
	if err := w.recordedCommitted(rctx, conn, ctx); err != nil && !planted.verifyReadsPrepared.Load() {
		return err
	}
	tx, err := conn.BeginTx(rctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return classify("postgres sink: verify: begin", err)
	}
	defer tx.Rollback(context.Background())
	// The snapshot is taken by the first statement: a commit after it is
	// not read, whoever makes it; one before it by the job is seen here.
	if err := w.notRunning(rctx, tx, ctx, relation, records); err != nil {
		return err
	}
	// NB: the read itself is as long as the table: Timeout bounds the
	// statements before it.
	rows, err := tx.Query(context.Background(), fmt.Sprintf("SELECT %s FROM %s", columnList(w.cfg.Columns), quoteTable(w.cfg.Table)))
	if err != nil {
		return classify("postgres sink: read "+w.cfg.Table, err)
	}
	defer rows.Close()
	w.types = conn.TypeMap()
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return classify("postgres sink: read "+w.cfg.Table, err)
		}
		w.buf = w.buf[:0]
		for i, v := range vals {
			w.buf = w.appendValue(w.buf, i, rows.FieldDescriptions()[i].DataTypeOID, v)
		}
		f(w.buf)
	}
	return classify("postgres sink: read "+w.cfg.Table, rows.Err())
}

// recordedCommitted refuses a checkpoint whose transactions are still
// prepared: their rows are not readable until a restore commits them.
func (w *txWriter[T]) recordedCommitted(rctx context.Context, conn *pgx.Conn, ctx *operator.Context) error {
	items, err := state.RestoreList(ctx.Restore.Handles, ctx.Restore.Read, state.Union, "txns", 0, 1)
	if err != nil {
		return err
	}
	var gids []string
	for _, it := range items {
		var p prepared
		if err := json.Unmarshal(it, &p); err != nil {
			return fmt.Errorf("postgres sink %s: checkpoint %d: %w", ctx.UID, ctx.Restore.Checkpoint, err)
		}
		gids = append(gids, p.GID)
	}
	var still []string
	rows, err := conn.Query(rctx, `SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND gid = ANY($1) ORDER BY gid`, gids)
	if err == nil {
		still, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return classify("postgres sink: list prepared transactions", err)
	}
	if len(still) > 0 {
		return fmt.Errorf("postgres sink: checkpoint %d's transactions %s are prepared, not committed (the job stopped between the checkpoint and its commit): their rows cannot be read until they are; restart the job with --restore latest, which commits them, and verify its next checkpoint",
			ctx.Restore.Checkpoint, strings.Join(still, ", "))
	}
	return nil
}

// errRunning marks a refusal to read a table the job writes.
var errRunning = errors.New("the job is writing the table")

// sessionEndWait bounds how long verify waits for the sessions of a job
// that stopped to end. (A variable for the tests of a running job.)
var sessionEndWait = 5 * time.Second

// querier is a connection or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// notRunning refuses a table whose rows may include commits after the
// checkpoint: the job writes it now (a session that recorded committing
// into it lives), or it holds the output of another run (lineage).
func (w *txWriter[T]) notRunning(rctx context.Context, tx querier, ctx *operator.Context, relation uint32, records string) error {
	var exists, runs bool
	err := tx.QueryRow(rctx, `SELECT to_regclass($1) IS NOT NULL,
	(SELECT count(*) = 2 FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname IN ('run_id', 'run_attempt') AND NOT attisdropped)`, records).Scan(&exists, &runs)
	if err != nil || !exists {
		return classify("postgres sink: read "+records, err) // none: nothing committed
	}
	var sub, pid int32
	// NB: of another role's sessions, pg_stat_activity shows the start
	// only to members of pg_read_all_stats: a session of the pid whose
	// start is hidden may be the job's, and is taken for it.
	err = tx.QueryRow(rctx, fmt.Sprintf(`SELECT o.subtask, o.session_pid FROM %s o JOIN pg_stat_activity a ON a.pid = o.session_pid AND (a.backend_start = o.session_start OR a.backend_start IS NULL)
WHERE o.relation = $1 AND o.job = $2 AND o.uid = $3 AND o.subtask >= 0 ORDER BY o.subtask LIMIT 1`, records), relation, ctx.Job, ctx.UID).Scan(&sub, &pid)
	switch {
	case err == nil:
		return fmt.Errorf("postgres sink: %w: job %s is writing table %s (subtask %d's session, pid %d, committed into it and lives, or a session of that pid whose start this role may not see): rows it commits after checkpoint %d cannot be told from those before; verify once the job has stopped or finished",
			errRunning, ctx.Job, w.cfg.Table, sub, pid, ctx.Restore.Checkpoint)
	case !errors.Is(err, pgx.ErrNoRows):
		return classify("postgres sink: read "+records, err)
	case !runs:
		return nil
	}
	var lineage string
	err = tx.QueryRow(rctx, fmt.Sprintf("SELECT run_id FROM %s WHERE relation = $1 AND job = $2 AND uid = $3 AND subtask = $4 AND run_id IS NOT NULL", records),
		relation, ctx.Job, ctx.UID, lineageSubtask).Scan(&lineage)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return classify("postgres sink: read "+records, err)
	case ctx.Lineage != "" && lineage != ctx.Lineage:
		return fmt.Errorf("postgres sink: table %s holds the output of another run (lineage %s) than checkpoint %d's (%s): a run started over (--fresh) since, with other checkpoints; verify with that run's checkpoint directory",
			w.cfg.Table, lineage, ctx.Restore.Checkpoint, ctx.Lineage)
	}
	return nil
}
