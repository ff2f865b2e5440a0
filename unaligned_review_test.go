package weir_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

// reviewModes are the checkpoint configurations under review.
var reviewModes = []weir.CheckpointConfig{{Alignment: weir.Unaligned}, {AlignedTimeout: time.Millisecond}}

func modeName(cc weir.CheckpointConfig) string {
	return fmt.Sprintf("%v-timeout-%v", cc.Alignment, cc.AlignedTimeout)
}

// channelStateCounter counts completed checkpoints that hold channel state.
type channelStateCounter struct {
	mu        sync.Mutex
	withState int
	completed int
}

func (c *channelStateCounter) on(ev weir.JobEvent) {
	if ev.Kind != weir.EventCheckpointCompleted {
		return
	}
	var cs int64
	for _, tt := range ev.Tasks {
		cs += tt.ChannelState
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.completed++
	if cs > 0 {
		c.withState++
	}
}

// reviewRunOnce is runOnce with the checkpoint configuration cc.
func reviewRunOnce(t *testing.T, cc weir.CheckpointConfig, failures bool, build func(cfg weir.Config, out string) *weir.Environment) ([]string, *channelStateCounter) {
	t.Helper()
	out := t.TempDir()
	cfg := eventTimeConfig(weir.StateBackend{})
	cfg.Checkpoint = cc
	cfg.Checkpoint.Interval = 5 * time.Millisecond
	cfg.Checkpoint.TolerableFailures = 1000
	var c channelStateCounter
	cfg.OnEvent = c.on
	if res := execute(t, build(cfg, out)); failures && res.Attempts < 2 {
		t.Fatalf("%d attempts: the injected failures did not fire", res.Attempts)
	}
	return sortedLines(t, out), &c
}

// TestReviewUnalignedEventTimeWindowsWithFailures: windowJob (tumbling,
// sliding, event-time timers that refuse late records) with unaligned
// checkpoints, failing twice, must give the brute force's results.
func TestReviewUnalignedEventTimeWindowsWithFailures(t *testing.T) {
	want := bruteForce()
	for _, cc := range reviewModes {
		t.Run(modeName(cc), func(t *testing.T) {
			var n atomic.Int64
			got, c := reviewRunOnce(t, cc, true, func(cfg weir.Config, out string) *weir.Environment {
				return windowJob(t, cfg, out, false, func(reading) {
					if k := n.Add(1); k == 7000 || k == 15000 {
						panic(errors.New("injected failure"))
					}
				})
			})
			t.Logf("%d checkpoints completed, %d with channel state", c.completed, c.withState)
			if !slices.Equal(got, want) {
				t.Fatalf("%d results, want %d", len(got), len(want))
			}
		})
	}
}

// TestReviewUnalignedJoinsWithFailures: joinJob (two inputs) with
// unaligned checkpoints, failing midway.
func TestReviewUnalignedJoinsWithFailures(t *testing.T) {
	want := joinBruteForce(joinEvents)
	for _, cc := range reviewModes {
		t.Run(modeName(cc), func(t *testing.T) {
			var n atomic.Int64
			got, c := reviewRunOnce(t, cc, true, func(cfg weir.Config, out string) *weir.Environment {
				return joinJob(t, cfg, out, false, func(event) {
					if k := n.Add(1); k == joinEvents/3 || k == 2*joinEvents/3 {
						panic(errors.New("injected failure"))
					}
				})
			})
			t.Logf("%d checkpoints completed, %d with channel state", c.completed, c.withState)
			if !slices.Equal(got, want) {
				t.Fatalf("%d results, want %d", len(got), len(want))
			}
		})
	}
}

// reviewRescaled is runRescaled with the checkpoint configuration cc: the
// cancelled runs stop after two checkpoints with channel state.
func reviewRescaled(t *testing.T, cc weir.CheckpointConfig, ps []int, build func(cfg weir.Config, out string, slow bool) *weir.Environment) []string {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	for i, p := range ps {
		cfg := eventTimeConfig(weir.StateBackend{})
		cfg.Checkpoint = cc
		cfg.Checkpoint.Interval, cfg.Checkpoint.TolerableFailures = 5*time.Millisecond, 1000
		cfg.Parallelism, cfg.Checkpoint.Dir = p, filepath.Join(dir, "ckpt")
		if i > 0 {
			cfg.Restore = "latest"
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var c channelStateCounter
		if i < len(ps)-1 {
			cfg.OnEvent = func(ev weir.JobEvent) {
				c.on(ev)
				c.mu.Lock()
				defer c.mu.Unlock()
				if c.withState >= 2 || c.completed >= 20 {
					cancel()
				}
			}
		}
		_, err := build(cfg, out, i < len(ps)-1).Execute(ctx)
		cancel()
		if i < len(ps)-1 && !errors.Is(err, context.Canceled) {
			t.Fatalf("run at parallelism %d: %v (the input must outlast two checkpoints)", p, err)
		}
		if i == len(ps)-1 && err != nil {
			t.Fatalf("last run, at parallelism %d: %v", p, err)
		}
		t.Logf("run at %d: %d checkpoints, %d with channel state", p, c.completed, c.withState)
	}
	return sortedLines(t, out)
}

func TestReviewUnalignedWindowsRescaled(t *testing.T) {
	want := bruteForce()
	for _, cc := range reviewModes {
		t.Run(modeName(cc), func(t *testing.T) {
			got := reviewRescaled(t, cc, []int{2, 3, 1}, func(cfg weir.Config, out string, slow bool) *weir.Environment {
				return windowJob(t, cfg, out, slow, nil)
			})
			if !slices.Equal(got, want) {
				t.Fatalf("%d results, want %d", len(got), len(want))
			}
		})
	}
}

func TestReviewUnalignedJoinsRescaled(t *testing.T) {
	want := joinBruteForce(joinEvents)
	for _, cc := range reviewModes {
		t.Run(modeName(cc), func(t *testing.T) {
			got := reviewRescaled(t, cc, []int{2, 3, 1}, func(cfg weir.Config, out string, slow bool) *weir.Environment {
				return joinJob(t, cfg, out, slow, nil)
			})
			if !slices.Equal(got, want) {
				t.Fatalf("%d results, want %d", len(got), len(want))
			}
		})
	}
}
