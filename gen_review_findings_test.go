package weir_test

// Findings of the review's job generator (gen_review_test.go), each as a
// deterministic test.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
)

// TestReviewGenChannelStateOfAnOperatorChainedOnRestore: an unaligned
// checkpoint stores the records in flight into the task whose head is
// "fmt" (parallelism 2, behind a source of parallelism 1: a rebalance
// edge). The job is restored with "fmt" at parallelism 1: it is now chained
// to the source, no task's head is "fmt", and the channel state stored
// under its UID is not replayed by anyone. Found by TestReviewGen seed 37
// (a reduce's result lost after a rescale with the aligned timeout).
func TestReviewGenChannelStateOfAnOperatorChainedOnRestore(t *testing.T) {
	// The control: "fmt" kept a task's head by NoChain at the restore.
	t.Run("not chained (control)", func(t *testing.T) { channelStateChained(t, false) })
	t.Run("chained", func(t *testing.T) { channelStateChained(t, true) })
}

func channelStateChained(t *testing.T, chained bool) {
	const n = 20_000
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	build := func(cfg weir.Config, p int, crawl bool) *weir.Environment {
		opts := []weir.Option{weir.Parallelism(p)}
		if !chained {
			opts = append(opts, weir.NoChain())
		}
		e := weir.New(cfg)
		src := weir.Source(e, "nums", gen(t, n, func(i int64) int64 { return i }), weir.Parallelism(1))
		var k atomic.Int64
		fmtd := weir.Map(src, "fmt", func(v int64) string {
			if crawl {
				pace(&k, 8)
			}
			return fmt.Sprint(v)
		}, opts...)
		sink, err := file.Sink(file.SinkConfig[string]{Dir: out, Format: lineFormat})
		if err != nil {
			t.Fatal(err)
		}
		weir.Sink(fmtd, "out", sink, weir.Parallelism(p))
		return e
	}
	cc := weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: filepath.Join(dir, "ckpt"), Alignment: weir.Unaligned, Timeout: time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
	defer cancel()
	var stored atomic.Int64
	cfg := weir.Config{Job: "chained", Checkpoint: cc, Restart: weir.NoRestart{}, Logger: quiet}
	runUntil(t, ctx, cfg, func(cfg weir.Config) *weir.Environment { return build(cfg, 2, true) }, func(ev weir.JobEvent) bool {
		if sum := channelStateAt(ev, "fmt"); sum > 0 {
			stored.Store(sum)
			return true
		}
		return false
	})
	t.Logf("the checkpoint restored holds %d bytes of channel state of fmt", stored.Load())
	cfg.Restore = "latest"
	if _, err := build(cfg, 1, false).Execute(ctx); err != nil {
		t.Fatal(err)
	}
	lines := committedLines(t, out)
	lost, dup := countOnce(lines, n)
	if lost+dup > 0 {
		t.Fatalf("restored with fmt chained to its source: %d of %d records lost, %d duplicated", lost, n, dup)
	}
}

// crawlingWriter slows a sink down, so that records wait in its input
// channels and unaligned checkpoints store them.
type crawlingWriter struct {
	weir.SinkWriter[string]
	crawl bool
	k     *atomic.Int64
	every int64 // records a millisecond's pause (0: 8)
	// slower, if set and true, makes every record pause slowPause (0: 5
	// ms): a backlog that must outlast the checkpoints a loaded machine
	// takes.
	slower    func() bool
	slowPause time.Duration
}

func (w *crawlingWriter) Write(v string) error {
	switch {
	case !w.crawl:
	case w.slower != nil && w.slower():
		time.Sleep(cmp.Or(w.slowPause, 5*time.Millisecond)) // back-pressure, as pace
	default:
		pace(w.k, cmp.Or(w.every, 8))
	}
	return w.SinkWriter.Write(v)
}

// pace sleeps a millisecond every n-th time k is counted: the crawl, back-
// pressure (not synchronisation), so that records wait in channels and
// unaligned checkpoints store them.
func pace(k *atomic.Int64, n int64) {
	if k.Add(1)%n == 0 {
		time.Sleep(time.Millisecond)
	}
}

