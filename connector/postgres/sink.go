package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state"
)

// prepared is a transaction of one checkpoint interval, handed over at the
// snapshot: the asynchronous part prepares it, NotifyComplete commits it.
type prepared struct {
	GID string        `json:"gid"`
	Sub int           `json:"sub"`
	At  checkpoint.ID `json:"at"`

	mu   sync.Mutex
	conn *pgxpool.Conn // holds the transaction until it is prepared
	done bool
	// failed is the error of a PREPARE that failed: PostgreSQL rolled the
	// transaction back, and its rows are gone with it.
	failed error
}

// prepare runs PREPARE TRANSACTION once and gives the connection back.
func (p *prepared) prepare(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done || p.failed != nil {
		return p.failed
	}
	if p.conn == nil {
		return fmt.Errorf("postgres sink: transaction %s was closed before it was prepared", p.GID)
	}
	if _, err := p.conn.Exec(ctx, "PREPARE TRANSACTION "+literal(p.GID)); err != nil {
		// NB: not again on this session: PREPARE without a transaction only
		// warns, and the rows would count as prepared. Closing the session
		// rolls back what may still be open; a transaction the server did
		// prepare after all is rolled back by the restore, which does not
		// record it.
		p.failed = fmt.Errorf("postgres sink: prepare transaction %s of checkpoint %d failed, and its rows are gone with it: the job restores its latest checkpoint to write them again: %w", p.GID, p.At, err)
		p.conn.Hijack().Close(context.Background())
		p.conn = nil
		return p.failed
	}
	p.conn.Release()
	p.conn, p.done = nil, true
	return nil
}

// lost is the error of a PREPARE that failed, if any.
func (p *prepared) lost() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed
}

// abandon closes the connection of a transaction never prepared: the
// server rolls it back.
func (p *prepared) abandon() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		p.conn.Hijack().Close(context.Background())
		p.conn = nil
	}
}

// literal quotes s as an SQL string literal.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// txWriter writes exactly-once with prepared transactions.
type txWriter[T any] struct {
	cfg    SinkConfig[T]
	ctx    *operator.Context
	table  pgx.Identifier
	pool   *pgxpool.Pool
	prefix string // of this sink's transaction ids (gidPrefix)
	legacy string // of those of Weir before gidVersion, or "" (legacyPrefix)

	conn    *pgxpool.Conn // holds the open transaction, if any
	rows    [][]any
	pending []*prepared // by checkpoint
	// own is the subtask's session from Open to Close, which its ownership
	// records name (owner).
	own   *pgx.Conn
	owner *owner
	// rolled records the transactions a start rolls back (rolledBackTable).
	rolled *rolledBack
	// attempt names this attempt in its gids (attemptTag).
	attempt string

	// types and buf make verify's records (Records, Committed).
	types *pgtype.Map
	buf   []byte
}

