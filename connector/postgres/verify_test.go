package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/connector/generator"
	"github.com/weirstream/weir/internal/pgtest"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// readBack is what the sink's Committed reads at checkpoint id recorded in
// hs, sorted.
func readBack(run *operatortest.Run, newSink func() weir.SinkWriter[count], id checkpoint.ID, hs []checkpoint.Handle, w *operatortest.MemWriter) ([]string, error) {
	var got []string
	err := newSink().(weir.VerifiedSink[count]).Committed(run.Context("counts", 0, 1, &operator.Restore{Checkpoint: id, Handles: hs, Read: w.Read}), func(rec []byte) {
		got = append(got, string(rec))
	})
	slices.Sort(got)
	return got, err
}

// runningJob makes verify refuse a running job's table at once, without
// waiting for its sessions to end as those of a job that stopped do.
func runningJob(t *testing.T) {
	d := sessionEndWait
	sessionEndWait = 0
	t.Cleanup(func() { sessionEndWait = d })
}

func snapshotSink(t *testing.T, s weir.SinkWriter[count], id checkpoint.ID, w *operatortest.MemWriter) []checkpoint.Handle {
	t.Helper()
	async, err := s.Snapshot(id)
	if err != nil {
		t.Fatal(err)
	}
	hs, err := async(w)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

// TestCommittedReadsTheTableOfAStoppedJob: the table reads back only once
// the job stopped (a subtask's session that committed into it lives: its
// later commits could not be told apart) and the checkpoint's transactions
// are committed (a prepared transaction's rows cannot be read); then it
// holds what the job committed, and rows other writers added.
func TestCommittedReadsTheTableOfAStoppedJob(t *testing.T) {
	pg := pgtest.Start(t)
	newSink, err := Sink(SinkConfig[count]{URL: pg.URL, Table: "counts", CreateTable: createAppend})
	if err != nil {
		t.Fatal(err)
	}
	w := &operatortest.MemWriter{}
	run := &operatortest.Run{}
	defer run.Close()
	s := newSink()
	if err := s.Open(run.Context("counts", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	s.Write(count{"a", 1})
	s.Write(count{"b", 1})
	hs1 := snapshotSink(t, s, 1, w)
	if err := s.NotifyComplete(1); err != nil {
		t.Fatal(err)
	}
	runningJob(t)
	if _, err := readBack(run, newSink, 1, hs1, w); err == nil || !strings.Contains(err.Error(), "is writing table counts") {
		t.Fatalf("read back while the job runs: %v", err)
	}
	s.Write(count{"a", 2})
	hs2 := snapshotSink(t, s, 2, w) // completes; the job dies before it commits
	s.Close()
	if _, err := readBack(run, newSink, 2, hs2, w); err == nil || !strings.Contains(err.Error(), "are prepared, not committed") {
		t.Fatalf("read back with the checkpoint's transaction prepared: %v", err)
	}
	want := []string{`word="a" count="1"`, `word="b" count="1"`}
	if got, err := readBack(run, newSink, 1, hs1, w); err != nil || !slices.Equal(got, want) {
		t.Fatalf("at checkpoint 1: %q, %v; want %q", got, err, want)
	}

	r := newSink() // the restore commits checkpoint 2's transaction
	if err := r.Open(run.Context("counts", 0, 1, &operator.Restore{Checkpoint: 2, Handles: hs2, Read: w.Read})); err != nil {
		t.Fatal(err)
	}
	r.Close()
	exec(t, pg.URL, "INSERT INTO counts VALUES ('intruder', 7)")
	want = []string{`word="a" count="1"`, `word="a" count="2"`, `word="b" count="1"`, `word="intruder" count="7"`}
	if got, err := readBack(run, newSink, 2, hs2, w); err != nil || !slices.Equal(got, want) {
		t.Fatalf("at checkpoint 2: %q, %v; want %q", got, err, want)
	}
}

// TestRecordsCompareAsTheTableHoldsThem: what a rerun makes of a record
// equals what the table returns of the row the sink wrote for it, whatever
// the column types and the Go types written into them (an int64 into an
// integer or a numeric column, a time in another zone, JSON with other
// spacing and key order).
func TestRecordsCompareAsTheTableHoldsThem(t *testing.T) {
	pg := pgtest.Start(t)
	type row struct {
		ID    int64 `db:"id"`
		Small int64
		Num   int64
		Ratio float64
		Ok    bool
		At    time.Time
		Doc   json.RawMessage
		Raw   []byte
		Name  *string
	}
	const create = `CREATE TABLE rows (id bigint, small int, num numeric, ratio float8, ok bool, at timestamptz, doc jsonb, raw bytea, name varchar(20))`
	newSink, err := Sink(SinkConfig[row]{URL: pg.URL, Table: "rows", CreateTable: create})
	if err != nil {
		t.Fatal(err)
	}
	name := "ünïcode \"quoted\"\ttab"
	zone := time.FixedZone("UTC+5", 5*3600)
	in := []row{
		{1, 7, 12345678901234, 0.1, true, time.Date(2026, 12, 3, 10, 0, 0, 123456000, zone), json.RawMessage(`{"b": 1,  "a": [1, 2]}`), []byte{0, 1, 255}, &name},
		{2, -1, 0, -2.5e300, false, time.Unix(0, 0), json.RawMessage(`null`), []byte{}, nil},
	}
	w := &operatortest.MemWriter{}
	run := &operatortest.Run{}
	defer run.Close()
	s := newSink()
	if err := s.Open(run.Context("rows", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	for _, r := range in {
		if err := s.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	async, err := s.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	hs, err := async(w)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.NotifyComplete(1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	rerun := newSink().(weir.VerifiedSink[row])
	var made, committed []string
	for _, r := range in {
		rerun.Records(r, func(rec []byte) { made = append(made, string(rec)) })
	}
	err = newSink().(weir.VerifiedSink[row]).Committed(run.Context("rows", 0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read}), func(rec []byte) {
		committed = append(committed, string(rec))
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(made)
	slices.Sort(committed)
	if !slices.Equal(made, committed) {
		t.Fatalf("the rerun makes\n%s\nthe table holds\n%s", strings.Join(made, "\n"), strings.Join(committed, "\n"))
	}
}

// TestVerifyRefusesWhatATableCannotShow: an upsert table (the last row of
// each key), and columns PostgreSQL rounds or pads into, are refused before
// the rerun.
func TestVerifyRefusesWhatATableCannotShow(t *testing.T) {
	pg := pgtest.Start(t)
	exec(t, pg.URL, "CREATE TABLE keyed (word text PRIMARY KEY, count bigint)", "CREATE TABLE rounded (word text, count numeric(10, 2))")
	for _, c := range []struct {
		cfg  SinkConfig[count]
		want string
	}{
		{SinkConfig[count]{URL: pg.URL, Table: "keyed", Key: []string{"word"}, Mode: Upsert}, "upsert mode"},
		{SinkConfig[count]{URL: pg.URL, Table: "rounded"}, "column count of table rounded has a type modifier"},
	} {
		newSink, err := Sink(c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		src, err := generator.New(generator.Config[int64]{Count: 10, Make: func(i int64) int64 { return i }})
		if err != nil {
			t.Fatal(err)
		}
		e := weir.New(weir.Config{Job: "j", Checkpoint: weir.CheckpointConfig{Dir: filepath.Join(t.TempDir(), "ckpt")}})
		weir.Sink(weir.Map(weir.Source(e, "n", src), "count", func(i int64) count { return count{"w", i} }), "out", newSink)
		_, err = e.Verify(context.Background(), weir.VerifyConfig{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: %v, want a refusal saying %q", c.cfg.Table, err, c.want)
		}
	}
}

// TestVerifyAJobWritingPostgres: a job writing a table exactly once,
// stopped midway and restored to its end at another parallelism, verifies
// clean; with a row another writer added, that row is reported, and only
// it.
func TestVerifyAJobWritingPostgres(t *testing.T) {
	pg := pgtest.Start(t)
	dir := t.TempDir()
	build := func(p int, restore string, onEvent func(weir.JobEvent)) *weir.Environment {
		src, err := generator.New(generator.Config[int64]{Count: 20_000, RatePerSecond: 20_000, Make: func(i int64) int64 { return i }})
		if err != nil {
			t.Fatal(err)
		}
		sink, err := Sink(SinkConfig[count]{URL: pg.URL, Table: "counts", CreateTable: createAppend, Key: []string{"word"}})
		if err != nil {
			t.Fatal(err)
		}
		e := weir.New(weir.Config{Job: "numbers", Parallelism: p, Restore: restore, OnEvent: onEvent,
			Checkpoint: weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: filepath.Join(dir, "ckpt")}})
		weir.Sink(weir.Map(weir.Source(e, "numbers", src), "count", func(i int64) count { return count{fmt.Sprint("w", i%10), i} }), "out", sink)
		return e
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stop, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	n := 0
	e := build(2, "", func(ev weir.JobEvent) {
		if ev.Kind == weir.EventCheckpointCompleted {
			if n++; n == 3 {
				cancelRun()
			}
		}
	})
	if _, err := e.Execute(stop); !errors.Is(err, context.Canceled) {
		t.Fatalf("the first run: %v (the input must outlast its checkpoints)", err)
	}
	// The run may have stopped before its last checkpoint's commit.
	if rep, err := build(3, "", nil).Verify(ctx, weir.VerifyConfig{}); err != nil && !strings.Contains(err.Error(), "are prepared, not committed") || err == nil && !rep.OK() {
		t.Fatalf("after the first run: %v\n%s", err, rep)
	}
	if _, err := build(3, "latest", nil).Execute(ctx); err != nil {
		t.Fatalf("the second run: %v", err)
	}
	rep, err := build(1, "", nil).Verify(ctx, weir.VerifyConfig{})
	if err != nil || !rep.OK() || rep.Read != 20_000 || rep.Sinks[0].Committed != 20_000 {
		t.Fatalf("after the second run: %v\n%s", err, rep)
	}
	exec(t, pg.URL, "INSERT INTO counts VALUES ('w3', -1)")
	rep, err = build(2, "", nil).Verify(ctx, weir.VerifyConfig{})
	v := rep.Sinks[0]
	if err != nil || rep.OK() || len(v.Missing)+len(v.Duplicated)+len(v.Changed) > 0 || !slices.Equal(v.Unexpected, []weir.RecordCount{{Record: `word="w3" count="-1"`, Times: 1}}) {
		t.Fatalf("with a row another writer added: %v\n%s", err, rep)
	}
}
