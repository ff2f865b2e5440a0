package weir_test

// Outside review of afd8b93: attacks on the replay of channel state into
// operators a restore chains to their upstream.

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/internal/transport"
)

// chainReviewChainCollapse: src(1) → a → b → out, every edge left to its default
// (rebalance while parallelisms differ, forward and chained once equal);
// the sink crawls, so channel state piles up at a, b and out. The restore
// changes parallelisms so that several of them chain at once.
func TestChainReviewChainCollapse(t *testing.T) {
	for _, c := range [][6]int{
		{2, 3, 2, 1, 1, 1}, // all into the source's task
		{2, 3, 2, 2, 2, 2}, // a, b, out chained behind the source
		{2, 3, 2, 1, 3, 3}, // src-a chained; b-out chained
		{2, 3, 2, 2, 2, 3},
		{3, 2, 3, 1, 1, 2},
	} {
		for _, failAt := range []int64{0, 1, 2500} {
			t.Run(fmt.Sprint(c, " failure at ", failAt), func(t *testing.T) { chainReviewChainCollapse(t, c, failAt) })
		}
	}
}

func chainReviewChainCollapse(t *testing.T, c [6]int, failAt int64) {
	const n = 20_000
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	var k, seen atomic.Int64
	var panicked atomic.Bool
	build := func(cfg weir.Config, pa, pb, ps int, first bool) *weir.Environment {
		e := weir.New(cfg)
		src := weir.Source(e, "nums", gen(t, n, func(i int64) int64 { return i }), weir.Parallelism(1))
		a := weir.Map(src, "a", func(v int64) int64 {
			if !first && failAt > 0 && seen.Add(1) == failAt && panicked.CompareAndSwap(false, true) {
				panic("injected failure after the restore")
			}
			return v * 3
		}, weir.Parallelism(pa))
		b := weir.Map(a, "b", func(v int64) string { return fmt.Sprint(v / 3) }, weir.Parallelism(pb))
		sink, err := file.Sink(file.SinkConfig[string]{Dir: out, Format: lineFormat})
		if err != nil {
			t.Fatal(err)
		}
		weir.Sink(b, "out", func() weir.SinkWriter[string] {
			return &crawlingWriter{SinkWriter: sink(), crawl: first, k: &k}
		}, weir.Parallelism(ps))
		return e
	}
	cc := weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: filepath.Join(dir, "ckpt"), Alignment: weir.Unaligned, Timeout: time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
	defer cancel()
	var where atomic.Value
	cfg := weir.Config{Job: "collapse", BatchSize: 16, Checkpoint: cc, Restart: weir.NoRestart{}, Logger: genLogger()}
	runUntil(t, ctx, cfg, func(cfg weir.Config) *weir.Environment { return build(cfg, c[0], c[1], c[2], true) }, func(ev weir.JobEvent) bool {
		if at := channelStateByOperator(ev); len(at) >= 2 {
			where.Store(fmt.Sprint(at))
			return true
		}
		return false
	})
	cfg.Restore, cfg.Restart = "latest", weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: 3}
	res, err := build(cfg, c[3], c[4], c[5], false).Execute(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if failAt > 0 && res.Attempts < 2 {
		t.Fatalf("%d attempts: the failure did not fire", res.Attempts)
	}
	lines := committedLines(t, out)
	lost, dup := countOnce(lines, n)
	t.Logf("%v: channel state restored %v; %d attempts; %d lost, %d duplicated", c, where.Load(), res.Attempts, lost, dup)
	if lost+dup > 0 || len(lines) != n {
		t.Fatalf("%d of %d records lost, %d duplicated, %d distinct lines", lost, n, dup, len(lines))
	}
}

// TestChainReviewChainedEventTime: a timed source (1) → tag (2, crawling) → keyed
// tumbling count → sink. Channel state at tag holds timed records; the
// restore chains tag to the source (parallelism 1). Every window of every
// key must count each of its records once.
func TestChainReviewChainedEventTime(t *testing.T) {
	for _, p := range [][2]int{{2, 1}, {3, 1}, {2, 2}} {
		t.Run(fmt.Sprint(p), func(t *testing.T) { chainReviewChainedEventTime(t, p) })
	}
}

