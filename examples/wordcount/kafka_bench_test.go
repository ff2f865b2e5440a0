package wordcount

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir"
)

// BenchmarkKafkaWordCount counts the words of a topic of 1,000,000 lines
// (8 words each) into another topic, on kfake in this process, with
// parallelism 2: exactly-once (transactions, 1 s checkpoints), at least
// once (flush at 1 s checkpoints), and without checkpoints. It reports
// input records (lines) per second of wall time and per CPU-second of the
// whole process, broker included.
//
//	go test ./examples/wordcount -run '^$' -bench KafkaWordCount -benchtime 3x
func BenchmarkKafkaWordCount(b *testing.B) {
	const lines = 1_000_000
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "lines"))
	if err != nil {
		b.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("lines"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		b.Fatal(err)
	}
	for i := range lines {
		v := fmt.Sprintf("Word%d word%d Word%d word%d Word%d word%d Word%d word%d",
			i%2000, (i*7)%2000, (i*13)%2000, (i*31)%2000, (i*37)%2000, (i*41)%2000, (i*43)%2000, (i*47)%2000)
		cl.Produce(context.Background(), &kgo.Record{Value: []byte(v)}, nil)
	}
	if err := cl.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	cl.Close()
	// NB: a topic per run: b.Run calls its function more than once (b.N 1,
	// then the -benchtime), and a run into a topic another run wrote is
	// refused (its output is an earlier run's).
	runs := 0
	for _, c := range []struct {
		name, delivery string
		mode           weir.Mode
	}{
		{"exactly-once", "exactly-once", weir.ExactlyOnce},
		{"at-least-once", "at-least-once", weir.AtLeastOnce},
		{"none", "none", weir.NoCheckpoints},
	} {
		b.Run(c.name, func(b *testing.B) {
			var cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				runs++
				out := fmt.Sprintf("counts-%s-%d", c.name, runs)
				env, err := Build(Options{
					Input:  "kafka://" + brokers[0] + "/lines?bounded=true",
					Output: "kafka://" + brokers[0] + "/" + out + "?create=true&partitions=4&delivery=" + c.delivery, Parallelism: 2,
					Checkpoint: weir.CheckpointConfig{Mode: c.mode, Interval: time.Second, Dir: filepath.Join(b.TempDir(), "ckpt")},
					Logger:     slog.New(slog.DiscardHandler),
				})
				if err != nil {
					b.Fatal(err)
				}
				c0 := cpuTime()
				b.StartTimer()
				if _, err := env.Execute(context.Background()); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				cpu += cpuTime() - c0
				b.StartTimer()
			}
			records := float64(lines) * float64(b.N)
			b.ReportMetric(records/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(records/cpu.Seconds(), "records/cpu-s")
			b.ReportMetric(8*records/cpu.Seconds(), "words/cpu-s")
		})
	}
}
