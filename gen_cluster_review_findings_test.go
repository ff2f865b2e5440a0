package weir_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/generator"
	"github.com/weirstream/weir/internal/transport"
)

// failFirstProbe fails, once, the first probe file the worker creates in
// the storage's _probe directory (read: the first the coordinator opens)
// with err.
type failFirstProbe struct {
	vfs.FS
	read  bool
	err   error
	fired atomic.Bool
}

func (f *failFirstProbe) fail(op, name string) error {
	if filepath.Base(filepath.Dir(name)) == "_probe" && f.fired.CompareAndSwap(false, true) {
		return &os.PathError{Op: op, Path: name, Err: f.err}
	}
	return nil
}

func (f *failFirstProbe) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	if !f.read {
		if err := f.fail("create", name); err != nil {
			return nil, err
		}
	}
	return f.FS.Create(name, cat)
}

func (f *failFirstProbe) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	if f.read {
		if err := f.fail("open", name); err != nil {
			return nil, err
		}
	}
	return f.FS.Open(name, opts...)
}

// TestReviewClusterProbeWriteFailsOnce: the coordinator probes, before it
// deploys on a worker's new session, that the worker shares the checkpoint
// storage: the worker writes a file, the coordinator reads it back. One
// failing write of that file (a full disk, an I/O error, a slow object
// store: the same error that a checkpoint's write may hit and the job
// restarts over) failed the job for good, "a restart cannot fix it:
// worker worker-1 cannot write to the checkpoint storage", with restarts
// left. It happens at every new session: after a worker or the
// coordinator restarted (TestReviewGenCluster seeds 4 and 20, with
// -genc.failprobe). So did one failing read of it by the coordinator
// ("checkpoint storage ... is not shared"). The job must restart and
// finish; storage the worker may not write to still fails it at once.
func TestReviewClusterProbeWriteFailsOnce(t *testing.T) {
	for _, c := range []struct {
		name  string
		read  bool
		err   error
		fails string // the error the job fails with; "" if it finishes
	}{
		{"write: no space", false, syscall.ENOSPC, ""},
		{"read: I/O error", true, syscall.EIO, ""},
		{"write: permission denied", false, syscall.EACCES, "a restart cannot fix it: worker worker-1 cannot write to the checkpoint storage"},
		{"read: permission denied", true, syscall.EACCES, "a restart cannot fix it: checkpoint storage"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := &failFirstProbe{FS: vfs.Default, read: c.read, err: c.err}
			got, err := runProbed(t, fs)
			if !fs.fired.Load() {
				t.Fatal("no probe was written and read")
			}
			switch {
			case c.fails == "" && err != nil:
				t.Fatalf("one failing %s: the job failed with %v; want a restart, and the job to finish", c.name, err)
			case c.fails == "" && got < probedRecords:
				t.Fatalf("%d records sunk, want at least %d", got, probedRecords)
			case c.fails != "" && (err == nil || !strings.Contains(err.Error(), c.fails)):
				t.Fatalf("%s: the job ended with %v; want it to fail at once, saying %q", c.name, err, c.fails)
			}
		})
	}
}

const probedRecords = 1000

// runProbed runs a job of probedRecords records on a coordinator and one
// worker whose checkpoint storage is fs, and returns how many records its
// sink took and how the job ended.
func runProbed(t *testing.T, fs vfs.FS) (int, error) { return runProbedLogged(t, fs, quiet) }

