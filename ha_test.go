package weir_test

// What a highly available job records in etcd when it ends, and how it is
// run on: a run that fails for good ends the job, a stop with a savepoint
// can be resumed (--restore latest), and a standby never undoes a stop.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/ha"
	"github.com/weirstream/weir/operator"
)

// brokenSink fails to open: permanently, or not.
type brokenSink struct {
	operator.Base
	permanent bool
}

func (s brokenSink) Open(*operator.Context) error {
	if s.permanent {
		return weir.Permanent(errors.New("the sink's table has another schema"))
	}
	return errors.New("the database refused the connection")
}

func (brokenSink) Write(int64) error { return nil }

// TestHAFailureBeforeTheJobRanEndsIt: a job whose every attempt fails
// before it runs (its sink fails to open: for good, or beyond the restart
// strategy) has failed for good. Under --ha the leader records so and
// returns the failure, and a standby exits with it, instead of the job
// being tried again every few seconds for ever.
func TestHAFailureBeforeTheJobRanEndsIt(t *testing.T) {
	r := newHARig(t)
	for name, permanent := range map[string]bool{"permanent": true, "restarts-exhausted": false} {
		t.Run(name, func(t *testing.T) {
			run := func() error {
				env := weir.New(weir.Config{Job: name, Logger: slog.New(newLogRecords()), Restart: weir.FixedDelay{Delay: 10 * time.Millisecond, MaxAttempts: 2},
					Checkpoint: weir.CheckpointConfig{Dir: r.ckpt, Interval: 50 * time.Millisecond},
					Cluster:    weir.ClusterConfig{HA: r.url, HATTL: 2 * time.Second}})
				src := weir.Source(env, "numbers", newEndless())
				weir.Sink(src, "broken", func() weir.SinkWriter[int64] { return brokenSink{permanent: permanent} })
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, err := env.Execute(ctx)
				if ctx.Err() != nil {
					t.Fatalf("the run failed for good, and was still being tried after 30 s: %v", err)
				}
				return err
			}
			err := run()
			if err == nil {
				t.Fatal("the run whose sink fails at every write succeeded")
			}
			v, ok := r.ended(name)
			if !ok || !strings.HasPrefix(v, "failed: ") {
				t.Fatalf("the job failed (%v), and etcd records its end as %q, %v", err, v, ok)
			}
			if err := run(); err == nil || !strings.Contains(err.Error(), "ended under an earlier leader") {
				t.Errorf("a coordinator started after the job failed: %v", err)
			}
		})
	}
}

// newEndless is a source of numbers that never ends.
func newEndless() func() weir.SourceReader[int64] {
	src, err := newRateLimited(2000, 1<<40)
	if err != nil {
		panic(err)
	}
	return src
}

// TestHAStopWithSavepointResumes: a stop with a savepoint under --ha
// records that the job stopped, not that it finished: a standby that was
// waiting exits, as does a coordinator started plainly, but one started
// with --restore latest runs the job on from the savepoint.
func TestHAStopWithSavepointResumes(t *testing.T) {
	r := newHARig(t)
	type run struct {
		logs logRecords
		done chan error
		res  weir.Result
		web  chan string
	}
	start := func(ctx context.Context, restore string) *run {
		x := &run{logs: newLogRecords(), done: make(chan error, 1), web: make(chan string, 1)}
		env := weir.New(weir.Config{Job: "resumed", Logger: slog.New(x.logs), Restore: restore,
			Web: "127.0.0.1:0", WebToken: "tok", OnWeb: func(a string) { x.web <- a },
			Checkpoint: weir.CheckpointConfig{Dir: r.ckpt, Interval: 50 * time.Millisecond},
			Cluster:    weir.ClusterConfig{HA: r.url, HATTL: 2 * time.Second}})
		weir.Sink(weir.Source(env, "numbers", newEndless()), "drop", weir.SinkFunc(func(int64) error { return nil }))
		go func() {
			var err error
			x.res, err = env.Execute(ctx)
			x.done <- err
		}()
		return x
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leader := start(ctx, "")
	waitLog(t, leader.logs, "INFO leading the job", 20*time.Second)
	// A standby started with --restore latest while the job runs: the
	// stop to come is not for it to undo.
	standby := start(ctx, "latest")
	waitLog(t, standby.logs, "INFO standing by", 20*time.Second)
	c, err := ha.Dial(ha.Config{Endpoints: r.etcd.Hosts(), Prefix: reviewPrefix})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "a completed checkpoint", 30*time.Second, func() bool {
		ps, err := c.Completed(context.Background(), "resumed")
		return err == nil && len(ps) > 0
	})
	postAPI(t, <-leader.web, "/api/v1/savepoints?stop=true")
	if err := waitDone(t, leader.done); err != nil || leader.res.StoppedWith == 0 {
		t.Fatalf("the leader stopped with savepoint %d: %v", leader.res.StoppedWith, err)
	}
	v, ok := r.ended("resumed")
	if !ok || !strings.HasPrefix(v, "stopped with savepoint") {
		t.Fatalf("the job stopped with savepoint %d, and etcd records its end as %q, %v", leader.res.StoppedWith, v, ok)
	}
	if err := waitDone(t, standby.done); err != nil || !containsMessage(standby.logs.after(time.Time{}, slog.LevelInfo), "INFO the job stopped under an earlier leader") {
		t.Fatalf("the standby, after the stop: %v %q", err, standby.logs.after(time.Time{}, slog.LevelInfo))
	}
	if err := waitDone(t, start(ctx, "").done); err != nil {
		t.Fatalf("a coordinator started plainly after the stop: %v", err)
	}
	resumed := start(ctx, "latest")
	waitFor(t, "the resumed run to complete a checkpoint after the savepoint", 30*time.Second, func() bool {
		ps, err := c.Completed(context.Background(), "resumed")
		return err == nil && len(ps) > 0 && ps[len(ps)-1].ID > leader.res.StoppedWith
	})
	restored := false
	for _, l := range resumed.logs.after(time.Time{}, slog.LevelInfo) {
		restored = restored || strings.HasPrefix(l, "INFO restoring checkpoint") && strings.Contains(l, " checkpoint="+strconv.FormatUint(uint64(leader.res.StoppedWith), 10)+" ")
	}
	if !restored {
		ps, _ := c.Completed(context.Background(), "resumed")
		t.Errorf("the resumed run did not restore savepoint %d: %q; completed in etcd: %+v; the leader's log: %q", leader.res.StoppedWith, resumed.logs.after(time.Time{}, slog.LevelInfo), ps, leader.logs.after(time.Time{}, slog.LevelInfo))
	}
	if _, ok := r.ended("resumed"); ok {
		t.Error("the resumed job still has an end recorded")
	}
	cancel()
	<-resumed.done
}

func waitDone(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not return within 30 s")
		return nil
	}
}

func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond) // polls for a condition
	}
}

// postAPI posts to the job's API at addr (token "tok"), and fails the test
// unless it succeeds.
func postAPI(t *testing.T, addr, path string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST %s: %s %s", path, resp.Status, body)
	}
}
