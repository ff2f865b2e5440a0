package weir_test

// Found by an outside review (session 35). Rule: after every checkpoint
// the shared files are exactly those the retained checkpoints reference.
// A cluster's aborted incremental checkpoints left the shared files the
// workers wrote for them: the coordinator's storage discards only what it
// saw written. Now an abort discards the state its acknowledgements named
// (checkpoint/testdata/coordinator: discard-state after abort). NB: the
// same end-to-end check in a cluster is not asserted: an upload a worker
// still runs when the run ends lands after its clean-up, and stays until
// the next start (design note 130), which a slow run under -race showed.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/stdio"
)

// TestOneProcessAbortedCheckpointsLeaveNoSharedFiles: a job whose
// checkpoints time out now and then; once it is cancelled, its job
// directory holds exactly the shared files its checkpoints reference.
func TestOneProcessAbortedCheckpointsLeaveNoSharedFiles(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	completed, aborted := 0, 0
	cfg := weir.Config{Job: "clustered", Parallelism: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Checkpoint: weir.CheckpointConfig{Dir: filepath.Join(dir, "ckpt"), Interval: 5 * time.Millisecond, MaxConcurrent: 3, Retained: 2, TolerableFailures: 1000, Timeout: 15 * time.Millisecond}}
	cfg.OnEvent = func(e weir.JobEvent) {
		mu.Lock()
		defer mu.Unlock()
		switch e.Kind {
		case weir.EventCheckpointCompleted:
			completed++
		case weir.EventCheckpointAborted:
			aborted++
		}
		if enoughCheckpoints(completed, aborted) {
			cancel()
		}
	}
	env := weir.New(cfg)
	if err := sumsOfNumbers(env, 50_000); err != nil {
		t.Fatal(err)
	}
	tctx, tcancel := context.WithTimeout(ctx, time.Minute)
	defer tcancel()
	if _, err := env.Execute(tctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	t.Logf("%d checkpoints completed, %d aborted", completed, aborted)
	checkSharedFiles(t, filepath.Join(dir, "ckpt", "clustered"), "after the job was cancelled")
}

// sumsOfNumbers adds to env a job of rate numbers a second, summed under
// 20,000 keys (each subtask's state a file, not inline: 20 KiB and less
// is) and written nowhere.
func sumsOfNumbers(env *weir.Environment, rate float64) error {
	src, err := newRateLimited(rate, 0)
	if err != nil {
		return err
	}
	sums := weir.Reduce(weir.KeyBy(weir.Source(env, "numbers", src), func(i int64) int64 { return i % 20_000 }), "sum", func(a, b int64) int64 { return a + b })
	weir.Sink(sums, "discard", stdio.Print(io.Discard, func(dst []byte, i int64) []byte { return dst }))
	return nil
}

// enoughCheckpoints says when the test above has seen enough: a few
// checkpoints aborted (15 ms timeouts) beside a few completed; on a
// machine too slow for any to complete in 15 ms (under -race, beside other
// tests), many aborted, whose files must go all the same; on one so fast
// that few time out, many completed and one aborted.
func enoughCheckpoints(completed, aborted int) bool {
	return aborted >= 5 && completed >= 5 || aborted >= 100 || completed >= 1000 && aborted >= 1
}