func (w *txWriter[T]) Open(ctx *operator.Context) error {
	w.ctx, w.table = ctx, pgx.Identifier(strings.Split(w.cfg.Table, "."))
	w.prefix, w.legacy = gidPrefix(ctx.Job, ctx.UID), legacyPrefix(ctx.Job, ctx.UID)
	rctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
	defer cancel()
	pc, err := pgxpool.ParseConfig(w.cfg.URL)
	if err != nil {
		return operator.Permanent(fmt.Errorf("postgres sink: URL: %w", err))
	}
	pc.MaxConns = 4 // the open transaction, those being prepared, commits
	if w.pool, err = pgxpool.NewWithConfig(rctx, pc); err != nil {
		return fmt.Errorf("postgres sink: %w", err)
	}
	if w.own, err = connect(rctx, w.cfg.URL); err != nil {
		return err
	}
	if ctx.CheckpointingEnabled { // without checkpoints nothing is prepared: Finish commits
		if err := checkPreparedSlots(rctx, w.own, ctx.Parallelism); err != nil {
			return err
		}
	}
	// Without checkpoints a subtask commits at the end of its input, maybe
	// before another opened.
	if w.owner, err = openOwner(rctx, w.own, w.cfg.Table, ctx, !ctx.CheckpointingEnabled); err != nil {
		return err
	}
	w.attempt = attemptTag(w.owner.pid, w.owner.start)
	if w.rolled, err = openRolledBack(rctx, w.own, w.owner, ctx); err != nil {
		return err
	}
	if ctx.Resumed != 0 {
		// NB: before anything commits or rolls back: a refused restore
		// leaves the table and its prepared transactions as they are.
		if err := w.owner.checkLineage(rctx, w.own, ctx.Resumed); err != nil {
			return err
		}
	}
	if ctx.Restore == nil && ctx.Resumed == 0 && !ctx.StartOver {
		// NB: before the roll-back: a run refused for want of --restore must
		// leave what the restore will commit.
		if err := w.owner.check(rctx, w.own, false, ctx.Logger.Warn); err != nil {
			return err
		}
	}
	recorded := map[string]bool{}
	if ctx.Restore != nil {
		items, err := state.RestoreList(ctx.Restore.Handles, ctx.Restore.Read, state.Union, "txns", ctx.Subtask, ctx.Parallelism)
		if err != nil {
			return err
		}
		var all, commit []*prepared
		for _, it := range items {
			var p prepared
			if err := json.Unmarshal(it, &p); err != nil {
				return operator.Permanent(fmt.Errorf("postgres sink: restore: %w", err))
			}
			recorded[p.GID] = true
			all = append(all, &p)
			if p.Sub%ctx.Parallelism == ctx.Subtask && (!planted.ownSubtaskOnly.Load() || p.Sub == ctx.Subtask) {
				commit = append(commit, &p)
			}
		}
		slices.SortFunc(commit, func(a, b *prepared) int { return int(a.At) - int(b.At) })
		// NB: every subtask checks every recorded transaction, before it
		// rolls anything back: a refused restore must leave what a later
		// checkpoint prepared, whichever subtask's transaction was lost.
		if err := w.rolled.check(rctx, w.own, all); err != nil {
			return err
		}
		for _, p := range commit {
			if err := w.commit(rctx, p.GID); err != nil {
				return err
			}
		}
	}
	// Roll back what earlier attempts prepared and no checkpoint recorded.
	type unrecorded struct {
		gid string
		sub int
	}
	var gids []unrecorded
	for _, prefix := range []string{w.prefix, w.legacy} {
		if prefix == "" {
			continue
		}
		rows, err := w.pool.Query(rctx, `SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND gid LIKE $1 ESCAPE '\'`, likePrefix(prefix))
		if err != nil {
			return classify("postgres sink: list prepared transactions", err)
		}
		found, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return classify("postgres sink: list prepared transactions", err)
		}
		for _, gid := range found {
			// NB: LIKE found gids that start with prefix; only those that
			// parse are this sink's.
			if sub, _, ok := parseGID(prefix, gid); ok && sub%ctx.Parallelism == ctx.Subtask && !recorded[gid] {
				gids = append(gids, unrecorded{gid, sub})
			}
		}
	}
	if planted.noRollBack.Load() {
		gids = nil
	}
	for _, g := range gids {
		// NB: recorded first: a start killed between the two leaves a row
		// of a transaction still prepared, which a restore then deletes.
		if err := w.rolled.record(rctx, w.own, g.gid, g.sub); err != nil {
			return err
		}
		if _, err := w.pool.Exec(rctx, "ROLLBACK PREPARED "+literal(g.gid)); err != nil && !undefined(err) {
			return classify("postgres sink: roll back "+g.gid, err)
		}
		ctx.Logger.Info("postgres sink: rolled back a transaction no completed checkpoint recorded", "gid", g.gid)
	}
	if ctx.StartOver {
		// NB: after the roll-back: an earlier run's prepared transaction may
		// hold a lock on its ownership record, which subtask 0 deletes.
		if err := w.owner.check(rctx, w.own, true, ctx.Logger.Warn); err != nil {
			return err
		}
		// Only once the start over is sure: a refused one forgets nothing.
		kept := make([]string, len(gids))
		for i, g := range gids {
			kept[i] = g.gid
		}
		return w.rolled.forget(rctx, w.own, kept)
	}
	return nil
}

