package wordcount

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

var (
	benchOnce  sync.Once
	benchDir   string
	benchWords int64
)

// TestMain removes the benchmarks' corpus when the tests end.
func TestMain(m *testing.M) {
	code := m.Run()
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	os.Exit(code)
}

// benchCorpus writes, once per process, 8 files of 250,000 lines (16
// million words over a 2,000-word vocabulary).
func benchCorpus(b *testing.B) string {
	benchOnce.Do(func() {
		dir, err := os.MkdirTemp("", "weir-bench-")
		if err != nil {
			b.Fatal(err)
		}
		benchDir = dir
		want, err := WriteBenchCorpus(dir, 8, 250_000)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range want {
			benchWords += n
		}
	})
	return benchDir
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWordCount reports words per second of wall time, words per
// second of CPU time (per core actually used), allocations per word, the
// p50 and p99 checkpoint duration (trigger to completion) and the longest
// synchronous snapshot part of any task.
//
//	go test ./examples/wordcount -run '^$' -bench WordCount -benchtime 3x
func BenchmarkWordCount(b *testing.B) {
	for _, c := range []struct {
		name     string
		mode     weir.Mode
		interval time.Duration
		pebble   bool
	}{
		{"checkpoints=off", weir.NoCheckpoints, 0, false},
		{"checkpoints=1s", weir.ExactlyOnce, time.Second, false},
		{"checkpoints=100ms", weir.ExactlyOnce, 100 * time.Millisecond, false},
		{"pebble/checkpoints=1s", weir.ExactlyOnce, time.Second, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			in := benchCorpus(b)
			var durations []time.Duration
			var syncMax time.Duration
			var mallocs uint64
			var cpu time.Duration
			var ms goruntime.MemStats
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				out := filepath.Join(b.TempDir(), fmt.Sprint("out", i))
				var sb weir.StateBackend
				if c.pebble {
					sb = weir.StateBackend{Kind: weir.PebbleState, Dir: b.TempDir()}
				}
				env, err := Build(Options{Input: filepath.Join(in, "in-*.txt"), Output: out, Parallelism: 2, StateBackend: sb,
					Checkpoint: weir.CheckpointConfig{Mode: c.mode, Interval: c.interval, Dir: filepath.Join(b.TempDir(), "ckpt")}})
				if err != nil {
					b.Fatal(err)
				}
				goruntime.ReadMemStats(&ms)
				m0, c0 := ms.Mallocs, cpuTime()
				b.StartTimer()
				res, err := env.Execute(context.Background())
				b.StopTimer()
				goruntime.ReadMemStats(&ms)
				mallocs += ms.Mallocs - m0
				cpu += cpuTime() - c0
				if err != nil {
					b.Fatal(err)
				}
				durations = append(durations, res.Durations...)
				syncMax = max(syncMax, res.MaxSyncSnapshot)
				os.RemoveAll(out)
				b.StartTimer()
			}
			words := float64(benchWords) * float64(b.N)
			b.ReportMetric(words/b.Elapsed().Seconds(), "words/s")
			b.ReportMetric(words/cpu.Seconds(), "words/cpu-s")
			b.ReportMetric(float64(mallocs)/words, "allocs/word")
			if len(durations) > 0 {
				slices.Sort(durations)
				b.ReportMetric(float64(durations[len(durations)/2].Microseconds())/1000, "ckpt-p50-ms")
				b.ReportMetric(float64(durations[len(durations)*99/100].Microseconds())/1000, "ckpt-p99-ms")
				b.ReportMetric(float64(len(durations))/float64(b.N), "ckpts/run")
				b.ReportMetric(float64(syncMax.Microseconds())/1000, "sync-max-ms")
			}
		})
	}
}
