package weir_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/connector/generator"
	"github.com/weirstream/weir/operator"
)

// commitFailsOnce is a sink whose commit (NotifyComplete) fails once, for
// the first checkpoint completed after *armed is set.
type commitFailsOnce struct {
	operator.Base
	armed, failed *atomic.Bool
	failedID      *atomic.Int64
}

func (s *commitFailsOnce) Write(int64) error { return nil }

func (s *commitFailsOnce) NotifyComplete(id checkpoint.ID) error {
	if s.armed.Load() && !s.failed.Swap(true) {
		s.failedID.Store(int64(id))
		return errors.New("injected: the sink's commit failed (a transient error)")
	}
	return nil
}

// TestReviewS41rStopWithSavepointWhoseCommitFailsRunsOn: `weir savepoint
// --stop` (POST /api/v1/savepoints?stop=true) was answered 202 with the
// savepoint once it completed. If a sink's commit of that savepoint then
// failed (a transient error), the task failed, the job restarted from the
// savepoint and ran on, as if never stopped: the caller was told it
// stopped, and nothing told them otherwise. The answer now waits for the
// job's end, and says the job runs on when it restarted instead (as
// Flink's stop-with-savepoint fails then); a second stop stops it.
func TestReviewS41rStopWithSavepointWhoseCommitFailsRunsOn(t *testing.T) {
	dir := t.TempDir()
	src, err := generator.New(generator.Config[int64]{Make: func(i int64) int64 { return i }, BatchSize: 16, RatePerSecond: 2000})
	if err != nil {
		t.Fatal(err)
	}
	addrs := make(chan string, 1)
	var armed, failed atomic.Bool
	var failedID atomic.Int64
	var restarts atomic.Int32
	env := weir.New(weir.Config{Job: "stopfail", Parallelism: 1, Web: "127.0.0.1:0", WebToken: "tok",
		OnWeb: func(a string) { addrs <- a },
		OnEvent: func(ev weir.JobEvent) {
			if ev.Kind == weir.EventRestarting {
				restarts.Add(1)
			}
		},
		Restart:    weir.FixedDelay{Delay: 10 * time.Millisecond, MaxAttempts: 5},
		Checkpoint: weir.CheckpointConfig{Dir: filepath.Join(dir, "ckpt"), Interval: time.Hour}})
	weir.Sink(weir.Source(env, "numbers", src), "out", func() weir.SinkWriter[int64] {
		return &commitFailsOnce{armed: &armed, failed: &failed, failedID: &failedID}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type result struct {
		res weir.Result
		err error
	}
	done := make(chan result, 1)
	go func() { r, err := env.Execute(ctx); done <- result{r, err} }()
	addr := <-addrs
	armed.Store(true)
	sp, err := postSavepoint(addr, true)
	if err == nil || !strings.Contains(err.Error(), "409") || !strings.Contains(err.Error(), "did not stop with it") || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("stop with savepoint %d whose commit failed: %v; want a 409 saying the job did not stop, and why", sp, err)
	}
	t.Logf("the API answered: %v", err)
	// The job's events reach this test's OnEvent after the API heard them.
	for deadline := time.Now().Add(10 * time.Second); restarts.Load() != 1 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if restarts.Load() != 1 || failedID.Load() == 0 {
		t.Fatalf("%d restarts, the commit of %d failed; want one restart, after a failed commit", restarts.Load(), failedID.Load())
	}
	select {
	case r := <-done:
		t.Fatalf("the job ended (%v, stopped with %d), though the API said it runs on", r.err, r.res.StoppedWith)
	default:
	}
	sp, err = postSavepoint(addr, true)
	if err != nil {
		t.Fatalf("the second stop with a savepoint: %v", err)
	}
	r := <-done
	if r.err != nil || r.res.StoppedWith != sp {
		t.Fatalf("the job ended with %v, stopped with %d; the API said it stopped with savepoint %d", r.err, r.res.StoppedWith, sp)
	}
}
