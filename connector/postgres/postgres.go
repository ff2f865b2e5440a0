// Package postgres writes records into a PostgreSQL table, on pgx, in one
// of two ways:
//
//   - ExactlyOnce, by two-phase commit: each subtask writes the records of
//     a checkpoint interval into one transaction (with COPY), prepares it
//     (PREPARE TRANSACTION, with a global id naming job, operator, subtask
//     and checkpoint) in the snapshot, and commits it (COMMIT PREPARED)
//     when the checkpoint completes. A restore commits the transactions the
//     checkpoint recorded (one already committed counts as done), then
//     rolls back the job's other prepared transactions it finds in
//     pg_prepared_xacts. Prepared transactions survive a PostgreSQL
//     restart. Rows become visible once per checkpoint. It needs
//     max_prepared_transactions above 0.
//   - Upsert: INSERT … ON CONFLICT (key) DO UPDATE, in batches committed
//     when a batch fills and at every snapshot; of the rows of a batch that
//     are one key to PostgreSQL (which may differ in Go: citext, char(n)),
//     the last to arrive is written. Rows become visible soon;
//     the effect is exactly-once when records carry deterministic values
//     (such as a running count), since a replay writes the same rows again.
//
// Records map to columns through a function, or the fields of a struct
// (tag `db:"name"`, or the field name in snake_case).
package postgres

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/operator"
)

// Mode is how a sink writes.
type Mode int

const (
	// ExactlyOnce writes by two-phase commit with prepared transactions.
	// The default.
	ExactlyOnce Mode = iota
	// Upsert writes INSERT … ON CONFLICT (Key) DO UPDATE, committed often.
	Upsert
)