// TestReviewGenSinkChannelStateRescaled: source (1) → fmt (a) → a crawling
// sink (b), rebalanced; unaligned checkpoints store the sink's backlog; the
// job is restored with fmt at a2 and the sink at b2. Every record must be
// committed exactly once. From TestReviewGen seed 297 (three results of a
// reduce lost, restored from a checkpoint with 51 bytes of the sink's
// channel state, sink 3 → 2, its upstream 2 → 1).
func TestReviewGenSinkChannelStateRescaled(t *testing.T) {
	for _, timeout := range []bool{false, true} {
		for _, failAt := range []int64{0, 1, 3000} {
			for _, c := range [][4]int{{2, 3, 2, 3}, {2, 3, 1, 3}, {2, 3, 2, 2}, {2, 3, 1, 2}, {1, 3, 1, 2}, {3, 3, 1, 1}} {
				t.Run(fmt.Sprint(c, " failure at ", failAt, " aligned timeout ", timeout), func(t *testing.T) { sinkChannelStateRescaled(t, c, failAt, timeout, true) })
			}
		}
	}
}

// TestReviewGenSinkChannelStateChainedByRescale: as above, but the edge
// fmt → sink is left to its default: rebalance while the parallelisms
// differ (fmt 2, sink 3), forward, and so chained, once the restore makes
// them equal (fmt 2, sink 2): the channel state stored under the sink's
// UID is replayed by no task. This is TestReviewGen seed 297's loss.
func TestReviewGenSinkChannelStateChainedByRescale(t *testing.T) {
	for _, c := range [][4]int{{2, 3, 2, 2}, {1, 3, 1, 1}, {2, 3, 3, 3}} {
		t.Run(fmt.Sprint(c), func(t *testing.T) { sinkChannelStateRescaled(t, c, 0, false, false) })
	}
}

func sinkChannelStateRescaled(t *testing.T, c [4]int, failAt int64, timeout, explicit bool) {
	failover := failAt > 0
	const n = 20_000
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	var k, seen atomic.Int64
	var panicked atomic.Bool
	build := func(cfg weir.Config, a, b int, crawl bool) *weir.Environment {
		e := weir.New(cfg)
		src := weir.Source(e, "nums", gen(t, n, func(i int64) int64 { return i }), weir.Parallelism(1))
		fmtd := weir.Map(src, "fmt", func(v int64) string {
			if failover && !crawl && seen.Add(1) == failAt && panicked.CompareAndSwap(false, true) {
				panic("injected failure after the restore")
			}
			return fmt.Sprint(v)
		}, weir.Parallelism(a), weir.NoChain())
		sink, err := file.Sink(file.SinkConfig[string]{Dir: out, Format: lineFormat})
		if err != nil {
			t.Fatal(err)
		}
		in := fmtd
		if explicit {
			in = weir.Rebalance(fmtd)
		}
		weir.Sink(in, "out", func() weir.SinkWriter[string] {
			return &crawlingWriter{SinkWriter: sink(), crawl: crawl, k: &k}
		}, weir.Parallelism(b))
		return e
	}
	cc := weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: filepath.Join(dir, "ckpt"), Alignment: weir.Unaligned, Timeout: time.Minute}
	if timeout {
		cc.Alignment, cc.AlignedTimeout = weir.Aligned, time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
	defer cancel()
	var stored atomic.Int64
	cfg := weir.Config{Job: "rescaled", BatchSize: 16, Checkpoint: cc, Restart: weir.NoRestart{}, Logger: genLogger()}
	runUntil(t, ctx, cfg, func(cfg weir.Config) *weir.Environment { return build(cfg, c[0], c[1], true) }, func(ev weir.JobEvent) bool {
		var sum int64
		for _, tt := range ev.Tasks {
			if strings.HasPrefix(tt.Task.String(), "out#") {
				sum += tt.ChannelState
			}
			if testing.Verbose() && tt.ChannelState > 0 {
				t.Logf("checkpoint %d: %v %d bytes", ev.ID, tt.Task, tt.ChannelState)
			}
		}
		if sum > 0 {
			stored.Store(sum)
			return true
		}
		return false
	})
	cfg.Restore, cfg.Restart = "latest", weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: 3}
	res, err := build(cfg, c[2], c[3], false).Execute(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if failover && res.Attempts < 2 {
		t.Fatalf("%d attempts: the failure did not fire", res.Attempts)
	}
	lines := committedLines(t, out)
	lost, dup := countOnce(lines, n)
	t.Logf("fmt %d → %d, sink %d → %d: the checkpoint restored holds %d bytes of the sink's channel state; %d lost, %d duplicated", c[0], c[2], c[1], c[3], stored.Load(), lost, dup)
	if lost+dup > 0 {
		t.Fatalf("%d of %d records lost, %d duplicated", lost, n, dup)
	}
}