func likePrefix(p string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(p) + "%"
}

// undefined reports PostgreSQL's "prepared transaction … does not exist".
func undefined(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "42704"
}

// commit commits a prepared transaction; one that no longer exists was
// committed already.
func (w *txWriter[T]) commit(ctx context.Context, gid string) error {
	if _, err := w.pool.Exec(ctx, "COMMIT PREPARED "+literal(gid)); err != nil && !undefined(err) {
		return classify("postgres sink: commit "+gid, err)
	}
	return nil
}

func (w *txWriter[T]) Write(v T) error {
	w.rows = append(w.rows, w.cfg.Row(v))
	if len(w.rows) >= w.cfg.BatchRows {
		return w.flush(context.Background())
	}
	return nil
}

// flush copies the buffered rows into the open transaction, beginning one
// if need be. It fails once a transaction handed to a snapshot failed to
// prepare (its rows are lost until a restore writes them again).
func (w *txWriter[T]) flush(ctx context.Context) error {
	for _, p := range w.pending {
		if err := p.lost(); err != nil {
			return err
		}
	}
	if len(w.rows) == 0 {
		return nil
	}
	if w.conn == nil {
		conn, err := w.pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("postgres sink: %w", err)
		}
		// NB: a lock wait is bounded: a row whose key a prepared
		// transaction of this job holds (a duplicate key) waits for
		// NotifyComplete, which the task blocked here cannot take. After a
		// restart the restore commits that transaction and the row fails
		// on its key.
		ms := min(math.MaxInt32, max(1, w.cfg.LockTimeout.Milliseconds())) // PostgreSQL's range
		for _, sql := range []string{"BEGIN", fmt.Sprintf("SET LOCAL lock_timeout = %d", ms)} {
			if _, err := conn.Exec(ctx, sql); err != nil {
				conn.Release()
				return classify("postgres sink: begin", err)
			}
		}
		w.conn = conn
		if !w.owner.written {
			sql, args := w.owner.writeSQL()
			if _, err := conn.Exec(ctx, sql, args...); err != nil {
				return classify("postgres sink: record the output in "+w.owner.records, err)
			}
			w.owner.written = true
		}
	}
	if _, err := w.conn.CopyFrom(ctx, w.table, w.cfg.Columns, pgx.CopyFromRows(w.rows)); err != nil {
		if pg := (*pgconn.PgError)(nil); errors.As(err, &pg) && pg.Code == "55P03" { // lock_not_available
			err = fmt.Errorf("%w; waited %v (LockTimeout) for a lock on %s: another session locks the table (CREATE INDEX, ALTER TABLE), or a prepared transaction of this job holds a row with the same key (the restart commits it, and the row then fails on its key)", err, w.cfg.LockTimeout, w.cfg.Table)
		}
		return w.cfg.copyError("postgres sink: copy into "+w.cfg.Table, w.conn.Conn().TypeMap(), w.rows, err)
	}
	w.rows = w.rows[:0]
	return nil
}

// Snapshot pre-commits: the buffered rows go into the transaction, which is
// recorded and handed to the asynchronous part to PREPARE.
func (w *txWriter[T]) Snapshot(id checkpoint.ID) (operator.Async, error) {
	if err := w.flush(context.Background()); err != nil {
		return nil, err
	}
	if w.conn != nil {
		w.pending = append(w.pending, &prepared{GID: formatGID(w.prefix, w.ctx.Subtask, id, w.attempt), Sub: w.ctx.Subtask, At: id, conn: w.conn})
		w.conn = nil
	}
	items := make([][]byte, len(w.pending))
	for i, p := range w.pending {
		items[i], _ = json.Marshal(p)
	}
	write := w.ctx.SnapshotList(state.Union, "txns", items)
	// NB: a transaction whose PREPARE never ran (another operator's
	// asynchronous part failed first) is prepared by the next snapshot: a
	// checkpoint completes only once every transaction it records is.
	todo := slices.Clone(w.pending)
	timeout := w.cfg.Timeout
	return func(wr operator.Writer) ([]checkpoint.Handle, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		for _, p := range todo {
			if err := p.prepare(ctx); err != nil {
				return nil, err
			}
		}
		return write(wr)
	}, nil
}

