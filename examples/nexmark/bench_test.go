package nexmark

import (
	"context"
	"log/slog"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

// BenchmarkQuery runs each query over b.N events (at least 100,000) at
// parallelism 2 with exactly-once checkpoints every second, results to a
// black hole, and reports events per CPU-second and allocations per event
// (setup included):
//
//	go test -run - -bench Query -benchtime 5000000x ./examples/nexmark
func BenchmarkQuery(b *testing.B) {
	for _, q := range Queries {
		b.Run(q.Name, func(b *testing.B) {
			events := max(int64(b.N), 100_000)
			env := weir.New(weir.Config{Job: "bench-" + q.Name, Parallelism: 2, Fresh: true, Logger: slog.New(slog.DiscardHandler),
				Checkpoint: weir.CheckpointConfig{Interval: time.Second, Dir: b.TempDir()}})
			if err := Add(env, Config{Events: events}, q, Output{}); err != nil {
				b.Fatal(err)
			}
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			cpu0 := cpuTime(b)
			b.ResetTimer()
			if _, err := env.Execute(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			runtime.ReadMemStats(&m1)
			b.ReportMetric(float64(events)/(cpuTime(b)-cpu0).Seconds(), "events/cpu-s")
			b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(events), "allocs/event")
			b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/float64(events), "B/event")
		})
	}
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