// runProbedLogged is runProbed with log for the coordinator's logger.
func runProbedLogged(t *testing.T, fs vfs.FS, log *slog.Logger) (int, error) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if err := transport.WriteCerts(certs, []string{"coordinator", "worker-1"}, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := 0
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	execute := func(ctx context.Context, cc weir.ClusterConfig) error {
		cc.Certs = certs
		cc.HeartbeatInterval, cc.HeartbeatTimeout = 100*time.Millisecond, 2*time.Second
		logger := quiet
		if cc.Role == weir.Coordinator {
			logger = log
		}
		env := weir.New(weir.Config{Job: "probe", Parallelism: 1, Cluster: cc, Logger: logger,
			Restart:    weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: 5},
			Checkpoint: weir.CheckpointConfig{Dir: filepath.Join(dir, "ckpt"), FS: fs, Interval: time.Hour}})
		src, err := generator.New(generator.Config[int64]{Count: probedRecords, Make: func(i int64) int64 { return i }})
		if err != nil {
			return err
		}
		weir.Sink(weir.Source(env, "numbers", src), "count", weir.SinkFunc(func(int64) error {
			mu.Lock()
			defer mu.Unlock()
			got++
			return nil
		}))
		_, err = env.Execute(ctx)
		return err
	}
	listening := make(chan string, 1)
	coordinator := make(chan error, 1)
	go func() {
		coordinator <- execute(ctx, weir.ClusterConfig{Role: weir.Coordinator, Listen: "127.0.0.1:0", OnListen: func(a string) { listening <- a }})
	}()
	var addr string
	select {
	case addr = <-listening:
	case err := <-coordinator:
		t.Fatalf("coordinator: %v", err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	worker := make(chan error, 1)
	go func() {
		worker <- execute(wctx, weir.ClusterConfig{Role: weir.Worker, Join: addr, Name: "worker-1", Listen: "127.0.0.1:0"})
	}()
	err := <-coordinator
	wcancel() // the worker returns at once if the job failed
	<-worker
	mu.Lock()
	defer mu.Unlock()
	return got, err
}

// TestReviewClusterReplacementHearsTheEnd: worker-2's process (idle, the
// job runs on worker-1) goes silent, its connection open, and a new
// process registers under its name; the coordinator holds the name for
// the silent session until its heartbeat timeout, and the registration
// waits. The job finishes meanwhile. The waiting registration was
// answered "unavailable: the coordinator is stopping", not that the job
// finished, so the new process looked for a coordinator for ever
// (TestReviewGenCluster seeds 56 and 118: a worker killed and replaced
// under its name just before the job stopped with a savepoint). It must
// hear that the job finished and return nil, as a worker that registers
// after the end does.
func TestReviewClusterReplacementHearsTheEnd(t *testing.T) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if err := transport.WriteCerts(certs, []string{"coordinator", "worker-1", "worker-2"}, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	const n = 100
	gate := make(chan struct{}) // the source's last record waits for it
	running := make(chan struct{}, 1)
	logs := newLogRecords()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	execute := func(ctx context.Context, cc weir.ClusterConfig) error {
		cc.Certs = certs
		cc.HeartbeatInterval, cc.HeartbeatTimeout = 100*time.Millisecond, 4*time.Second
		cfg := weir.Config{Job: "end", Parallelism: 1, Cluster: cc, Logger: quiet,
			Checkpoint: weir.CheckpointConfig{Dir: filepath.Join(dir, "ckpt"), Interval: time.Hour}}
		if cc.Role == weir.Coordinator {
			cfg.Logger = slog.New(logs)
			cfg.OnEvent = func(ev weir.JobEvent) {
				if ev.Kind == weir.EventRunning {
					running <- struct{}{}
				}
			}
		}
		env := weir.New(cfg)
		src, err := generator.New(generator.Config[int64]{Count: n, Make: func(i int64) int64 {
			if i == n-1 {
				select {
				case <-gate:
				case <-ctx.Done():
				}
			}
			return i
		}})
		if err != nil {
			return err
		}
		weir.Sink(weir.Source(env, "numbers", src), "discard", weir.SinkFunc(func(int64) error { return nil }))
		_, err = env.Execute(ctx)
		return err
	}
	listening := make(chan string, 1)
	coordinator := make(chan error, 1)
	go func() {
		coordinator <- execute(ctx, weir.ClusterConfig{Role: weir.Coordinator, Listen: "127.0.0.1:0", OnListen: func(a string) { listening <- a }})
	}()
	addr := <-listening
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	start := func(ctx context.Context, join string) chan error {
		done := make(chan error, 1)
		name := "worker-2"
		if join == addr {
			name = "worker-1"
		}
		wg.Go(func() {
			done <- execute(ctx, weir.ClusterConfig{Role: weir.Worker, Join: join, Name: name, Listen: "127.0.0.1:0"})
		})
		return done
	}
	// worker-1 runs the job; worker-2 joins through a link that stalls.
	w1 := start(ctx, addr)
	<-running
	link, err := newStallProxy(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer link.close()
	w2ctx, w2cancel := context.WithCancel(ctx)
	defer w2cancel()
	w2 := start(w2ctx, link.addr())
	deadline := time.Now().Add(30 * time.Second)
	for !logged(logs, "worker registered", "worker-2") {
		if time.Now().After(deadline) {
			t.Fatal("worker-2 did not register")
		}
		time.Sleep(10 * time.Millisecond) // polling the coordinator's log
	}
	link.stall() // worker-2 is silent, its connection open
	replacement := make(chan error, 1)
	wg.Go(func() {
		replacement <- execute(ctx, weir.ClusterConfig{Role: weir.Worker, Join: addr, Name: "worker-2", Listen: "127.0.0.1:0"})
	})
	// The job ends once the replacement's registration waits for the name
	// (well within worker-2's 4 s timeout).
	for !logged(logs, "worker registering waits", "worker-2") {
		if time.Now().After(deadline) {
			t.Fatal("the replacement of worker-2 did not wait for its name")
		}
		time.Sleep(10 * time.Millisecond) // polling the coordinator's log
	}
	close(gate)
	if err := <-coordinator; err != nil {
		t.Fatalf("coordinator: %v", err)
	}
	if err := <-w1; err != nil {
		t.Errorf("worker-1: %v", err)
	}
	w2cancel()
	link.resume()
	<-w2
	select {
	case err := <-replacement:
		if err != nil {
			t.Errorf("the replacement of worker-2 returned %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("the replacement of worker-2 still looks for the coordinator 5 s after the job finished; the coordinator logged:\n%q", logs.after(time.Time{}, slog.LevelInfo))
		cancel()
		<-replacement
	}
}

// logged says whether the coordinator logged msg about worker.
func logged(logs logRecords, msg, worker string) bool {
	for _, l := range logs.after(time.Time{}, slog.LevelInfo) {
		if strings.Contains(l, msg) && strings.Contains(l, "worker="+worker) {
			return true
		}
	}
	return false
}