// NotifyComplete commits every transaction prepared up to checkpoint id.
func (w *txWriter[T]) NotifyComplete(id checkpoint.ID) error {
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
	defer cancel()
	keep := w.pending[:0]
	var gone []*prepared // committed, or rolled back by another start
	for _, p := range w.pending {
		if p.At > id {
			keep = append(keep, p)
			continue
		}
		if _, err := w.pool.Exec(ctx, "COMMIT PREPARED "+literal(p.GID)); err != nil && !undefined(err) {
			return classify("postgres sink: commit "+p.GID, err)
		} else if err != nil {
			gone = append(gone, p)
		}
	}
	w.pending = keep
	return w.rolledBackBeside(ctx, id, gone)
}

// rolledBackBeside fails, permanently, if a start recorded that it rolled
// back one of the transactions this attempt prepared and found gone at
// checkpoint id's commit: another run of the job started beside this one
// (a start rolls back the prepared transactions that the checkpoint it
// restores does not record), and their rows are lost. A transaction gone
// without such a record was committed, by a restore of a checkpoint that
// records it.
func (w *txWriter[T]) rolledBackBeside(ctx context.Context, id checkpoint.ID, gone []*prepared) error {
	if len(gone) == 0 {
		return nil
	}
	gids := make([]string, len(gone))
	for i, p := range gone {
		gids[i] = p.GID
	}
	x, err := w.rolled.lost(ctx, w.own, gone, gids)
	if err != nil || x == nil {
		return err
	}
	return operator.Permanent(fmt.Errorf("postgres sink: checkpoint %d completed, but subtask %d's transaction %s of checkpoint %d was rolled back at %s by another start of job %q on %s (a start rolls back the prepared transactions that the checkpoint it restores does not record): %w; run one job at a time on a table, then restore the latest checkpoint",
		id, x.p.Sub, x.p.GID, x.p.At, x.at.UTC().Format(time.RFC3339), w.ctx.Job, w.cfg.Table, ErrRolledBack))
}

// Finish commits at once without checkpoints; with them, the final
// checkpoint commits.
func (w *txWriter[T]) Finish() error {
	if w.ctx.CheckpointingEnabled {
		return nil
	}
	ctx := context.Background()
	if err := w.flush(ctx); err != nil || w.conn == nil {
		return err
	}
	_, err := w.conn.Exec(ctx, "COMMIT")
	w.conn.Release()
	w.conn = nil
	return classify("postgres sink: commit", err)
}

func (w *txWriter[T]) NotifyAborted(checkpoint.ID) {}

// Close rolls back the open transaction and those never prepared; the
// prepared ones stay, for the restore to commit or roll back.
func (w *txWriter[T]) Close() error {
	if w.conn != nil {
		w.conn.Hijack().Close(context.Background())
		w.conn = nil
	}
	for _, p := range w.pending {
		p.abandon()
	}
	if w.pool != nil {
		w.pool.Close()
	}
	if w.own != nil {
		w.own.Close(context.Background())
	}
	return nil
}

// upsertWriter writes INSERT … ON CONFLICT DO UPDATE in batches, each
// committed: at most BatchRows rows wait, and none past a snapshot.
type upsertWriter[T any] struct {
	cfg     SinkConfig[T]
	conn    *pgx.Conn
	stage   string
	columns []string // of the staging table: cfg.Columns, then the arrival
	upsert  string
	rows    [][]any
	arrival []any // int64(i) at i, kept to copy without an allocation per row
	row     []any // the row being copied: rows[i], then arrival[i]
	ctx     *operator.Context
	owner   *owner // its session is conn's
	wrote   bool   // a batch was committed in this attempt
}

