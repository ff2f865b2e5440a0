package weir_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/generator"
	"github.com/weirstream/weir/internal/transport"
)

// failFirstProbe fails the first file created in the storage's _probe
// directory, once, as a full disk would.
type failFirstProbe struct {
	vfs.FS
	fired atomic.Bool
}

func (f *failFirstProbe) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	if filepath.Base(filepath.Dir(name)) == "_probe" && f.fired.CompareAndSwap(false, true) {
		return nil, &os.PathError{Op: "create", Path: name, Err: errors.New("injected: no space left on device")}
	}
	return f.FS.Create(name, cat)
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
// -genc.failprobe). The job must restart and finish.
func TestReviewClusterProbeWriteFailsOnce(t *testing.T) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if err := transport.WriteCerts(certs, []string{"coordinator", "worker-1"}, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	var mu sync.Mutex
	got := 0
	fs := &failFirstProbe{FS: vfs.Default}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	execute := func(ctx context.Context, cc weir.ClusterConfig) error {
		cc.Certs = certs
		cc.HeartbeatInterval, cc.HeartbeatTimeout = 100*time.Millisecond, 2*time.Second
		env := weir.New(weir.Config{Job: "probe", Parallelism: 1, Cluster: cc, Logger: quiet,
			Restart:    weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: 5},
			Checkpoint: weir.CheckpointConfig{Dir: filepath.Join(dir, "ckpt"), FS: fs, Interval: time.Hour}})
		src, err := generator.New(generator.Config[int64]{Count: n, Make: func(i int64) int64 { return i }})
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
	if !fs.fired.Load() {
		t.Fatal("no probe was written")
	}
	if err != nil {
		t.Fatalf("one failing write of the storage probe: the job failed with %v; want a restart, and the job to finish", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got < n {
		t.Fatalf("%d records sunk, want at least %d", got, n)
	}
}