func chainReviewChainedEventTime(t *testing.T, p [2]int) {
	const n = 20_000
	const keys = 4
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	var k atomic.Int64
	build := func(cfg weir.Config, pt int, crawl bool) *weir.Environment {
		e := weir.New(cfg)
		src := weir.Source(e, "nums", gen(t, n, func(i int64) int64 { return i }), weir.Parallelism(1),
			weir.Watermarks(weir.Monotonous(func(v int64) time.Time { return time.UnixMilli(v) })))
		tag := weir.Map(src, "tag", func(v int64) int64 {
			if crawl {
				pace(&k, 8)
			}
			return v
		}, weir.Parallelism(pt))
		win := weir.WindowAggregate(weir.Window(weir.KeyBy(tag, func(v int64) int64 { return v % keys }), weir.Tumbling(100*time.Millisecond)), "count", weir.Count[int64](), weir.Parallelism(2))
		f := weir.Map(win, "fmt", func(r weir.WindowResult[int64, int64]) string {
			return fmt.Sprintf("%d@%d=%d", r.Key, r.Window.Start.UnixMilli(), r.Value)
		}, weir.Parallelism(2))
		sink, err := file.Sink(file.SinkConfig[string]{Dir: out, Format: lineFormat})
		if err != nil {
			t.Fatal(err)
		}
		weir.Sink(f, "out", sink, weir.Parallelism(2))
		return e
	}
	cc := weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: filepath.Join(dir, "ckpt"), Alignment: weir.Unaligned, Timeout: time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
	defer cancel()
	var stored atomic.Int64
	cfg := weir.Config{Job: "timed", BatchSize: 16, Checkpoint: cc, Restart: weir.NoRestart{}, Logger: genLogger()}
	runUntil(t, ctx, cfg, func(cfg weir.Config) *weir.Environment { return build(cfg, p[0], true) }, func(ev weir.JobEvent) bool {
		if sum := channelStateAt(ev, "tag"); sum > 0 {
			stored.Store(sum)
			return true
		}
		return false
	})
	cfg.Restore = "latest"
	if _, err := build(cfg, p[1], false).Execute(ctx); err != nil {
		t.Fatal(err)
	}
	lines := committedLines(t, out)
	var bad []string
	for key := int64(0); key < keys; key++ {
		for start := int64(0); start < n; start += 100 {
			want := fmt.Sprintf("%d@%d=%d", key, start, 100/keys)
			if c := lines[want]; c != 1 {
				bad = append(bad, fmt.Sprintf("%s ×%d", want, c))
			}
			delete(lines, want)
		}
	}
	for l, c := range lines {
		bad = append(bad, fmt.Sprintf("unexpected %s ×%d", l, c))
	}
	t.Logf("tag %d → %d: %d bytes of tag's channel state restored; %d problems", p[0], p[1], stored.Load(), len(bad))
	if len(bad) > 0 {
		t.Fatalf("%d problems: %v", len(bad), bad[:min(len(bad), 20)])
	}
}

// TestChainReviewChainedReplayInACluster: the first run (in-process) stores channel
// state at fmt (2, behind a source of 1); the restore runs in a cluster of a
// coordinator and two workers, fmt at parallelism p, so chained to the
// source when p is 1: a worker's source task replays it.
func TestChainReviewChainedReplayInACluster(t *testing.T) {
	for _, p := range []int{1, 2} {
		t.Run(fmt.Sprint(p), func(t *testing.T) { chainReviewChainedReplayInACluster(t, p) })
	}
}

