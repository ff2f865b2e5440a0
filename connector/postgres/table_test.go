package postgres

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/weirstream/weir/internal/pgtest"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestTableNamedInOneWay: a table whose name needs quoting ("Counts", in a
// schema "My Schema") is the one every statement of the sink means: the
// checks at start, the staging table, the upsert and COPY. The start
// checks once named it unquoted (counts) while COPY quoted it.
func TestTableNamedInOneWay(t *testing.T) {
	pg := pgtest.Start(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE SCHEMA "My Schema"`); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []Mode{ExactlyOnce, Upsert} {
		t.Run(mode.String(), func(t *testing.T) {
			table := `My Schema.Counts ` + mode.String()
			quoted := pgx.Identifier{"My Schema", "Counts " + mode.String()}.Sanitize()
			cfg := SinkConfig[keyed]{URL: pg.URL, Table: table, Mode: mode,
				CreateTable: "CREATE TABLE " + quoted + " (k text PRIMARY KEY, n bigint NOT NULL)",
				Columns:     []string{"k", "n"}, Row: func(r keyed) []any { return []any{r.k, r.n} }}
			if mode == Upsert {
				cfg.Key = []string{"k"}
			}
			newSink, err := Sink(cfg)
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
			if err := s.Write(keyed{"a", 1}); err != nil {
				t.Fatal(err)
			}
			async, err := s.Snapshot(1)
			if err != nil {
				t.Fatal(err)
			}
			if async != nil {
				if _, err := async(&operatortest.MemWriter{}); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.NotifyComplete(1); err != nil {
				t.Fatal(err)
			}
			var n int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+quoted).Scan(&n); err != nil || n != 1 {
				t.Fatalf("rows in %s: %d, %v; want 1", quoted, n, err)
			}
		})
	}
	for _, bad := range []string{"a.b.c", ".counts", "counts.", "a..b"} {
		if _, err := Sink(SinkConfig[keyed]{URL: pg.URL, Table: bad, Mode: Upsert, Key: []string{"k"},
			Columns: []string{"k", "n"}, Row: func(r keyed) []any { return []any{r.k, r.n} }}); err == nil {
			t.Errorf("table %q was accepted", bad)
		}
	}
}
