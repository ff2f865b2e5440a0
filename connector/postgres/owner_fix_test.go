package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/weirstream/weir/internal/pgtest"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// Found by an outside review of the ownership records (issue 19, defect
// 4); each failed before its fix.

func queryStrings(t *testing.T, url, sql string) []string {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rs, err := conn.Query(context.Background(), sql)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rs, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	return got
}

// TestFreshRefusesAPartitionedTable: job "test" writes the partitioned
// table counts, job "other" its partition counts_other directly. --fresh of
// job test deleted other's rows (its records are of another relation, and
// DELETE reaches the partitions): it must refuse instead.
func TestFreshRefusesAPartitionedTable(t *testing.T) {
	pg := pgtest.Start(t)
	exec(t, pg.URL,
		"CREATE TABLE counts (word text NOT NULL, count bigint NOT NULL) PARTITION BY LIST (word)",
		"CREATE TABLE counts_other PARTITION OF counts FOR VALUES IN ('other')",
		"CREATE TABLE counts_rest PARTITION OF counts DEFAULT")
	test := SinkConfig[count]{URL: pg.URL, Table: "counts", BatchRows: 2}
	other := SinkConfig[count]{URL: pg.URL, Table: "counts_other", BatchRows: 2}
	firstRun(t, test, "test") // hello=1, world=1

	// job "other", sink into counts_other, commits other=7
	run := &operatortest.Run{}
	defer run.Close()
	newSink, err := Sink(other)
	if err != nil {
		t.Fatal(err)
	}
	o := newSink()
	ctx := run.Context("counts", 0, 1, nil)
	ctx.Job = "other"
	if err := o.Open(ctx); err != nil {
		t.Fatal(err)
	}
	o.Write(count{"other", 7})
	snapshot(t, o, 1, &operatortest.MemWriter{})
	if err := o.NotifyComplete(1); err != nil {
		t.Fatal(err)
	}
	o.Close()
	if got := queryStrings(t, pg.URL, "SELECT word||'='||count FROM counts_other"); !slices.Equal(got, []string{"other=7"}) {
		t.Fatalf("setup: %v", got)
	}

	_, errs := openAll(t, test, 1, func(c *operator.Context) { c.StartOver = true })
	if !errors.Is(errs[0], ErrSharedTable) || !operator.IsPermanent(errs[0]) || !strings.Contains(errs[0].Error(), "partitioned") {
		t.Errorf("fresh start of job test into a partitioned table: %v, want a permanent ErrSharedTable naming why", errs[0])
	}
	if got := queryStrings(t, pg.URL, "SELECT word||'='||count FROM counts_other"); !slices.Equal(got, []string{"other=7"}) {
		t.Fatalf("job test's --fresh deleted job other's committed rows in counts_other: now %v (want other=7 kept, or ErrSharedTable)", got)
	}
}

// TestPrecreatedOwnerTableWithoutCreatePrivilege: the sink's user may
// not create tables in the schema (PostgreSQL 15 and later: the default
// for public), so, as the sink's own error says, the DBA creates
// weir_sink_owner by hand and grants the sink's user what it needs on it
// and on the output table. The sink ran CREATE TABLE IF NOT EXISTS anyway,
// which checks CREATE on the schema before it looks whether the table
// exists: every run was refused.
func TestPrecreatedOwnerTableWithoutCreatePrivilege(t *testing.T) {
	pg := pgtest.Start(t)
	exec(t, pg.URL,
		createAppend,
		fmt.Sprintf(createOwnerSQL, ownerTable), // as the sink's errors say
		fmt.Sprintf(createRolledBackSQL, rolledBackTable),
		"CREATE ROLE weirsink LOGIN",
		"REVOKE CREATE ON SCHEMA public FROM PUBLIC",
		"GRANT USAGE ON SCHEMA public TO weirsink",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON counts, weir_sink_owner, weir_sink_rolled_back TO weirsink")
	url := strings.Replace(pg.URL, "postgres@", "weirsink@", 1)
	if url == pg.URL {
		url = pg.URL + "&user=weirsink"
		if !strings.Contains(pg.URL, "?") {
			url = pg.URL + "?user=weirsink"
		}
	}
	cfg := SinkConfig[count]{URL: url, Table: "counts", BatchRows: 2}
	newSink, err := Sink(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run := &operatortest.Run{}
	defer run.Close()
	s := newSink()
	defer s.Close()
	if err := s.Open(run.Context("counts", 0, 1, nil)); err != nil {
		t.Fatalf("first run as a user who may write counts and weir_sink_owner: %v", err)
	}
}