func chainReviewChainedReplayInACluster(t *testing.T, p int) {
	const n = 20_000
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	var k atomic.Int64
	build := func(cfg weir.Config, p int, crawl bool) *weir.Environment {
		e := weir.New(cfg)
		src := weir.Source(e, "nums", gen(t, n, func(i int64) int64 { return i }), weir.Parallelism(1))
		fmtd := weir.Map(src, "fmt", func(v int64) string {
			if crawl {
				pace(&k, 8)
			}
			return fmt.Sprint(v)
		}, weir.Parallelism(p))
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
	cfg := weir.Config{Job: "chained", BatchSize: 16, Checkpoint: cc, Restart: weir.NoRestart{}, Logger: genLogger()}
	runUntil(t, ctx, cfg, func(cfg weir.Config) *weir.Environment { return build(cfg, 2, true) }, func(ev weir.JobEvent) bool {
		if sum := channelStateAt(ev, "fmt"); sum > 0 {
			stored.Store(sum)
			return true
		}
		return false
	})
	certs := filepath.Join(dir, "certs")
	if err := transport.WriteCerts(certs, []string{"coordinator", "worker-1", "worker-2"}, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	cfg.Restore = "latest"
	execute := func(cl weir.ClusterConfig) error {
		cl.Certs = certs
		cl.HeartbeatInterval, cl.HeartbeatTimeout = 200*time.Millisecond, 3*time.Second
		c := cfg
		c.Cluster = cl
		_, err := build(c, p, false).Execute(ctx)
		return err
	}
	listening := make(chan string, 1)
	coordinator := make(chan error, 1)
	go func() {
		coordinator <- execute(weir.ClusterConfig{Role: weir.Coordinator, Listen: "127.0.0.1:0", OnListen: func(addr string) { listening <- addr }})
	}()
	var addr string
	select {
	case addr = <-listening:
	case err := <-coordinator:
		t.Fatalf("coordinator: %v", err)
	}
	workers := make(chan error, 2)
	for _, name := range []string{"worker-1", "worker-2"} {
		go func() {
			workers <- execute(weir.ClusterConfig{Role: weir.Worker, Join: addr, Name: name, Listen: "127.0.0.1:0", Slots: 4})
		}()
	}
	if err := <-coordinator; err != nil {
		t.Fatalf("coordinator: %v", err)
	}
	for range 2 {
		if err := <-workers; err != nil {
			t.Logf("worker: %v", err)
		}
	}
	lines := committedLines(t, out)
	lost, dup := countOnce(lines, n)
	t.Logf("fmt 2 → %d in a cluster: %d bytes of fmt's channel state; %d lost, %d duplicated", p, stored.Load(), lost, dup)
	if lost+dup > 0 {
		t.Fatalf("%d of %d records lost, %d duplicated", lost, n, dup)
	}
}

// TestChainReviewSinkChainedByRescaleTimeoutFailover: the review's
// sinkChannelStateRescaled with the default edge (chained by the restore),
// in the aligned-timeout mode too, and with a failure right after the
// restore (before the first new checkpoint) and later.
func TestChainReviewSinkChainedByRescaleTimeoutFailover(t *testing.T) {
	for _, timeout := range []bool{false, true} {
		for _, failAt := range []int64{1, 40, 3000} {
			for _, c := range [][4]int{{2, 3, 2, 2}, {1, 3, 1, 1}, {2, 3, 3, 3}} {
				t.Run(fmt.Sprint(c, " failure at ", failAt, " timeout ", timeout), func(t *testing.T) { sinkChannelStateRescaled(t, c, failAt, timeout, false) })
			}
		}
	}
}

// TestChainReviewKeyedHeadChainedTail: src(1) → keyBy → running sum (r) → fmt (f) →
// sink (s), fmt and sink on default edges, the sink crawling. Per key the
// running sums are deterministic (one channel from the source to each
// reduce subtask), so the committed lines must be exactly every key's prefix
// sums, once. Restores chain fmt and the sink behind the keyed reduce.
func TestChainReviewKeyedHeadChainedTail(t *testing.T) {
	for _, c := range [][6]int{
		{2, 3, 1, 2, 2, 2},
		{2, 3, 2, 3, 3, 3},
		{3, 1, 2, 2, 2, 2},
		{2, 3, 1, 1, 1, 1},
	} {
		t.Run(fmt.Sprint(c), func(t *testing.T) { chainReviewKeyedHeadChainedTail(t, c) })
	}
}

func chainReviewKeyedHeadChainedTail(t *testing.T, c [6]int) {
	const n = 20_000
	const keys = 7
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	var k atomic.Int64
	type kv struct{ K, V int64 }
	build := func(cfg weir.Config, pr, pf, ps int, first bool) *weir.Environment {
		e := weir.New(cfg)
		src := weir.Source(e, "nums", gen(t, n, func(i int64) kv { return kv{i % keys, i} }), weir.Parallelism(1))
		sum := weir.Reduce(weir.KeyBy(src, func(v kv) int64 { return v.K }), "sum", func(a, b kv) kv { return kv{a.K, a.V + b.V} }, weir.Parallelism(pr))
		f := weir.Map(sum, "fmt", func(v kv) string { return fmt.Sprintf("%d:%d", v.K, v.V) }, weir.Parallelism(pf))
		sink, err := file.Sink(file.SinkConfig[string]{Dir: out, Format: lineFormat})
		if err != nil {
			t.Fatal(err)
		}
		weir.Sink(f, "out", func() weir.SinkWriter[string] {
			return &crawlingWriter{SinkWriter: sink(), crawl: first, k: &k}
		}, weir.Parallelism(ps))
		return e
	}
	cc := weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: filepath.Join(dir, "ckpt"), Alignment: weir.Unaligned, Timeout: time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
	defer cancel()
	var where atomic.Value
	cfg := weir.Config{Job: "keyed", BatchSize: 16, Checkpoint: cc, Restart: weir.NoRestart{}, Logger: genLogger()}
	runUntil(t, ctx, cfg, func(cfg weir.Config) *weir.Environment { return build(cfg, c[0], c[1], c[2], true) }, func(ev weir.JobEvent) bool {
		if at := channelStateByOperator(ev); len(at) >= 2 {
			where.Store(fmt.Sprint(at))
			return true
		}
		return false
	})
	cfg.Restore = "latest"
	if _, err := build(cfg, c[3], c[4], c[5], false).Execute(ctx); err != nil {
		t.Fatal(err)
	}
	lines := committedLines(t, out)
	want := map[string]bool{}
	sums := make([]int64, keys)
	for i := range int64(n) {
		sums[i%keys] += i
		want[fmt.Sprintf("%d:%d", i%keys, sums[i%keys])] = true
	}
	var bad []string
	for l := range want {
		if lines[l] != 1 {
			bad = append(bad, fmt.Sprintf("%s ×%d", l, lines[l]))
		}
	}
	for l, c := range lines {
		if !want[l] {
			bad = append(bad, fmt.Sprintf("unexpected %s ×%d", l, c))
		}
	}
	t.Logf("%v: channel state %v; %d problems", c, where.Load(), len(bad))
	if len(bad) > 0 {
		t.Fatalf("%d problems: %v", len(bad), bad[:min(len(bad), 20)])
	}
}

// TestChainReviewChainedReplayAfterTheSourceEnded: the checkpoint restored was
// taken after the source had read all its input (it holds the source's
// end), with the sink's backlog in its channel state; the restore chains
// the sink into the source's task, which replays it and then finds its
// input ended. Every record must be committed once, by the final
// checkpoint.
func TestChainReviewChainedReplayAfterTheSourceEnded(t *testing.T) {
	for _, p := range [][2]int{{2, 1}, {3, 1}, {2, 2}} {
		t.Run(fmt.Sprint(p), func(t *testing.T) { chainReviewChainedReplayAfterTheSourceEnded(t, p) })
	}
}

func chainReviewChainedReplayAfterTheSourceEnded(t *testing.T, p [2]int) {
	const n = 3000
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	var read atomic.Int64
	build := func(cfg weir.Config, ps int, crawl bool) *weir.Environment {
		e := weir.New(cfg)
		src := weir.Source(e, "nums", gen(t, n, func(i int64) int64 { return i }), weir.Parallelism(1))
		fmtd := weir.Map(src, "fmt", func(v int64) string { read.Add(1); return fmt.Sprint(v) }, weir.Parallelism(1))
		sink, err := file.Sink(file.SinkConfig[string]{Dir: out, Format: lineFormat})
		if err != nil {
			t.Fatal(err)
		}
		var k atomic.Int64
		weir.Sink(fmtd, "out", func() weir.SinkWriter[string] {
			// Once the source has ended, the sink's backlog (a few hundred
			// records) must outlast a checkpoint under -race on a loaded
			// machine: it crawls slower, 25 ms a record (with 5 ms, CI saw
			// the two sink subtasks of [2 2] drain it first, and the run
			// end before its premise).
			return &crawlingWriter{SinkWriter: sink(), crawl: crawl, k: &k, every: 1, slower: func() bool { return read.Load() >= n }, slowPause: 25 * time.Millisecond}
		}, weir.Parallelism(ps))
		return e
	}
	cc := weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: filepath.Join(dir, "ckpt"), Alignment: weir.Unaligned, Timeout: time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
	defer cancel()
	var stored atomic.Int64
	cfg := weir.Config{Job: "ended", BatchSize: 16, Checkpoint: cc, Restart: weir.NoRestart{}, Logger: genLogger()}
	runUntil(t, ctx, cfg, func(cfg weir.Config) *weir.Environment { return build(cfg, p[0], true) }, func(ev weir.JobEvent) bool {
		if read.Load() < n {
			return false
		}
		if sum := channelStateAt(ev, "out"); sum > 0 {
			stored.Store(sum)
			return true
		}
		return false
	})
	cfg.Restore = "latest"
	if _, err := build(cfg, p[1], false).Execute(ctx); err != nil {
		t.Fatal(err)
	}
	lines := committedLines(t, out)
	lost, dup := countOnce(lines, n)
	t.Logf("sink %d → %d: %d bytes of the sink's channel state after the source's end; %d lost, %d duplicated", p[0], p[1], stored.Load(), lost, dup)
	if lost+dup > 0 {
		t.Fatalf("%d of %d records lost, %d duplicated", lost, n, dup)
	}
}

// channelStateByOperator is the channel state the tasks of each operator
// hold in checkpoint event ev, for the operators that hold some.
func channelStateByOperator(ev weir.JobEvent) map[string]int64 {
	at := map[string]int64{}
	for _, tt := range ev.Tasks {
		if tt.ChannelState > 0 {
			at[strings.Split(tt.Task.String(), "#")[0]] += tt.ChannelState
		}
	}
	return at
}