// TestReviewGenReplayedOutputAfterFailover: an unaligned checkpoint stores
// the backlog of "fmt" (a crawling map, behind a source, NoChain so it
// stays a task's head); the job restores it, "fmt" replays the backlog
// and emits its results to the sink; the source chain fails at its
// failAt-th record after the restore, and the job fails over to the same
// checkpoint. From TestReviewGen seed 297.
func TestReviewGenReplayedOutputAfterFailover(t *testing.T) {
	for _, failAt := range []int64{0, 1, 100, 3000} {
		for _, p := range [][2]int{{2, 2}, {2, 1}, {1, 2}} {
			t.Run(fmt.Sprint(p, " failure at ", failAt), func(t *testing.T) { replayedOutputAfterFailover(t, p, failAt) })
		}
	}
}

func replayedOutputAfterFailover(t *testing.T, p [2]int, failAt int64) {
	const n = 20_000
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	var k, seen atomic.Int64
	var panicked atomic.Bool
	build := func(cfg weir.Config, par int, first bool) *weir.Environment {
		e := weir.New(cfg)
		src := weir.Source(e, "nums", gen(t, n, func(i int64) int64 { return i }), weir.Parallelism(1))
		pre := weir.Map(src, "pre", func(v int64) int64 {
			if !first && failAt > 0 && seen.Add(1) == failAt && panicked.CompareAndSwap(false, true) {
				panic("injected failure after the restore")
			}
			return v
		}, weir.Parallelism(1))
		fmtd := weir.Map(pre, "fmt", func(v int64) string {
			if first {
				pace(&k, 8)
			}
			return fmt.Sprint(v)
		}, weir.Parallelism(par), weir.NoChain())
		sink, err := file.Sink(file.SinkConfig[string]{Dir: out, Format: lineFormat})
		if err != nil {
			t.Fatal(err)
		}
		weir.Sink(fmtd, "out", sink, weir.Parallelism(par))
		return e
	}
	cc := weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: filepath.Join(dir, "ckpt"), Alignment: weir.Unaligned, Timeout: time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
	defer cancel()
	var stored atomic.Int64
	cfg := weir.Config{Job: "replayed", BatchSize: 16, Checkpoint: cc, Restart: weir.NoRestart{}, Logger: quiet}
	runUntil(t, ctx, cfg, func(cfg weir.Config) *weir.Environment { return build(cfg, p[0], true) }, func(ev weir.JobEvent) bool {
		if sum := channelStateAt(ev, "fmt"); sum > 0 {
			stored.Store(sum)
			return true
		}
		return false
	})
	cfg.Restore, cfg.Restart = "latest", weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: 3}
	res, err := build(cfg, p[1], false).Execute(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if failAt > 0 && res.Attempts < 2 {
		t.Fatalf("%d attempts: the failure did not fire", res.Attempts)
	}
	lines := committedLines(t, out)
	lost, dup := countOnce(lines, n)
	t.Logf("fmt %d → %d: %d bytes of fmt's channel state restored; %d attempts; %d lost, %d duplicated", p[0], p[1], stored.Load(), res.Attempts, lost, dup)
	if lost+dup > 0 {
		t.Fatalf("%d of %d records lost, %d duplicated", lost, n, dup)
	}
}

// genLogger is quiet unless GEN_LOG is set: then warnings and errors go to
// standard error.
// runUntil runs the job build makes of cfg until a checkpoint completes for
// which stopAt says true, and cancels it there: the job must outlast such a
// checkpoint.
func runUntil(t *testing.T, ctx context.Context, cfg weir.Config, build func(weir.Config) *weir.Environment, stopAt func(weir.JobEvent) bool) {
	t.Helper()
	first, stop := context.WithCancel(ctx)
	defer stop()
	cfg.OnEvent = func(ev weir.JobEvent) {
		if ev.Kind == weir.EventCheckpointCompleted && stopAt(ev) {
			stop()
		}
	}
	if _, err := build(cfg).Execute(first); !errors.Is(err, context.Canceled) {
		t.Fatalf("first run: %v (it must outlast a checkpoint that stops it)", err)
	}
}

// countOnce counts, of the records 0 to n-1 (as decimal lines), those
// not committed and those committed more than once.
func countOnce(lines map[string]int, n int64) (lost, dup int) {
	for i := range n {
		switch c := lines[fmt.Sprint(i)]; {
		case c == 0:
			lost++
		case c > 1:
			dup++
		}
	}
	return lost, dup
}

// channelStateAt is the channel state that the tasks of operator uid hold in
// checkpoint event ev.
func channelStateAt(ev weir.JobEvent, uid string) int64 {
	var sum int64
	for _, tt := range ev.Tasks {
		if strings.HasPrefix(tt.Task.String(), uid+"#") {
			sum += tt.ChannelState
		}
	}
	return sum
}

func genLogger() *slog.Logger {
	if os.Getenv("GEN_LOG") == "" {
		return quiet
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}