func (m Mode) String() string {
	switch m {
	case ExactlyOnce:
		return "exactly-once"
	case Upsert:
		return "upsert"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// ParseMode parses exactly-once or upsert.
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{ExactlyOnce, Upsert} {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("postgres mode %q: want exactly-once or upsert", s)
}

// Defaults of SinkConfig.
const (
	DefaultBatchRows   = 5000
	DefaultTimeout     = 10 * time.Second
	DefaultLockTimeout = time.Minute
)

// SinkConfig configures Sink. The zero value of a field means its default.
type SinkConfig[T any] struct {
	// URL is the connection string (postgres://user@host:port/db?...).
	// Required.
	URL string
	// Table is the table to write, optionally schema.table. Required. It
	// is quoted as an identifier everywhere (as pgx.Identifier does), so
	// "Counts" is the table created as "Counts", not counts.
	Table string
	// Columns are the columns Row's values go to, in order. Default: the
	// fields of T, a struct (tag `db:"name"`, "-" to skip; else the field
	// name in snake_case).
	Columns []string
	// Row returns a record's column values. Default: the fields of T.
	Row func(T) []any
	// Key are the columns of the table's primary key or a unique index:
	// the conflict target of Upsert. Required in Upsert mode.
	Key []string
	// Mode is ExactlyOnce (default) or Upsert.
	Mode Mode
	// CreateTable, if set, is the statement that creates Table when it
	// does not exist.
	CreateTable string
	// BatchRows is how many rows are buffered before they are written.
	// Default DefaultBatchRows.
	BatchRows int
	// Timeout bounds the statements run at start and at snapshots.
	// Default DefaultTimeout.
	Timeout time.Duration
	// LockTimeout bounds how long an exactly-once write waits for a lock
	// (PostgreSQL's lock_timeout, at most about 24 days), then fails and
	// the job restarts: another session's lock on the table (CREATE INDEX,
	// ALTER TABLE) is waited out that long, and a row whose key a prepared
	// transaction of the job holds, which only a restart commits, does not
	// wait for ever. Default DefaultLockTimeout.
	LockTimeout time.Duration

	columns []column // the types of Columns, found by Sink
}

// Sink returns a sink writing into cfg.Table. It fails now, writing
// nothing, if the configuration is invalid, the database does not answer,
// the table or a column is missing, Upsert's key has no unique index, or
// ExactlyOnce finds max_prepared_transactions at 0.
func Sink[T any](cfg SinkConfig[T]) (func() weir.SinkWriter[T], error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	conn, err := connect(ctx, cfg.URL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	if err := cfg.check(ctx, conn); err != nil {
		return nil, err
	}
	return func() weir.SinkWriter[T] {
		if cfg.Mode == Upsert {
			return &upsertWriter[T]{cfg: cfg}
		}
		return &txWriter[T]{cfg: cfg}
	}, nil
}

func (cfg *SinkConfig[T]) fill() error {
	switch {
	case cfg.URL == "":
		return errors.New("postgres sink: no URL")
	case cfg.Table == "":
		return errors.New("postgres sink: no table")
	case !validTable(cfg.Table):
		return fmt.Errorf("postgres sink: table %q: want table or schema.table, each part non-empty", cfg.Table)
	case cfg.Mode != ExactlyOnce && cfg.Mode != Upsert:
		return fmt.Errorf("postgres sink: %v", cfg.Mode)
	case cfg.Mode == Upsert && len(cfg.Key) == 0:
		return errors.New("postgres sink: upsert needs the key columns (Key; key= in the URL)")
	case (cfg.Row == nil) != (len(cfg.Columns) == 0):
		return errors.New("postgres sink: give both Columns and Row, or neither (then T's fields are the columns)")
	}
	if _, err := pgx.ParseConfig(cfg.URL); err != nil {
		return fmt.Errorf("postgres sink: URL: %w", err)
	}
	if cfg.Row == nil {
		cols, row, err := structColumns[T]()
		if err != nil {
			return err
		}
		cfg.Columns, cfg.Row = cols, row
	}
	for _, k := range cfg.Key {
		if !slices.Contains(cfg.Columns, k) {
			return fmt.Errorf("postgres sink: key column %q is not among the columns %v", k, cfg.Columns)
		}
	}
	if cfg.BatchRows <= 0 {
		cfg.BatchRows = DefaultBatchRows
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.LockTimeout <= 0 {
		cfg.LockTimeout = DefaultLockTimeout
	}
	return nil
}

func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("postgres: cannot connect: %w", err)
	}
	return conn, nil
}

// check checks at start what writing needs, creating the table if asked.
func (cfg *SinkConfig[T]) check(ctx context.Context, conn *pgx.Conn) error {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", quoteTable(cfg.Table)).Scan(&exists); err != nil {
		return fmt.Errorf("postgres sink: table %s: %w", cfg.Table, err)
	}
	if !exists {
		if cfg.CreateTable == "" {
			return fmt.Errorf("postgres sink: table %s does not exist: create it, or give the statement that does (CreateTable)", cfg.Table)
		}
		// NB: two processes that start at once (standby coordinators)
		// would both create it, and one fail on a unique violation in the
		// catalog. The lock makes one wait; it then finds the table the
		// other made (42P07: the statement need not say IF NOT EXISTS).
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", quoteTable(cfg.Table)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, cfg.CreateTable)
			return err
		})
		if pg := (*pgconn.PgError)(nil); errors.As(err, &pg) && pg.Code == "42P07" {
			if qerr := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", quoteTable(cfg.Table)).Scan(&exists); qerr == nil && exists {
				err = nil
			}
		}
		if err != nil {
			return fmt.Errorf("postgres sink: create table %s: %w", cfg.Table, err)
		}
	}
	// Every column must be there: a statement that reads them all fails
	// otherwise, naming the missing one. It says their types too.
	rows, err := conn.Query(ctx, fmt.Sprintf("SELECT %s FROM %s LIMIT 0", columnList(cfg.Columns), quoteTable(cfg.Table)))
	if err == nil {
		cfg.columns = cfg.columns[:0]
		for _, fd := range rows.FieldDescriptions() {
			cfg.columns = append(cfg.columns, column{OID: fd.DataTypeOID, Mod: fd.TypeModifier})
		}
		rows.Close()
		err = rows.Err()
	}
	if err != nil {
		return fmt.Errorf("postgres sink: table %s: %w", cfg.Table, err)
	}
	if err := cfg.checkUnwritten(ctx, conn); err != nil {
		return err
	}
	switch cfg.Mode {
	case ExactlyOnce:
		if err := checkPreparedSlots(ctx, conn, 1); err != nil {
			return err
		}
	case Upsert:
		// Planning the upsert fails when no unique index matches the key.
		if _, err := conn.Exec(ctx, stageSQL("weir_check_stage", quoteTable(cfg.Table), cfg.Columns, "")); err != nil {
			return fmt.Errorf("postgres sink: table %s: %w", cfg.Table, err)
		}
		coll, err := arbiterCollations(ctx, conn, quoteTable(cfg.Table), cfg.Key)
		if err != nil {
			return fmt.Errorf("postgres sink: table %s: collations of the key's unique index: %w", cfg.Table, err)
		}
		if _, err := conn.Exec(ctx, "EXPLAIN "+upsertSQL(quoteTable(cfg.Table), "weir_check_stage", cfg.Columns, cfg.Key, coll)); err != nil {
			return fmt.Errorf("postgres sink: upsert into %s on (%s) (a primary key or unique index on exactly these columns is needed): %w", cfg.Table, strings.Join(cfg.Key, ", "), err)
		}
		nullable, err := nullableKey(ctx, conn, quoteTable(cfg.Table), cfg.Key)
		if err != nil {
			return fmt.Errorf("postgres sink: table %s: key columns: %w", cfg.Table, err)
		}
		if len(nullable) > 0 {
			return fmt.Errorf("postgres sink: upsert into %s on (%s): key column %s may be NULL, and ON CONFLICT never matches a NULL key, so a replay would write such rows again: declare it NOT NULL (ALTER TABLE %s ALTER COLUMN %s SET NOT NULL), or make the key's unique index NULLS NOT DISTINCT (PostgreSQL 15)",
				cfg.Table, strings.Join(cfg.Key, ", "), nullable[0], quoteTable(cfg.Table), pgx.Identifier{nullable[0]}.Sanitize())
		}
	}
	return nil
}

