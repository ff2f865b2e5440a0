package weir_test

// Found by an outside review (session 35). Rule: after every checkpoint
// the shared files are exactly those the retained checkpoints reference,
// in a cluster too. A cluster's aborted incremental checkpoints left the
// shared files the workers wrote for them: the coordinator's storage
// discards only what it saw written, and the workers wrote them. Now an
// abort discards the state its acknowledgements named, and the end of a
// run removes what no checkpoint references. End to end: a cluster job
// whose checkpoints time out now and then; once it is cancelled, its job
// directory holds exactly the shared files its checkpoints reference.

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
	"github.com/weirstream/weir/internal/transport"
)

func TestClusterAbortedCheckpointsLeaveNoSharedFiles(t *testing.T) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if err := transport.WriteCerts(certs, []string{"coordinator", "worker-1", "worker-2"}, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	completed, aborted := 0, 0
	events := make(chan struct{}, 1)
	onEvent := func(e weir.JobEvent) {
		mu.Lock()
		defer mu.Unlock()
		switch e.Kind {
		case weir.EventCheckpointCompleted:
			completed++
		case weir.EventCheckpointAborted:
			aborted++
		}
		select {
		case events <- struct{}{}:
		default:
		}
	}
	coordinatorDone := make(chan struct{})
	execute := func(ctx context.Context, cc weir.ClusterConfig) {
		defer wg.Done()
		if cc.Role == weir.Coordinator {
			defer close(coordinatorDone)
		}
		cc.Certs = certs
		cc.HeartbeatInterval, cc.HeartbeatTimeout = 100*time.Millisecond, 3*time.Second
		cfg := weir.Config{Job: "clustered", Parallelism: 2, Cluster: cc, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Checkpoint: weir.CheckpointConfig{Dir: filepath.Join(dir, "ckpt"), Interval: 5 * time.Millisecond, MaxConcurrent: 3, Retained: 2, TolerableFailures: 1000, Timeout: 15 * time.Millisecond}}
		if cc.Role == weir.Coordinator {
			cfg.OnEvent = onEvent
		}
		env := weir.New(cfg)
		if err := sumsOfNumbers(env, 50_000); err != nil {
			t.Error(err)
			return
		}
		if _, err := env.Execute(ctx); err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
			t.Logf("%s ended: %v", cc.Role, err)
		}
	}
	listening := make(chan string, 1)
	cctx, ccancel := context.WithCancel(ctx)
	wg.Add(1)
	go execute(cctx, weir.ClusterConfig{Role: weir.Coordinator, Listen: "127.0.0.1:0", OnListen: func(addr string) { listening <- addr }})
	addr := <-listening
	for _, name := range []string{"worker-1", "worker-2"} {
		wg.Add(1)
		go execute(ctx, weir.ClusterConfig{Role: weir.Worker, Join: addr, Name: name, Listen: "127.0.0.1:0", Slots: 1})
	}
	deadline := time.After(time.Minute)
	for {
		mu.Lock()
		done := completed >= 5 && aborted >= 5
		mu.Unlock()
		if done {
			break
		}
		select {
		case <-events:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out: %d completed, %d aborted", completed, aborted)
		}
	}
	ccancel()
	<-coordinatorDone
	cancel()
	wg.Wait()
	mu.Lock()
	t.Logf("%d checkpoints completed, %d aborted", completed, aborted)
	mu.Unlock()
	checkSharedFiles(t, filepath.Join(dir, "ckpt", "clustered"), "after the cluster job was cancelled")
}

// The same job in one process leaves none: the storage there sees the
// tasks' writes.
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
		if completed >= 5 && aborted >= 5 {
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