func (w *upsertWriter[T]) Open(ctx *operator.Context) error {
	rctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
	defer cancel()
	conn, err := connect(rctx, w.cfg.URL)
	if err != nil {
		return err
	}
	w.conn = conn
	w.stage = "weir_stage"
	w.columns = append(slices.Clone(w.cfg.Columns), arrivalColumn(w.cfg.Columns))
	if _, err := conn.Exec(rctx, stageSQL(w.stage, quoteTable(w.cfg.Table), w.cfg.Columns, "ON COMMIT DELETE ROWS")); err != nil {
		return classify("postgres sink: staging table", err)
	}
	coll, err := arbiterCollations(rctx, conn, quoteTable(w.cfg.Table), w.cfg.Key)
	if err != nil {
		return classify("postgres sink: collations of the key's unique index", err)
	}
	w.upsert = upsertSQL(quoteTable(w.cfg.Table), w.stage, w.cfg.Columns, w.cfg.Key, coll)
	w.ctx = ctx
	if w.owner, err = openOwner(rctx, conn, w.cfg.Table, ctx, !ctx.CheckpointingEnabled); err != nil {
		return err
	}
	w.owner.unrecorded = true
	if ctx.Resumed != 0 {
		return w.owner.checkLineage(rctx, conn, ctx.Resumed)
	}
	if ctx.Restore == nil {
		return w.owner.check(rctx, conn, ctx.StartOver, ctx.Logger.Warn)
	}
	return nil
}

func (w *upsertWriter[T]) Write(v T) error {
	w.rows = append(w.rows, w.cfg.Row(v))
	if len(w.rows) >= w.cfg.BatchRows {
		return w.flush()
	}
	return nil
}

// flush writes the buffered rows in one transaction: copied into the
// staging table with their order of arrival, then upserted, the last of each
// key winning (upsertSQL).
func (w *upsertWriter[T]) flush() error {
	if len(w.rows) == 0 {
		return nil
	}
	for i := len(w.arrival); i < len(w.rows); i++ {
		w.arrival = append(w.arrival, int64(i))
	}
	// NB: CopyFrom encodes a row's values before it asks for the next, so
	// one slice serves every row.
	staged := pgx.CopyFromSlice(len(w.rows), func(i int) ([]any, error) {
		w.row = append(append(w.row[:0], w.rows[i]...), w.arrival[i])
		return w.row, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
	defer cancel()
	err := pgx.BeginFunc(ctx, w.conn, func(tx pgx.Tx) error {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{w.stage}, w.columns, staged); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, w.upsert)
		return err
	})
	if err != nil {
		return w.cfg.copyError("postgres sink: upsert into "+w.cfg.Table, w.conn.TypeMap(), w.rows, err)
	}
	w.wrote = true
	w.rows = w.rows[:0]
	return nil
}

// record writes the ownership record once the attempt committed output a
// restore does not take back: at the first checkpoint completed after a
// batch, or at the end of input without checkpoints. So "recorded" means
// what it means in exactly-once mode, where output commits at those
// moments: a run killed before them left no record, and a run that
// replays its input from the start rewrites its rows with the same values.
func (w *upsertWriter[T]) record() error {
	if !w.wrote || w.owner.written {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
	defer cancel()
	sql, args := w.owner.writeSQL()
	if _, err := w.conn.Exec(ctx, sql, args...); err != nil {
		return classify("postgres sink: record the output in "+w.owner.records, err)
	}
	w.owner.written = true
	return nil
}

// Snapshot writes what is buffered: the checkpoint then covers it. Its
// state is a marker, so that a restore gives the sink a Restore (the
// runtime gives none to an operator without state) and the sink knows the
// run resumes.
func (w *upsertWriter[T]) Snapshot(checkpoint.ID) (operator.Async, error) {
	if err := w.flush(); err != nil {
		return nil, err
	}
	return w.ctx.SnapshotList(state.Union, "upsert", [][]byte{[]byte(strconv.Itoa(w.ctx.Subtask))}), nil
}

func (w *upsertWriter[T]) NotifyComplete(checkpoint.ID) error { return w.record() }
func (w *upsertWriter[T]) NotifyAborted(checkpoint.ID)        {}

func (w *upsertWriter[T]) Finish() error {
	if err := w.flush(); err != nil || w.ctx.CheckpointingEnabled {
		return err
	}
	return w.record()
}

func (w *upsertWriter[T]) Close() error {
	if w.conn != nil {
		w.conn.Close(context.Background())
	}
	return nil
}
