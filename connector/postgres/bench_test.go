package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/generator"
	"github.com/weirstream/weir/internal/pgtest"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSink writes 1,000,000 rows (100,000 distinct words) through a
// job of parallelism 1 with 1 s checkpoints into a local PostgreSQL, in
// both modes. It reports rows per second of wall time, and per CPU-second
// of this process (PostgreSQL's own CPU, on the same machine, is not
// counted there).
//
//	go test ./connector/postgres -run '^$' -bench Sink -benchtime 2x
func BenchmarkSink(b *testing.B) {
	pg := pgtest.Start(b)
	const rows = 1_000_000
	words := make([]string, 100_000)
	for i := range words {
		words[i] = fmt.Sprint("word", i)
	}
	for _, c := range []struct {
		mode   Mode
		create string
	}{
		{Upsert, "CREATE TABLE IF NOT EXISTS %s (word text PRIMARY KEY, count bigint NOT NULL)"},
		{ExactlyOnce, "CREATE TABLE IF NOT EXISTS %s (word text NOT NULL, count bigint NOT NULL)"},
	} {
		b.Run(c.mode.String(), func(b *testing.B) {
			var cpu time.Duration
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				table := fmt.Sprintf("bench_%d_%d", c.mode, i)
				env := weir.New(weir.Config{Job: "bench", Logger: slog.New(slog.DiscardHandler),
					Checkpoint: weir.CheckpointConfig{Interval: time.Second, Dir: filepath.Join(b.TempDir(), "ckpt")}})
				src, err := generator.New(generator.Config[count]{Count: rows, Make: func(i int64) count { return count{words[i%int64(len(words))], i} }})
				if err != nil {
					b.Fatal(err)
				}
				cfg := SinkConfig[count]{URL: pg.URL, Table: table, Mode: c.mode, CreateTable: fmt.Sprintf(c.create, table),
					Columns: []string{"word", "count"}, Row: func(c count) []any { return []any{c.Word, c.Count} }}
				if c.mode == Upsert {
					cfg.Key = []string{"word"}
				}
				sink, err := Sink(cfg)
				if err != nil {
					b.Fatal(err)
				}
				weir.Sink(weir.Source(env, "gen", src), "out", sink)
				c0 := cpuTime()
				b.StartTimer()
				if _, err := env.Execute(context.Background()); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				cpu += cpuTime() - c0
				b.StartTimer()
			}
			n := float64(rows) * float64(b.N)
			b.ReportMetric(n/b.Elapsed().Seconds(), "rows/s")
			b.ReportMetric(n/cpu.Seconds(), "rows/cpu-s")
		})
	}
}
