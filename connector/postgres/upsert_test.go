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

// keyed is a row of a table keyed by k.
type keyed struct {
	k any
	n int64
}

// TestUpsertKeysPostgreSQLDeems: rows whose keys differ in Go but are one
// key to PostgreSQL (char(n) padding, a case-insensitive collation, citext,
// numeric scale) reach one batch: the last of them is written, with no
// error.
func TestUpsertKeysPostgreSQLDeems(t *testing.T) {
	pg := pgtest.Start(t)
	conn, err := pgx.Connect(context.Background(), pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, sql := range []string{
		"CREATE EXTENSION citext",
		"CREATE COLLATION case_insensitive (provider = icu, locale = 'und-u-ks-level2', deterministic = false)",
	} {
		if _, err := conn.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	for i, c := range []struct {
		keyType string
		keys    []any // one key to PostgreSQL, in order of arrival
		want    string
	}{
		{"char(4)", []any{"ab", "ab ", "ab  "}, "ab"},
		{"text COLLATE case_insensitive", []any{"Ab", "aB", "AB"}, "AB"},
		{"citext", []any{"Ab", "aB", "AB"}, "AB"},
		{"numeric(6,2)", []any{1.001, 1.0, 1.004}, "1.00"},
	} {
		t.Run(c.keyType, func(t *testing.T) {
			table := fmt.Sprintf("keyed_%d", i)
			newSink, err := Sink(SinkConfig[keyed]{URL: pg.URL, Table: table, Mode: Upsert,
				CreateTable: fmt.Sprintf("CREATE TABLE %s (k %s PRIMARY KEY, n bigint NOT NULL)", table, c.keyType),
				Columns:     []string{"k", "n"}, Row: func(r keyed) []any { return []any{r.k, r.n} }, Key: []string{"k"}})
			if err != nil {
				t.Fatal(err)
			}
			run := &operatortest.Run{}
			defer run.Close()
			s := newSink()
			if err := s.Open(run.Context("out", 0, 1, nil)); err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for j, k := range c.keys {
				if err := s.Write(keyed{k, int64(j + 1)}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.Snapshot(1); err != nil {
				t.Fatalf("upsert of %v: %v (permanent: %v)", c.keys, err, operator.IsPermanent(err))
			}
			var got []string
			rs, _ := conn.Query(context.Background(), fmt.Sprintf("SELECT k::text || '=' || n FROM %s", table))
			if got, err = pgx.CollectRows(rs, pgx.RowTo[string]); err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("%s=%d", c.want, len(c.keys)); len(got) != 1 || got[0] != want {
				t.Fatalf("rows %q, want [%s]: the last row to arrive", got, want)
			}
		})
	}
}

// TestDeterministicErrorsPermanent: an upsert PostgreSQL rejects for its
// data fails the job at once instead of restarting it for ever.
func TestDeterministicErrorsPermanent(t *testing.T) {
	pg := pgtest.Start(t)
	cfg := SinkConfig[count]{URL: pg.URL, Table: "counts", Mode: Upsert, Key: []string{"word"},
		CreateTable: "CREATE TABLE counts (word text PRIMARY KEY, count bigint NOT NULL CHECK (count >= 0))"}
	run := &operatortest.Run{}
	defer run.Close()
	s := openSink(t, run, cfg, 0, 1, nil)
	defer s.Close()
	s.Write(count{"a", -1})
	if _, err := s.Snapshot(1); !operator.IsPermanent(err) {
		t.Fatalf("a row that breaks a check constraint: %v, want a permanent error", err)
	}
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		code      string
		permanent bool
	}{
		{"21000", true},  // ON CONFLICT DO UPDATE command cannot affect row a second time
		{"22001", true},  // string data right truncation
		{"23505", true},  // unique violation
		{"42P01", true},  // undefined table
		{"0A000", true},  // feature not supported
		{"54000", true},  // program limit exceeded
		{"40001", false}, // serialization failure
		{"40P01", false}, // deadlock
		{"53300", false}, // too many connections
		{"55P03", false}, // lock not available
		{"57014", false}, // query canceled (statement timeout)
		{"57P01", false}, // admin shutdown
		{"08006", false}, // connection failure
		{"XX000", false}, // internal error
		{"", false},
	} {
		err := classify("upsert", &pgconn.PgError{Code: c.code})
		if operator.IsPermanent(err) != c.permanent {
			t.Errorf("SQLSTATE %q: permanent %v, want %v", c.code, !c.permanent, c.permanent)
		}
	}
	if err := classify("upsert", context.DeadlineExceeded); operator.IsPermanent(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a timeout: %v, want retriable, wrapping the cause", err)
	}
}
