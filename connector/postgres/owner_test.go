package postgres

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/pgtest"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// modeConfigs are a sink of each mode into table counts.
func modeConfigs(url string) map[string]SinkConfig[count] {
	return map[string]SinkConfig[count]{
		"exactly-once": {URL: url, Table: "counts", CreateTable: createAppend, BatchRows: 2},
		"upsert":       {URL: url, Table: "counts", CreateTable: createKeyed, Key: []string{"word"}, Mode: Upsert, BatchRows: 2},
	}
}

func exec(t *testing.T, url string, sqls ...string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, sql := range sqls {
		if _, err := conn.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// firstRun writes hello=1, world=1 through subtask 0 of 1 and commits them
// with checkpoint 1, as a run that ended would have.
func firstRun(t *testing.T, cfg SinkConfig[count], job string) {
	t.Helper()
	run := &operatortest.Run{}
	defer run.Close()
	newSink, err := Sink(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := newSink()
	ctx := run.Context("counts", 0, 1, nil)
	ctx.Job = job
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, c := range []count{{"hello", 1}, {"world", 1}} {
		if err := s.Write(c); err != nil {
			t.Fatal(err)
		}
	}
	snapshot(t, s, 1, &operatortest.MemWriter{})
	if err := s.NotifyComplete(1); err != nil {
		t.Fatal(err)
	}
}

// openAll opens subtasks 0..p-1 of the sink at once and returns them, and
// the error of each.
func openAll(t *testing.T, cfg SinkConfig[count], p int, edit func(*operator.Context)) ([]weir.SinkWriter[count], []error) {
	t.Helper()
	newSink, err := Sink(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run := &operatortest.Run{}
	t.Cleanup(run.Close)
	sinks, errs := make([]weir.SinkWriter[count], p), make([]error, p)
	var wg sync.WaitGroup
	for sub := range p {
		sinks[sub] = newSink()
		t.Cleanup(func() { sinks[sub].Close() })
		ctx := run.Context("counts", sub, p, nil)
		edit(ctx)
		wg.Go(func() { errs[sub] = sinks[sub].Open(ctx) })
	}
	wg.Wait()
	return sinks, errs
}

// TestSecondRunIsRefused: a run that restores nothing and may not start
// over finds output an earlier run of its job committed: every subtask
// refuses, permanently, naming the table, the job, the sink and the fix,
// and the table keeps its rows. Before, exactly-once mode appended a second
// set of rows (hello=1 twice) and upsert overwrote full counts with counts
// from 1 (issue 19, defect 4).
func TestSecondRunIsRefused(t *testing.T) {
	pg := pgtest.Start(t)
	for mode, cfg := range modeConfigs(pg.URL) {
		t.Run(mode, func(t *testing.T) {
			exec(t, pg.URL, "DROP TABLE IF EXISTS counts")
			firstRun(t, cfg, "test")
			before := rows(t, pg.URL)
			_, errs := openAll(t, cfg, 2, func(*operator.Context) {})
			for sub, err := range errs {
				if !errors.Is(err, ErrEarlierOutput) || !operator.IsPermanent(err) {
					t.Fatalf("subtask %d: %v (permanent %v), want ErrEarlierOutput, permanent", sub, err, operator.IsPermanent(err))
				}
				for _, want := range []string{"table counts", `job "test"`, `sink "counts"`, "--restore latest", "--fresh", "deletes every row of counts"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("subtask %d: %v: does not say %q", sub, err, want)
					}
				}
			}
			if got := rows(t, pg.URL); !slices.Equal(got, before) {
				t.Fatalf("the refused run changed the table: %v, was %v", got, before)
			}
		})
	}
}

// TestRefusedRunLeavesPreparedTransactions: a run started without
// --restore by mistake is refused before it rolls anything back, so that
// the run with --restore then commits what the checkpoint recorded.
func TestRefusedRunLeavesPreparedTransactions(t *testing.T) {
	pg := pgtest.Start(t)
	cfg := modeConfigs(pg.URL)["exactly-once"]
	w := &operatortest.MemWriter{}
	run := &operatortest.Run{}
	defer run.Close()
	s := openSink(t, run, cfg, 0, 1, nil)
	s.Write(count{"hello", 1})
	snapshot(t, s, 1, w)
	if err := s.NotifyComplete(1); err != nil {
		t.Fatal(err)
	}
	s.Write(count{"world", 1})
	hs := snapshot(t, s, 2, w) // completes; the process dies before the notification
	s.Close()

	_, errs := openAll(t, cfg, 1, func(*operator.Context) {})
	if !errors.Is(errs[0], ErrEarlierOutput) {
		t.Fatalf("a run without --restore: %v, want ErrEarlierOutput", errs[0])
	}
	if gids := preparedGIDs(t, pg.URL); len(gids) != 1 {
		t.Fatalf("prepared transactions after the refused run: %v, want checkpoint 2's", gids)
	}
	r := openSink(t, run, cfg, 0, 1, &operator.Restore{Checkpoint: 2, Handles: hs, Read: w.Read})
	r.Close()
	if got := rows(t, pg.URL); !slices.Equal(got, []string{"hello=1", "world=1"}) {
		t.Fatalf("after the restore: %v", got)
	}
}

// TestFreshDeletesEarlierOutput: with StartOver (--fresh), subtask 0
// deletes the table's rows and the earlier records before any subtask
// writes, at another parallelism than the earlier run's; the next run
// without --restore is refused for this run's output, not the earlier one.
func TestFreshDeletesEarlierOutput(t *testing.T) {
	pg := pgtest.Start(t)
	for mode, cfg := range modeConfigs(pg.URL) {
		t.Run(mode, func(t *testing.T) {
			exec(t, pg.URL, "DROP TABLE IF EXISTS counts")
			firstRun(t, cfg, "test")
			sinks, errs := openAll(t, cfg, 3, func(c *operator.Context) { c.StartOver = true })
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			if got := rows(t, pg.URL); len(got) != 0 {
				t.Fatalf("after a start over: %v", got)
			}
			w := &operatortest.MemWriter{}
			for sub, s := range sinks {
				if err := s.Write(count{"hello", int64(10 + sub)}); err != nil {
					t.Fatal(err)
				}
				snapshot(t, s, 2, w)
			}
			for _, s := range sinks {
				if err := s.NotifyComplete(2); err != nil {
					t.Fatal(err)
				}
			}
			want := []string{"hello=10", "hello=11", "hello=12"}
			if mode == "upsert" {
				want = []string{"hello=12"}
			}
			if got := rows(t, pg.URL); !slices.Equal(got, want) {
				t.Fatalf("got %v, want %v", got, want)
			}
		})
	}
}

// TestFreshRefusesASharedTable: another job's sink also wrote the table;
// --fresh must not delete its rows, and says whose they are.
func TestFreshRefusesASharedTable(t *testing.T) {
	pg := pgtest.Start(t)
	cfg := modeConfigs(pg.URL)["exactly-once"]
	firstRun(t, cfg, "test")
	firstRun(t, cfg, "other")
	_, errs := openAll(t, cfg, 2, func(c *operator.Context) { c.StartOver = true })
	for sub, err := range errs {
		if !errors.Is(err, ErrSharedTable) || !operator.IsPermanent(err) || !strings.Contains(err.Error(), `job "other" sink "counts"`) {
			t.Fatalf("subtask %d: %v, want ErrSharedTable naming job other", sub, err)
		}
	}
	if got := rows(t, pg.URL); len(got) != 4 {
		t.Fatalf("rows %v, want both jobs' 4", got)
	}
}

// TestUpsertRestoreIsNotRefused: the upsert sink keeps a marker in its
// state, so that a restore gives it a Restore and it knows the run resumes
// (the runtime gives none to an operator without state).
func TestUpsertRestoreIsNotRefused(t *testing.T) {
	pg := pgtest.Start(t)
	cfg := modeConfigs(pg.URL)["upsert"]
	run := &operatortest.Run{}
	defer run.Close()
	w := &operatortest.MemWriter{}
	s := openSink(t, run, cfg, 0, 1, nil)
	s.Write(count{"hello", 1})
	hs := snapshot(t, s, 1, w)
	if err := s.NotifyComplete(1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if len(hs) == 0 {
		t.Fatal("the upsert sink's snapshot wrote no state")
	}
	r := openSink(t, run, cfg, 0, 2, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read})
	r.Close()
}

// TestWithoutCheckpointsSubtasksCommitEarly: without checkpoints a subtask
// commits at the end of its input, maybe before another opened: that
// record is the running attempt's, not an earlier run's, while its session
// lives. Once it closed, a second run is refused.
func TestWithoutCheckpointsSubtasksCommitEarly(t *testing.T) {
	pg := pgtest.Start(t)
	for mode, cfg := range modeConfigs(pg.URL) {
		t.Run(mode, func(t *testing.T) {
			exec(t, pg.URL, "DROP TABLE IF EXISTS counts")
			newSink, err := Sink(cfg)
			if err != nil {
				t.Fatal(err)
			}
			run := &operatortest.Run{}
			defer run.Close()
			none := func(sub int) *operator.Context {
				c := run.Context("counts", sub, 2, nil)
				c.CheckpointingEnabled = false
				return c
			}
			s1 := newSink()
			defer s1.Close()
			if err := s1.Open(none(1)); err != nil {
				t.Fatal(err)
			}
			s1.Write(count{"world", 1})
			if err := s1.Finish(); err != nil {
				t.Fatal(err)
			}
			s0 := newSink()
			if err := s0.Open(none(0)); err != nil {
				t.Fatalf("subtask 0 took subtask 1's output of the same attempt for an earlier run's: %v", err)
			}
			s0.Write(count{"hello", 1})
			if err := s0.Finish(); err != nil {
				t.Fatal(err)
			}
			s0.Close()
			s1.Close()
			if got := rows(t, pg.URL); !slices.Equal(got, []string{"hello=1", "world=1"}) {
				t.Fatalf("rows %v", got)
			}
			again := newSink()
			defer again.Close()
			second := &operatortest.Run{} // a run of its own: another run id
			defer second.Close()
			ctx := second.Context("counts", 0, 2, nil)
			ctx.CheckpointingEnabled = false
			if err := again.Open(ctx); !errors.Is(err, ErrEarlierOutput) {
				t.Fatalf("a second run: %v, want ErrEarlierOutput", err)
			}
		})
	}
}
