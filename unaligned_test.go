package weir_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/generator"
	"github.com/weirstream/weir/connector/stdio"
	"github.com/weirstream/weir/examples/wordcount"
)

// TestUnalignedRestoreAtAnotherParallelism: word count with unaligned
// checkpoints (or aligned ones that a 1 ms timeout switches) under
// back-pressure (the counter is slowed), stopped after checkpoints that
// hold channel state, restored at parallelism 2 → 3 → 1: every word
// counted exactly once.
func TestUnalignedRestoreAtAnotherParallelism(t *testing.T) {
	for _, cc := range []weir.CheckpointConfig{{Alignment: weir.Unaligned}, {AlignedTimeout: time.Millisecond}} {
		t.Run(fmt.Sprintf("%v-timeout-%v", cc.Alignment, cc.AlignedTimeout), func(t *testing.T) { rescaleWithChannelState(t, cc) })
	}
}

func rescaleWithChannelState(t *testing.T, cc weir.CheckpointConfig) {
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
		Checkpoint: cc}
	opts.Checkpoint.Interval, opts.Checkpoint.Dir = 20*time.Millisecond, filepath.Join(dir, "ckpt")
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

// crawlJob runs a job whose one busy operator is slowed to a crawl (all
// records go to one key), behind a back-pressured source, until stop says
// so from the job's checkpoint events; it returns them.
func crawlJob(t testing.TB, cc weir.CheckpointConfig, stop func(evs []weir.JobEvent) bool) []weir.JobEvent {
	return crawl(t, weir.Config{Checkpoint: cc}, stop)
}

// crawl is crawlJob with more of the job's configuration: cfg's
// checkpoint interval is set, its timeout 400 ms unless set, and events
// of restarts are kept too. Unless cfg.Checkpoint.TolerableFailures is
// negative (meaning 0), checkpoint failures are tolerated.
func crawl(t testing.TB, cfg weir.Config, stop func(evs []weir.JobEvent) bool) []weir.JobEvent {
	return runSlowed(t, cfg, func(numbers *weir.Stream[int64]) *weir.Stream[int64] {
		return weir.Reduce(weir.KeyBy(numbers, func(int64) int64 { return 0 }), "slow", func(a, b int64) int64 {
			time.Sleep(2 * time.Millisecond) // the crawl: 32 ms a batch, seconds for the backlog
			return a + b
		})
	}, stop)
}

