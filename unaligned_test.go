package weir_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/examples/wordcount"
)

// TestUnalignedRestoreAtAnotherParallelism: word count with unaligned
// checkpoints under back-pressure (the counter is slowed), stopped after
// checkpoints that hold channel state, restored at parallelism 2 → 3 → 1:
// every word counted exactly once.
func TestUnalignedRestoreAtAnotherParallelism(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for f := range 3 {
		var b strings.Builder
		for i := range 60000 {
			fmt.Fprintf(&b, "w%d w%d\n", i%97, (i*31+f)%89)
		}
		p := filepath.Join(dir, fmt.Sprintf("in-%d.txt", f))
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	opts := wordcount.Options{Input: filepath.Join(dir, "in-*.txt"), Output: filepath.Join(dir, "out"),
		Checkpoint: weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: filepath.Join(dir, "ckpt"), Alignment: weir.Unaligned}}
	// Each run but the last stops after two checkpoints that hold channel
	// state, the counter slowed so that records queue before it.
	for _, p := range []int{2, 3} {
		ctx, cancel := context.WithCancel(context.Background())
		var mu sync.Mutex
		withState := 0
		opts.Parallelism, opts.BeforeCount = p, wordcount.Paced(100)
		opts.OnEvent = func(ev weir.JobEvent) {
			if ev.Kind != weir.EventCheckpointCompleted {
				return
			}
			var cs int64
			for _, tt := range ev.Tasks {
				cs += tt.ChannelState
			}
			mu.Lock()
			defer mu.Unlock()
			if cs > 0 {
				if withState++; withState == 2 {
					cancel()
				}
			}
		}
		e, err := wordcount.Build(opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Execute(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("run at parallelism %d: %v (the input must outlast two checkpoints with channel state)", p, err)
		}
		cancel()
		opts.Restore = "latest"
	}
	opts.OnEvent, opts.BeforeCount, opts.Parallelism = nil, nil, 1
	e, err := wordcount.Build(opts)
	if err != nil {
		t.Fatal(err)
	}
	execute(t, e)
	want, _ := wordcount.Expected(vfs.Default, files)
	rep, err := wordcount.Verify(vfs.Default, opts.Output, want, false)
	if err != nil || !rep.OK() {
		t.Fatalf("after 2 → 3 → 1: %v %v", rep, err)
	}
}