// validTable reports whether table is table or schema.table with no part
// empty.
func validTable(table string) bool {
	parts := strings.Split(table, ".")
	return len(parts) <= 2 && !slices.Contains(parts, "")
}

// quoteTable is table (or schema.table) as an SQL identifier. COPY names
// the table the same way (pgx.Identifier), so every statement of the sink
// means one table.
func quoteTable(table string) string {
	return pgx.Identifier(strings.Split(table, ".")).Sanitize()
}

func columnList(cols []string) string {
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = pgx.Identifier{c}.Sanitize()
	}
	return strings.Join(quoted, ", ")
}

// arrivalColumn is the column of a staging table (stageSQL) that numbers its
// rows in the order they arrived. It is named unlike every column of cols.
func arrivalColumn(cols []string) string {
	name := "weir_arrival"
	for slices.Contains(cols, name) {
		name += "_"
	}
	return name
}

// stageSQL creates the temporary table stage, of table's columns cols (of
// their types and collations) and arrivalColumn(cols), a bigint. onCommit is
// "" or an ON COMMIT clause.
func stageSQL(stage, table string, cols []string, onCommit string) string {
	return fmt.Sprintf("CREATE TEMP TABLE %s %s AS SELECT %s, 0::bigint AS %s FROM %s LIMIT 0",
		stage, onCommit, columnList(cols), pgx.Identifier{arrivalColumn(cols)}.Sanitize(), table)
}

// upsertSQL moves the rows of stage (stageSQL) into table, updating those
// whose key exists. Of the staged rows that are one key to PostgreSQL, only
// the last to arrive is moved: one statement may not update a row twice
// (SQLSTATE 21000), and only PostgreSQL knows which keys are one (citext,
// a case-insensitive collation, char(n) padding, numeric scale: values that
// differ in Go).
//
// DISTINCT ON compares the key columns with the collations of the unique
// index that decides conflicts where it has its own (coll, from
// arbiterCollations), as in CREATE UNIQUE INDEX ON t (k COLLATE
// case_insensitive) on a column of the default collation.
//
// NB: it still compares with the types' default equality: a unique index
// built with another operator class can take distinct keys for one.
func upsertSQL(table, stage string, cols, key []string, coll map[string]string) string {
	var set []string
	for _, c := range cols {
		if !slices.Contains(key, c) {
			q := pgx.Identifier{c}.Sanitize()
			set = append(set, q+" = EXCLUDED."+q)
		}
	}
	action := "DO NOTHING"
	if len(set) > 0 {
		action = "DO UPDATE SET " + strings.Join(set, ", ")
	}
	return fmt.Sprintf("INSERT INTO %s (%s) SELECT DISTINCT ON (%s) %s FROM %s ORDER BY %s, %s DESC ON CONFLICT (%s) %s",
		table, columnList(cols), keyList(key, coll), columnList(cols), stage, keyList(key, coll), pgx.Identifier{arrivalColumn(cols)}.Sanitize(),
		columnList(key), action)
}

// keyList lists the key columns, each followed by COLLATE and its collation
// in coll (a quoted, schema-qualified name) where it has one.
func keyList(key []string, coll map[string]string) string {
	out := make([]string, len(key))
	for i, k := range key {
		out[i] = pgx.Identifier{k}.Sanitize()
		if c := coll[k]; c != "" {
			out[i] += " COLLATE " + c
		}
	}
	return strings.Join(out, ", ")
}

