package postgres

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/idpart"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/internal/pgtest"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

func TestParseGID(t *testing.T) {
	p := gidPrefix("wc", "out")
	if p != "weir2:2.wc:3.out:" {
		t.Fatalf("prefix %q", p)
	}
	for _, c := range []struct {
		gid     string
		sub     int
		id      checkpoint.ID
		ok      bool
		comment string
	}{
		{p + "0:17", 0, 17, true, "written before the attempt tag"},
		{p + "0:17:zik0zj.hhcf7ljz4", 0, 17, true, "with the attempt tag"},
		{p + "0:17:zik0zj", 0, 0, false, "half a tag"},
		{p + "0:17:Zik0zj.1", 0, 0, false, "a capital in the tag"},
		{p + "0:17:1.2:3", 0, 0, false, "more after the tag"},
		{p + "12:18446744073709551615", 12, 1<<64 - 1, true, "the largest checkpoint id"},
		{p + "0:18446744073709551616", 0, 0, false, "beyond uint64"},
		{p + "01:17", 0, 0, false, "leading zero"},
		{p + "+1:17", 0, 0, false, "sign"},
		{p + "-1:17", 0, 0, false, "negative"},
		{p + "1:+17", 0, 0, false, "sign"},
		{p + "1:17:3", 0, 0, false, "a third number"},
		{p + "1", 0, 0, false, "no checkpoint"},
		{p + ":17", 0, 0, false, "no subtask"},
		{"weir2:2.wc:3.outx:0:17", 0, 0, false, "another UID"},
		{"weir:wc:out:0:17", 0, 0, false, "the legacy format"},
	} {
		sub, id, ok := parseGID(p, c.gid)
		if sub != c.sub || id != c.id || ok != c.ok {
			t.Errorf("parseGID(%q) = %d, %d, %v, want %d, %d, %v (%s)", c.gid, sub, id, ok, c.sub, c.id, c.ok, c.comment)
		}
	}
	if _, _, ok := parseGID(legacyPrefix("wc", "out"), "weir:wc:out:0:17:1.2"); ok {
		t.Error("a legacy gid with a tag parses: the legacy format never had one")
	}
}

// FuzzGID: every gid is valid UTF-8 within PostgreSQL's bound and parses
// back, and no other job and UID parse it.
func FuzzGID(f *testing.F) {
	f.Add("a:b", "c", "a", "b:c", 3, uint64(7))
	f.Add("wc", "out", "wc", "out:1", 0, uint64(1))
	f.Add(strings.Repeat("j", 200), "u", strings.Repeat("j", 199), "u", keygroup.MaxMaxParallelism-1, uint64(1<<64-1))
	f.Add("\xff", "\x00", "1.", ":", 1, uint64(0))
	f.Fuzz(func(t *testing.T, job, uid, job2, uid2 string, sub int, id uint64) {
		if sub < 0 || sub >= keygroup.MaxMaxParallelism {
			return
		}
		p := gidPrefix(job, uid)
		// The longest tag: the largest pid, and a start time 10,000 years on.
		g := formatGID(p, sub, checkpoint.ID(id), attemptTag(math.MaxInt32, time.Date(12026, 1, 1, 0, 0, 0, 0, time.UTC)))
		if len(g) > maxGIDBytes || !utf8.ValidString(g) || strings.ContainsRune(g, 0) {
			t.Fatalf("gid %q of job %q, UID %q: %d bytes (at most %d), or not valid UTF-8 without NUL", g, job, uid, len(g), maxGIDBytes)
		}
		if s, i, ok := parseGID(p, g); !ok || s != sub || i != checkpoint.ID(id) {
			t.Fatalf("parseGID(%q) = %d, %d, %v, want %d, %d", g, s, i, ok, sub, id)
		}
		if idpart.Of(job) == idpart.Of(job2) && idpart.Of(uid) == idpart.Of(uid2) {
			return // one sink (or a SHA-256 collision)
		}
		if _, _, ok := parseGID(gidPrefix(job2, uid2), g); ok {
			t.Fatalf("gid %q of job %q, UID %q parses as one of job %q, UID %q", g, job, uid, job2, uid2)
		}
	})
}

