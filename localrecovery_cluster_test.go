package weir_test

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

// syncBuffer is a log a test reads while the job writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// TestClusterWorkerRestartsFromItsLocalCopy: a cluster of two workers
// with local recovery; worker-1's process is stopped and a new one joins
// under its name with the same local directory. It gets its subtasks
// back (the placement is the same for the same workers), and every
// restore, on both workers, reads its state from the local copy.
func TestClusterWorkerRestartsFromItsLocalCopy(t *testing.T) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if err := transport.WriteCerts(certs, []string{"coordinator", "worker-1", "worker-2"}, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var mu sync.Mutex
	completed, restoredAt := 0, 0
	events := make(chan struct{}, 1000)
	onEvent := func(e weir.JobEvent) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case e.Kind == weir.EventCheckpointCompleted:
			completed++
		case e.Kind == weir.EventRunning && e.RestoredFrom != 0:
			restoredAt = completed
		}
		events <- struct{}{}
	}
	execute := func(ctx context.Context, cc weir.ClusterConfig, logs io.Writer) {
		defer wg.Done()
		cc.Certs = certs
		cc.HeartbeatInterval, cc.HeartbeatTimeout = 100*time.Millisecond, 3*time.Second
		cfg := weir.Config{Job: "clustered", Parallelism: 2, Cluster: cc, Logger: slog.New(slog.NewTextHandler(logs, nil)),
			Checkpoint: weir.CheckpointConfig{Dir: filepath.Join(dir, "ckpt"), Interval: 100 * time.Millisecond}}
		if cc.Role == weir.Worker {
			cfg.LocalRecovery, cfg.LocalRecoveryDir = true, filepath.Join(dir, "local-"+cc.Name)
		} else {
			cfg.OnEvent = onEvent
		}
		env := weir.New(cfg)
		src, err := newRateLimited(20_000, 0)
		if err != nil {
			t.Error(err)
			return
		}
		// 20,000 keys: each subtask's state is a file, not inline (20 KiB
		// and less is).
		sums := weir.Reduce(weir.KeyBy(weir.Source(env, "numbers", src), func(i int64) int64 { return i % 20_000 }), "sum", func(a, b int64) int64 { return a + b })
		weir.Sink(sums, "discard", stdio.Print(io.Discard, func(dst []byte, i int64) []byte { return dst }))
		if _, err := env.Execute(ctx); err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
			t.Logf("%s ended: %v", cc.Role, err)
		}
	}
	listening := make(chan string, 1)
	wg.Add(1)
	go execute(ctx, weir.ClusterConfig{Role: weir.Coordinator, Listen: "127.0.0.1:0", OnListen: func(addr string) { listening <- addr }}, io.Discard)
	addr := <-listening
	worker := func(name string, logs io.Writer) context.CancelFunc {
		wctx, cancel := context.WithCancel(ctx)
		wg.Add(1)
		go execute(wctx, weir.ClusterConfig{Role: weir.Worker, Join: addr, Name: name, Listen: "127.0.0.1:0", Slots: 1}, logs)
		return cancel
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.After(time.Minute)
		for {
			mu.Lock()
			done := ok()
			mu.Unlock()
			if done {
				return
			}
			select {
			case <-events:
			case <-time.After(100 * time.Millisecond):
			case <-deadline:
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	var logs1, logs2 syncBuffer
	stop1 := worker("worker-1", io.Discard)
	worker("worker-2", &logs2)
	// After 12 checkpoints (1.2 s at least, 24,000 records) every key
	// has a sum: each subtask's state is well above the inline limit.
	waitFor("12 checkpoints", func() bool { return completed >= 12 })
	stop1()
	worker("worker-1", &logs1)
	waitFor("a checkpoint after the restore", func() bool { return restoredAt > 0 && completed > restoredAt })
	for name, logs := range map[string]*syncBuffer{"worker-1": &logs1, "worker-2": &logs2} {
		local, remote := restoredBytes(t, logs.String())
		if local == 0 || remote != 0 {
			t.Errorf("%s restored %d bytes locally, %d from the checkpoint storage; want only local:\n%s", name, local, remote, logs.String())
		}
	}
}
