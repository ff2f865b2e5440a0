package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/weirstream/weir/internal/pgtest"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestUpsertDeduplicatesWithTheUniqueIndexCollation: the unique index ON
// CONFLICT infers compares the key with a case-insensitive collation of its
// own, the column has the default one. DISTINCT ON compared with the
// column's collation and kept "Ab" and "aB", and the INSERT then updated one
// row twice (SQLSTATE 21000, permanent) for data PostgreSQL deems one key.
// The last to arrive must win. Found by an outside review.
func TestUpsertDeduplicatesWithTheUniqueIndexCollation(t *testing.T) {
	pg := pgtest.Start(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, sql := range []string{
		"CREATE COLLATION case_insensitive (provider = icu, locale = 'und-u-ks-level2', deterministic = false)",
		"CREATE TABLE keyed (k text NOT NULL, n bigint NOT NULL)",
		"CREATE UNIQUE INDEX keyed_k ON keyed (k COLLATE case_insensitive)",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	newSink, err := Sink(SinkConfig[keyed]{URL: pg.URL, Table: "keyed", Mode: Upsert,
		Columns: []string{"k", "n"}, Row: func(r keyed) []any { return []any{r.k, r.n} }, Key: []string{"k"}})
	if err != nil {
		t.Fatalf("the sink refuses the table: %v", err)
	}
	run := &operatortest.Run{}
	defer run.Close()
	s := newSink()
	if err := s.Open(run.Context("out", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for j, k := range []string{"Ab", "aB"} {
		if err := s.Write(keyed{k, int64(j + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Snapshot(1); err != nil {
		t.Fatalf("upsert of Ab, aB (one key to the unique index): %v (permanent: %v)", err, operator.IsPermanent(err))
	}
	var got string
	if err := conn.QueryRow(ctx, "SELECT string_agg(k || '=' || n, ',') FROM keyed").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != "aB=2" {
		t.Fatalf("rows %s, want aB=2", got)
	}
}

// TestValueOutOfRangeForItsColumnIsPermanent: a value out of range for its
// column (70000 into a smallint) is a data error, but pgx finds it while it
// encodes the COPY and gives the COPY up, which the server answers with
// SQLSTATE 57014 (query canceled): it was left retriable, so every replay
// met it again and the job restarted until its strategy gave up. Both modes
// copy. Found by an outside review.
func TestValueOutOfRangeForItsColumnIsPermanent(t *testing.T) {
	pg := pgtest.Start(t, "max_prepared_transactions=10")
	for _, mode := range []Mode{Upsert, ExactlyOnce} {
		t.Run(mode.String(), func(t *testing.T) {
			table := fmt.Sprintf("small_%d", mode)
			cfg := SinkConfig[count]{URL: pg.URL, Table: table, Mode: mode,
				CreateTable: fmt.Sprintf("CREATE TABLE %s (word text PRIMARY KEY, count smallint NOT NULL)", table)}
			if mode == Upsert {
				cfg.Key = []string{"word"}
			}
			run := &operatortest.Run{}
			defer run.Close()
			s := openSink(t, run, cfg, 0, 1, nil)
			defer s.Close()
			err := s.Write(count{"a", 70000})
			if err == nil {
				_, err = s.Snapshot(1)
			}
			if !operator.IsPermanent(err) {
				t.Fatalf("70000 into a smallint: %v (permanent: false), want a permanent error", err)
			}
		})
	}
}

// TestCancelledStatementStaysRetriable: a statement cancelled by the
// server (here by statement_timeout) has SQLSTATE 57014 like a COPY that pgx
// gave up on a value it could not encode (TestValueOutOfRangeForItsColumnIsPermanent),
// but it may well succeed when run again: classify must leave it retriable.
func TestCancelledStatementStaysRetriable(t *testing.T) {
	pg := pgtest.Start(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SET statement_timeout = '10ms'"); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, "SELECT pg_sleep(10)")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "57014" {
		t.Fatalf("pg_sleep(10) with statement_timeout 10ms: %v, want SQLSTATE 57014", err)
	}
	if err := classify("sleep", err); operator.IsPermanent(err) {
		t.Fatalf("a statement timeout classified permanent: %v", err)
	}
}
