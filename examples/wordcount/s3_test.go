package wordcount

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/s3test"
)

// TestS3FaultsDeclineCheckpoints: the word count on Pebble, with
// incremental checkpoints on S3. While S3 refuses writes (503 Slow Down),
// checkpoints are declined or aborted with the cause, and the job runs on
// within its tolerable failures; once S3 recovers a checkpoint completes;
// slow responses only slow checkpoints. The output is exactly once.
func TestS3FaultsDeclineCheckpoints(t *testing.T) {
	s3 := s3test.Start(t)
	s3.Delay.Store(int64(2 * time.Millisecond))
	dir := t.TempDir()
	files := corpus(t, dir, 3, 40_000, 9)
	out := filepath.Join(dir, "out")
	var mu sync.Mutex
	var aborted []string
	completed, completedAfter := 0, 0
	// The input must outlast the faults: it is paced until a checkpoint
	// completed after them (unpaced, a fast run could end first).
	var settled atomic.Bool
	pace := Paced(100)
	env, err := Build(Options{Input: filepath.Join(dir, "in-*.txt"), Output: out, Parallelism: 2,
		BeforeCount: func(w string) {
			if !settled.Load() {
				pace(w)
			}
		},
		Checkpoint:   weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: s3.URL, TolerableFailures: 1000},
		StateBackend: weir.StateBackend{Kind: weir.PebbleState, Dir: filepath.Join(dir, "state")},
		OnEvent: func(e weir.JobEvent) {
			mu.Lock()
			defer mu.Unlock()
			switch e.Kind {
			case weir.EventCheckpointAborted:
				if e.Reason == checkpoint.ReasonDeclined || e.Reason == checkpoint.ReasonPersistFailed || e.Reason == checkpoint.ReasonExpired {
					aborted = append(aborted, fmt.Sprintf("%d %v: %v", e.ID, e.Reason, e.Err))
				}
				if len(aborted) >= 3 {
					s3.FailWrites.Store(false) // S3 recovers
				}
			case weir.EventCheckpointCompleted:
				if completed++; completed == 2 {
					s3.FailWrites.Store(true)
				}
				if len(aborted) > 0 {
					completedAfter++
					settled.Store(true)
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := env.Execute(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(aborted) < 3 || completedAfter == 0 || s3.Failed.Load() == 0 {
		t.Fatalf("aborted %d, completed after the faults %d, failed requests %d (the input must outlast the faults)", len(aborted), completedAfter, s3.Failed.Load())
	}
	if !strings.Contains(aborted[0], "SlowDown") && !strings.Contains(aborted[0], "503") {
		t.Fatalf("the abort does not say why: %s", aborted[0])
	}
	want, _ := Expected(vfs.Default, files)
	if rep, err := Verify(vfs.Default, out, want, false); err != nil || !rep.OK() {
		t.Fatalf("output: %v %v", rep, err)
	}
}