// arbiterCollations returns, for the key columns of table (quoted, as by
// quoteTable), the collations of a unique index on exactly those columns
// where they differ from the columns' own: the index decides what
// conflicts. It returns an empty map when no index has collations of its
// own.
//
// NB: of several such indexes with different collations, that of lowest OID
// counts, while ON CONFLICT takes them all as arbiters.
func arbiterCollations(ctx context.Context, conn *pgx.Conn, table string, key []string) (map[string]string, error) {
	rows, err := conn.Query(ctx, `
SELECT i.indexrelid::bigint, a.attname::text, format('%I.%I', cn.nspname, co.collname)
FROM pg_index i
CROSS JOIN LATERAL unnest(i.indkey::int2[], i.indcollation::oid[]) AS k(attnum, coll)
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
JOIN pg_collation co ON co.oid = k.coll
JOIN pg_namespace cn ON cn.oid = co.collnamespace
WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indexprs IS NULL AND i.indpred IS NULL
  AND k.coll <> a.attcollation
  AND (SELECT array_agg(b.attname::text ORDER BY b.attname) FROM pg_attribute b
       WHERE b.attrelid = i.indrelid AND b.attnum = ANY(i.indkey::int2[])) = $2::text[]
ORDER BY i.indexrelid`, table, slices.Sorted(slices.Values(key)))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	coll := map[string]string{}
	var first int64
	for rows.Next() {
		var idx int64
		var col, c string
		if err := rows.Scan(&idx, &col, &c); err != nil {
			return nil, err
		}
		if first == 0 {
			first = idx
		}
		if idx == first {
			coll[col] = c
		}
	}
	return coll, rows.Err()
}

// nullableKey lists the columns of key that admit NULL, unless a unique
// index on exactly the key's columns takes NULLs for equal (NULLS NOT
// DISTINCT; read through to_jsonb, as servers before 15 have no such
// column).
func nullableKey(ctx context.Context, conn *pgx.Conn, table string, key []string) ([]string, error) {
	rows, err := conn.Query(ctx, `
SELECT a.attname::text FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attname = ANY($2::text[]) AND NOT a.attnotnull
  AND NOT EXISTS (SELECT 1 FROM pg_index i
    WHERE i.indrelid = a.attrelid AND i.indisunique AND i.indexprs IS NULL AND i.indpred IS NULL
      AND (to_jsonb(i) ->> 'indnullsnotdistinct')::boolean IS TRUE
      AND (SELECT array_agg(b.attname::text ORDER BY b.attname) FROM pg_attribute b
           WHERE b.attrelid = i.indrelid AND b.attnum = ANY(i.indkey::int2[])) = $2::text[])
ORDER BY a.attnum`, table, slices.Sorted(slices.Values(key)))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// structColumns maps a struct's exported fields to columns.
func structColumns[T any]() ([]string, func(T) []any, error) {
	typ := reflect.TypeFor[T]()
	if typ.Kind() != reflect.Struct {
		return nil, nil, fmt.Errorf("postgres sink: %v is not a struct: give Columns and Row", typ)
	}
	var cols []string
	var index []int
	for i := range typ.NumField() {
		f := typ.Field(i)
		name := f.Tag.Get("db")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = snake(f.Name)
		}
		cols = append(cols, name)
		index = append(index, i)
	}
	if len(cols) == 0 {
		return nil, nil, fmt.Errorf("postgres sink: %v has no exported fields", typ)
	}
	row := func(v T) []any {
		rv := reflect.ValueOf(v)
		out := make([]any, len(index))
		for j, i := range index {
			out[j] = rv.Field(i).Interface()
		}
		return out
	}
	return cols, row, nil
}

func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// checkUnwritten refuses a table with a NOT NULL column the sink does not
// write and the table has no value for (no default, not generated, not an
// identity): every row would fail at the first checkpoint's copy.
func (cfg *SinkConfig[T]) checkUnwritten(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, `SELECT attname FROM pg_attribute
		WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped AND attnotnull
		AND NOT atthasdef AND attidentity = '' AND attgenerated = '' ORDER BY attnum`, quoteTable(cfg.Table))
	if err != nil {
		return fmt.Errorf("postgres sink: table %s: its columns: %w", cfg.Table, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("postgres sink: table %s: its columns: %w", cfg.Table, err)
	}
	for _, n := range names {
		if !slices.Contains(cfg.Columns, n) { // columns are quoted: names match exactly
			return fmt.Errorf("postgres sink: table %s: column %s is NOT NULL without a default, and the sink does not write it (it writes %s): every row would be refused; write it (Columns and Row), give it a default, or let it be NULL", cfg.Table, n, strings.Join(cfg.Columns, ", "))
		}
	}
	return nil
}