// runSlowed runs the job pipeline makes of numbers, as crawl runs its own.
func runSlowed(t testing.TB, cfg weir.Config, pipeline func(*weir.Stream[int64]) *weir.Stream[int64], stop func(evs []weir.JobEvent) bool) []weir.JobEvent {
	t.Helper()
	// NB: polls of one batch (16 records).
	src, err := generator.New(generator.Config[int64]{Make: func(i int64) int64 { return i }, BatchSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var evs []weir.JobEvent
	cc := &cfg.Checkpoint
	cc.Interval = 100 * time.Millisecond
	if cc.TolerableFailures == 0 {
		cc.TolerableFailures = 1000
	} else if cc.TolerableFailures < 0 {
		cc.TolerableFailures = 0
	}
	if cc.Timeout == 0 {
		cc.Timeout = 400 * time.Millisecond
	}
	cfg.Job, cfg.Parallelism, cfg.BatchSize = "crawl", 2, 16
	cfg.OnEvent = func(ev weir.JobEvent) {
		if ev.Kind != weir.EventCheckpointCompleted && ev.Kind != weir.EventCheckpointAborted && ev.Kind != weir.EventRestarting {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if evs = append(evs, ev); stop(evs) {
			cancel()
		}
	}
	env := weir.New(cfg)
	weir.Sink(pipeline(weir.Source(env, "numbers", src)), "discard", stdio.Print(io.Discard, func(dst []byte, i int64) []byte { return dst }))
	done := make(chan error, 1)
	go func() {
		_, err := env.Execute(ctx)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the job ended with %v, want cancelled", err)
		}
	case <-time.After(2 * time.Minute):
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the job did not reach its end within 2 minutes; its checkpoint events: %v", summary(evs))
	}
	mu.Lock()
	defer mu.Unlock()
	return evs
}

func summary(evs []weir.JobEvent) []string {
	var out []string
	for _, ev := range evs {
		s := fmt.Sprintf("%d %v", ev.ID, ev.Kind)
		if ev.Kind == weir.EventCheckpointAborted {
			s += " " + ev.Reason.String()
		}
		out = append(out, s)
	}
	return out
}

// TestUnalignedCheckpointsCompleteUnderBackPressure: with one operator
// slowed to a crawl, aligned checkpoints expire (their barriers wait behind
// seconds of backlog), while unaligned ones complete, holding the backlog
// as channel state.
func TestUnalignedCheckpointsCompleteUnderBackPressure(t *testing.T) {
	expired := func(evs []weir.JobEvent) int {
		n := 0
		for _, ev := range evs {
			if ev.Kind == weir.EventCheckpointAborted && ev.Reason.String() == "expired" {
				n++
			}
		}
		return n
	}
	aligned := crawlJob(t, weir.CheckpointConfig{}, func(evs []weir.JobEvent) bool { return expired(evs) >= 3 })
	t.Logf("aligned: %v", summary(aligned))

	withState := func(ev weir.JobEvent) bool {
		var cs int64
		for _, tt := range ev.Tasks {
			cs += tt.ChannelState
		}
		return ev.Kind == weir.EventCheckpointCompleted && cs > 0
	}
	for _, cc := range []weir.CheckpointConfig{{Alignment: weir.Unaligned}, {AlignedTimeout: 10 * time.Millisecond}} {
		switched := 0
		evs := crawlJob(t, cc, func(evs []weir.JobEvent) bool {
			n := 0
			for _, ev := range evs {
				if withState(ev) {
					n++
				}
			}
			return n >= 5
		})
		for _, ev := range evs {
			for _, tt := range ev.Tasks {
				if tt.Switched {
					switched++
				}
			}
		}
		t.Logf("%v, aligned timeout %v: %v; %d task snapshots switched", cc.Alignment, cc.AlignedTimeout, summary(evs), switched)
		if n := expired(evs); n > 0 {
			t.Errorf("%v, aligned timeout %v: %d checkpoints expired: %v", cc.Alignment, cc.AlignedTimeout, n, summary(evs))
		}
		if cc.AlignedTimeout > 0 && switched == 0 {
			t.Errorf("aligned timeout %v: no task's checkpoint switched to unaligned", cc.AlignedTimeout)
		}
	}
}

// TestReplayComesBeforeTheFirstCheckpoint: a restore replays seconds of
// channel state behind a crawling operator, longer than the checkpoint
// timeout, with no checkpoint failure tolerated. Checkpoints start once the
// replay is done: they complete, and the job does not fail over (it used
// to: the first checkpoint expired behind the replay, the job restarted
// and replayed again).
func TestReplayComesBeforeTheFirstCheckpoint(t *testing.T) {
	dir := t.TempDir()
	cc := weir.CheckpointConfig{Alignment: weir.Unaligned, Dir: dir}
	var stored int64
	crawl(t, weir.Config{Checkpoint: cc}, func(evs []weir.JobEvent) bool {
		ev := evs[len(evs)-1]
		stored = 0
		for _, tt := range ev.Tasks {
			stored += tt.ChannelState
		}
		// About 4 bytes a record, 2 ms each: over half a second to replay.
		return ev.Kind == weir.EventCheckpointCompleted && stored > 1500
	})
	cc.Timeout, cc.TolerableFailures = 300*time.Millisecond, -1
	completed := 0
	evs := crawl(t, weir.Config{Checkpoint: cc, Restore: "latest"}, func(evs []weir.JobEvent) bool {
		ev := evs[len(evs)-1]
		if ev.Kind == weir.EventCheckpointCompleted {
			completed++
		}
		return ev.Kind == weir.EventRestarting || completed == 3
	})
	if completed < 3 || slices.ContainsFunc(evs, func(ev weir.JobEvent) bool { return ev.Kind == weir.EventRestarting }) {
		t.Fatalf("after restoring %d bytes of channel state: %v", stored, summary(evs))
	}
	t.Logf("after restoring %d bytes of channel state: %v", stored, summary(evs))
}

// BenchmarkCheckpointsUnderBackPressure: the crawling job's checkpoints,
// aligned, unaligned and aligned with a 100 ms timeout, each without and
// with buffer debloating to a 100 ms target, side by side: the durations
// (trigger to completion) of 20 completed checkpoints, p50 and p99 (of 20:
// the slowest), and their mean size and channel state (an unaligned
// checkpoint's is the data in flight when it was taken).
//
//	go test -run '^$' -bench CheckpointsUnderBackPressure -benchtime 1x .
func BenchmarkCheckpointsUnderBackPressure(b *testing.B) {
	for _, c := range []struct {
		name string
		cc   weir.CheckpointConfig
	}{
		{"aligned", weir.CheckpointConfig{}},
		{"unaligned", weir.CheckpointConfig{Alignment: weir.Unaligned}},
		{"aligned-timeout-100ms", weir.CheckpointConfig{AlignedTimeout: 100 * time.Millisecond}},
	} {
		for _, debloat := range []time.Duration{0, 100 * time.Millisecond} {
			name := c.name
			if debloat > 0 {
				name += "/debloat-" + debloat.String()
			}
			b.Run(name, func(b *testing.B) { benchmarkCrawl(b, weir.Config{Checkpoint: c.cc, BufferDebloat: debloat}) })
		}
	}
}

func benchmarkCrawl(b *testing.B, cfg weir.Config) {
	for b.Loop() {
		cfg.Checkpoint.Timeout = time.Minute
		evs := crawl(b, cfg, func(evs []weir.JobEvent) bool {
			n := 0
			for _, ev := range evs {
				if ev.Kind == weir.EventCheckpointCompleted {
					n++
				}
			}
			return n >= 20
		})
		var durs []time.Duration
		var size, channel int64
		for _, ev := range evs {
			if ev.Kind != weir.EventCheckpointCompleted {
				continue
			}
			durs = append(durs, ev.Duration)
			size += ev.Size
			for _, tt := range ev.Tasks {
				channel += tt.ChannelState
			}
		}
		slices.Sort(durs)
		b.ReportMetric(float64(durs[len(durs)/2].Milliseconds()), "p50-ms")
		b.ReportMetric(float64(durs[len(durs)-1].Milliseconds()), "p99-ms")
		b.ReportMetric(float64(size)/float64(len(durs)), "bytes/checkpoint")
		b.ReportMetric(float64(channel)/float64(len(durs)), "channel-bytes/checkpoint")
	}
}

// TestUnalignedBarrierPassesABackPressuredTask: between the source and an
// operator slowed to a crawl sits a task that emits ten batches for each it
// takes: it is back-pressured, and a task waiting in a push takes no
// barrier, so its outputs force what has no room and it waits for room
// between batches instead, taking barriers meanwhile (elastic outputs).
// Unaligned checkpoints complete within their 400 ms timeout.
func TestUnalignedBarrierPassesABackPressuredTask(t *testing.T) {
	completed := 0
	evs := runSlowed(t, weir.Config{Checkpoint: weir.CheckpointConfig{Alignment: weir.Unaligned}}, func(numbers *weir.Stream[int64]) *weir.Stream[int64] {
		fanned := weir.FlatMap(weir.Rebalance(numbers), "fan", func(i int64, out weir.Collector[int64]) {
			for j := range int64(10) {
				out.Collect(i*10 + j)
			}
		})
		return weir.Reduce(weir.KeyBy(fanned, func(int64) int64 { return 0 }), "slow", func(a, b int64) int64 {
			time.Sleep(time.Millisecond) // the crawl: 16 ms a batch, 160 ms for what "fan" emits from one
			return a + b
		})
	}, func(evs []weir.JobEvent) bool {
		if evs[len(evs)-1].Kind == weir.EventCheckpointCompleted {
			completed++
		}
		return completed == 5
	})
	for _, ev := range evs {
		if ev.Kind == weir.EventCheckpointAborted && ev.Reason.String() == "expired" {
			t.Fatalf("a checkpoint expired: %v", summary(evs))
		}
	}
	t.Logf("%v", summary(evs))
}
