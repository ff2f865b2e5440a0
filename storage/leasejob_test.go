package storage_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/examples/wordcount"
	"github.com/weirstream/weir/internal/s3test"
	"github.com/weirstream/weir/storage"
)

// TestJobWhoseLeaseIsTakenStops (issue 19, defect 11): a word count on
// S3 whose lease another run takes over (as after a stall longer than the
// lease) commits no checkpoint after that, and fails for good, naming
// the other run, instead of restarting.
func TestJobWhoseLeaseIsTakenStops(t *testing.T) {
	s3 := s3test.Start(t)
	data := vfs.NewMem()
	if err := data.MkdirAll("/in", 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := data.Create("/in/a.txt", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50_000 {
		fmt.Fprintf(f, "w%d w%d w%d\n", i%97, i%13, i%1009)
	}
	f.Close()
	url := s3.URL + "&lease=2s"
	other, err := storage.OpenBlob(context.Background(), url, "wordcount")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		taken   bool
		after   []string // what happened after the lease was taken
		takeErr error
	)
	o := wordcount.Options{
		Input: "/in/*.txt", Output: "/out", FS: data, Parallelism: 2, Restore: "latest",
		Checkpoint:  weir.CheckpointConfig{Interval: 10 * time.Millisecond, Dir: url},
		Restart:     weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: 20},
		BeforeCount: wordcount.Paced(200),
		OnEvent: func(ev weir.JobEvent) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case taken && ev.Kind == weir.EventCheckpointCompleted:
				after = append(after, fmt.Sprintf("checkpoint %d completed", ev.ID))
			case taken && ev.Kind == weir.EventRestarting:
				after = append(after, fmt.Sprintf("restarting after %v", ev.Err))
			case !taken && ev.Kind == weir.EventCheckpointCompleted:
				// NB: the driver waits for this callback: the lease is
				// taken before it commits anything more.
				takeErr, taken = storage.TakeLease(other, "run b"), true
			}
		},
	}
	e, err := wordcount.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err = e.Execute(ctx)
	mu.Lock()
	defer mu.Unlock()
	if takeErr != nil || !taken {
		t.Fatalf("take the lease: %v (taken: %v)", takeErr, taken)
	}
	if len(after) > 0 {
		t.Errorf("after another run took the lease: %s", strings.Join(after, "; "))
	}
	if !errors.Is(err, storage.ErrLeaseLost) || !strings.Contains(err.Error(), "run b") {
		t.Fatalf("the run whose lease was taken: want an error wrapping ErrLeaseLost naming run b, got %v", err)
	}
}