// TestJobsWithColonsKeepTheirTransactions: job "a:b" with UID "c" and job
// "a" with UID "b:c" share one PostgreSQL; neither's start touches the
// other's prepared transactions, and a restore of each commits its own.
func TestJobsWithColonsKeepTheirTransactions(t *testing.T) {
	pg := pgtest.Start(t)
	cfg := SinkConfig[count]{URL: pg.URL, Table: "counts", CreateTable: createAppend}
	w := &operatortest.MemWriter{}
	open := func(run *operatortest.Run, job, uid string, r *operator.Restore) ([]checkpoint.Handle, func()) {
		t.Helper()
		newSink, err := Sink(cfg)
		if err != nil {
			t.Fatal(err)
		}
		s := newSink()
		ctx := run.Context(uid, 0, 1, r)
		ctx.Job = job
		if err := s.Open(ctx); err != nil {
			t.Fatal(err)
		}
		var hs []checkpoint.Handle
		if r == nil { // a first run writes one row and prepares it at checkpoint 1
			if err := s.Write(count{job + "/" + uid, 1}); err != nil {
				t.Fatal(err)
			}
			hs = snapshot(t, s, 1, w)
		}
		return hs, func() { s.Close(); run.Close() }
	}
	jobs := []struct{ job, uid string }{{"a:b", "c"}, {"a", "b:c"}}
	var restores []*operator.Restore
	for _, j := range jobs {
		// Checkpoint 1 completes, but the run dies before it is told so.
		run := &operatortest.Run{}
		hs, closeRun := open(run, j.job, j.uid, nil)
		restores = append(restores, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read})
		closeRun()
	}
	if gids := preparedGIDs(t, pg.URL); len(gids) != 2 {
		t.Fatalf("prepared transactions %q, want one of each job", gids)
	}
	for i, j := range jobs {
		run := &operatortest.Run{}
		_, closeRun := open(run, j.job, j.uid, restores[i])
		closeRun()
	}
	if got, want := rows(t, pg.URL), []string{"a/b:c=1", "a:b/c=1"}; !slices.Equal(got, want) {
		t.Fatalf("rows %q, want %q: a job's start rolled back the other's transaction", got, want)
	}
	if gids := preparedGIDs(t, pg.URL); len(gids) != 0 {
		t.Fatalf("prepared transactions left: %q", gids)
	}
}

// TestLegacyGIDsRolledBack: a start rolls back what an attempt of an older
// Weir prepared (weir:<job>:<uid>:<sub>:<id>) when that is this sink's alone,
// and leaves another sink's.
func TestLegacyGIDsRolledBack(t *testing.T) {
	pg := pgtest.Start(t)
	cfg := SinkConfig[count]{URL: pg.URL, Table: "counts", CreateTable: createAppend}
	if _, err := Sink(cfg); err != nil { // creates the table
		t.Fatal(err)
	}
	for _, gid := range []string{"weir:test:counts:0:7", "weir:test:counts:x:0:7", "weir:test:counts:0:7:1"} {
		conn, err := pgx.Connect(context.Background(), pg.URL)
		if err != nil {
			t.Fatal(err)
		}
		for _, sql := range []string{"BEGIN", "INSERT INTO counts VALUES ('legacy', 1)", "PREPARE TRANSACTION " + literal(gid)} {
			if _, err := conn.Exec(context.Background(), sql); err != nil {
				t.Fatal(err)
			}
		}
		conn.Close(context.Background())
	}
	run := &operatortest.Run{}
	defer run.Close()
	s := openSink(t, run, cfg, 0, 1, nil)
	s.Close()
	if gids, want := preparedGIDs(t, pg.URL), []string{"weir:test:counts:0:7:1", "weir:test:counts:x:0:7"}; !slices.Equal(gids, want) {
		t.Fatalf("prepared transactions %q, want %q", gids, want)
	}
}