// checkPreparedSlots refuses a server whose max_prepared_transactions
// cannot hold what a sink of parallelism subtasks prepares at once: two a
// subtask (a checkpoint's, prepared and not yet committed, and the next's).
// Too few fail every checkpoint with "maximum number of prepared
// transactions reached", restart after restart.
func checkPreparedSlots(ctx context.Context, conn *pgx.Conn, parallelism int) error {
	var n int
	if err := conn.QueryRow(ctx, "SELECT setting::int FROM pg_settings WHERE name = 'max_prepared_transactions'").Scan(&n); err != nil {
		return fmt.Errorf("postgres sink: read max_prepared_transactions: %w", err)
	}
	if need := 2 * parallelism; n < need {
		return operator.Permanent(fmt.Errorf("postgres sink: max_prepared_transactions is %d, and exactly-once writes at parallelism %d need at least %d (two prepared transactions a subtask): set max_prepared_transactions in postgresql.conf (more if other sinks or jobs prepare transactions on this server) and restart PostgreSQL, or write in upsert mode", n, parallelism, need))
	}
	return nil
}

// classify marks errors a restart cannot fix as permanent: those whose
// SQLSTATE class says the statement or its data is wrong, which a replay of
// the same records meets again (permanentClasses), as opposed to a lost
// connection, a timeout, a deadlock or a server shutting down or out of
// resources.
func classify(what string, err error) error {
	if err == nil {
		return nil
	}
	err = fmt.Errorf("%s: %w", what, err)
	var pg *pgconn.PgError
	if errors.As(err, &pg) && len(pg.Code) == 5 && permanentClasses[pg.Code[:2]] {
		return operator.Permanent(err)
	}
	if errors.As(err, &pg) && copyFailed(pg) {
		return operator.Permanent(err)
	}
	return err
}

// copyError is classify's for a COPY of rows that failed, naming the first
// column whose value in rows pgx cannot encode for the column's type: the
// error COPY returns then names neither (copyFailed).
func (cfg *SinkConfig[T]) copyError(what string, m *pgtype.Map, rows [][]any, err error) error {
	if pg := (*pgconn.PgError)(nil); errors.As(err, &pg) && copyFailed(pg) {
		for _, row := range rows {
			if len(row) != len(cfg.columns) {
				break // pgx's error says so
			}
			for i, v := range row {
				if _, encErr := m.Encode(cfg.columns[i].OID, pgtype.BinaryFormatCode, v, nil); encErr != nil {
					err = fmt.Errorf("%w; column %s cannot take the value %v (a Go %T): make the column's type match the record's field, or convert it in Row", err, cfg.Columns[i], v, v)
					return classify(what, err)
				}
			}
		}
	}
	return classify(what, err)
}

// copyFailed reports whether pg is the server's answer to a COPY the client
// gave up (CopyFail). The sink's row sources never fail, so pgx gave it up
// because it could not encode a value for its column (70000 for a smallint,
// text for an integer): a data error that every replay meets again.
//
// NB: pgx (v5.12) keeps no error value for this: it sends the encode
// error's text in CopyFail, and returns only the server's error, SQLSTATE
// 57014 (query canceled) like a statement timeout or a cancel. The two are
// told apart by the server function that raised it (Routine), which is not
// translated as the message is; should a server name it otherwise, the
// error stays retriable, as it was.
func copyFailed(pg *pgconn.PgError) bool {
	return pg.Code == "57014" && pg.Routine == "CopyGetData" // query_canceled
}

// permanentClasses are the SQLSTATE classes of errors that do not go away
// when the same statement runs again on the same data. Left out, as
// retriable: 08 connection, 25 transaction state, 40 rollback (deadlock,
// serialization), 53 insufficient resources, 55 object not in prerequisite
// state (lock not available), 57 operator intervention (cancel, statement
// timeout, shutdown), 58 system error (I/O), XX internal error.
var permanentClasses = map[string]bool{
	"0A": true, // feature not supported
	"21": true, // cardinality violation (a statement updates a row twice)
	"22": true, // data exception (out of range, invalid text, too long)
	"23": true, // integrity constraint violation (not null, unique, check, foreign key)
	"28": true, // invalid authorization (wrong password)
	"3D": true, // invalid catalog name (no such database)
	"3F": true, // invalid schema name
	"42": true, // syntax error or access rule violation (no such table or column, no privilege)
	"44": true, // WITH CHECK OPTION violation
	"54": true, // program limit exceeded (row too big, too many columns)
}
