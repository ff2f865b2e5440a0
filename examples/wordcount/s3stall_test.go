package wordcount

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
)

// TestS3StalledUploadDoesNotBlockTheJob: an S3 PUT of a shared file that
// hangs (a server or path that stops answering) outlives the checkpoint
// timeout. The checkpoint expires; the job must stay responsive: a
// cancellation ends it promptly. The coordinator's abort calls
// Storage.Discard on its own goroutine, which waited for the write in
// flight (writeGate.discard), and the write has no deadline, so the job
// hung as long as the request did; a discard now cancels the writes of its
// checkpoint.
func TestS3StalledUploadDoesNotBlockTheJob(t *testing.T) {
	backend := s3mem.New()
	if err := backend.CreateBucket("ckpt"); err != nil {
		t.Fatal(err)
	}
	fake := gofakes3.New(backend).Server()
	var stall atomic.Bool
	release := make(chan struct{})
	var stalled atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if stall.Load() && r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/shared/") {
			stalled.Add(1)
			select { // the server stops answering this request
			case <-release:
			case <-time.After(60 * time.Second):
			}
		}
		fake.ServeHTTP(w, r)
	}))
	defer srv.Close()
	defer close(release)
	t.Setenv("AWS_ACCESS_KEY_ID", "weir")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "weir")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	url := "s3://ckpt/weir?endpoint=" + srv.URL + "&region=us-east-1&use_path_style=true&disable_https=true"

	dir := t.TempDir()
	corpus(t, dir, 2, 200_000, 3)
	var mu sync.Mutex
	expired := make(chan struct{}, 1)
	completed := 0
	env, err := Build(Options{Input: filepath.Join(dir, "in-*.txt"), Output: filepath.Join(dir, "out"), Parallelism: 2,
		BeforeCount:  Paced(50),
		Checkpoint:   weir.CheckpointConfig{Interval: 30 * time.Millisecond, Timeout: 2 * time.Second, Dir: url, TolerableFailures: 1000},
		StateBackend: weir.StateBackend{Kind: weir.PebbleState, Dir: filepath.Join(dir, "state")},
		OnEvent: func(e weir.JobEvent) {
			mu.Lock()
			defer mu.Unlock()
			switch e.Kind {
			case weir.EventCheckpointCompleted:
				if completed++; completed == 1 {
					stall.Store(true)
				}
			case weir.EventCheckpointAborted:
				if e.Reason == checkpoint.ReasonExpired && stalled.Load() > 0 {
					select {
					case expired <- struct{}{}:
					default:
					}
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := env.Execute(ctx); done <- err }()
	select {
	case <-expired:
	case err := <-done:
		t.Fatalf("the job ended before a checkpoint expired: %v (stalled PUTs %d)", err, stalled.Load())
	case <-time.After(60 * time.Second):
		t.Fatalf("no checkpoint expired (stalled PUTs %d)", stalled.Load())
	}
	cancel()
	t0 := time.Now()
	select {
	case err := <-done:
		t.Logf("ended %v after the cancel: %v; stalled PUTs %d", time.Since(t0), err, stalled.Load())
	case <-time.After(10 * time.Second):
		buf := make([]byte, 1<<22)
		buf = buf[:runtime.Stack(buf, true)]
		var where []string
		for _, g := range bytes.Split(buf, []byte("\n\n")) {
			if bytes.Contains(g, []byte("writeGate")) {
				where = append(where, string(g))
			}
		}
		t.Fatalf("the job did not end 10s after its cancellation, with a stalled S3 PUT (%d stalled); goroutines in writeGate:\n%s", stalled.Load(), strings.Join(where, "\n\n"))
	}
}
