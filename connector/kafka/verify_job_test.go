package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/generator"
	"github.com/weirstream/weir/connector/kafka"
)

// TestVerifyAJobWritingKafka: a job writing a Kafka topic exactly once,
// stopped midway twice (its open and pre-committed transactions left to the
// broker, the second run restoring the first's latest checkpoint at another
// parallelism), verifies
// clean each time at other parallelisms: its committed output equals a
// rerun's over the input its checkpoint consumed. A record written into the
// topic by another producer among the job's is reported, and only it.
func TestVerifyAJobWritingKafka(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	dir := t.TempDir()
	build := func(p int, restore string, onEvent func(weir.JobEvent)) *weir.Environment {
		src, err := generator.New(generator.Config[int64]{Count: 1_000_000, RatePerSecond: 20_000, Make: func(i int64) int64 { return i }})
		if err != nil {
			t.Fatal(err)
		}
		sink, err := kafka.Sink(kafka.SinkConfig[int64]{Brokers: brokers, Topic: "out", TransactionalIDs: 3, Encode: func(i int64) *kgo.Record {
			return &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%10), Value: fmt.Append(nil, i)}
		}})
		if err != nil {
			t.Fatal(err)
		}
		e := weir.New(weir.Config{Job: "numbers", Parallelism: p, Restore: restore, OnEvent: onEvent,
			Checkpoint: weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: filepath.Join(dir, "ckpt")}})
		weir.Sink(weir.Source(e, "numbers", src), "out", sink)
		return e
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	runUntil := func(p int, restore string, checkpoints int) {
		t.Helper()
		stop, cancelRun := context.WithCancel(ctx)
		defer cancelRun()
		n := 0
		e := build(p, restore, func(ev weir.JobEvent) {
			if ev.Kind == weir.EventCheckpointCompleted {
				if n++; n == checkpoints {
					cancelRun()
				}
			}
		})
		if _, err := e.Execute(stop); !errors.Is(err, context.Canceled) {
			t.Fatalf("the run: %v (the input must outlast its checkpoints)", err)
		}
	}
	verify := func(p int) weir.VerifyReport {
		t.Helper()
		rep, err := build(p, "", nil).Verify(ctx, weir.VerifyConfig{})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}

	runUntil(2, "", 3)
	if rep := verify(3); !rep.OK() || rep.Read == 0 || rep.Sinks[0].Committed != rep.Read {
		t.Fatalf("after the first run: %s", rep)
	}
	// Another producer's record, in a partition the job writes on into.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "out", Partition: 1, Key: []byte("k3"), Value: []byte("intruder")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	runUntil(3, "latest", 3) // rescaled
	rep := verify(1)
	v := rep.Sinks[0]
	want := []weir.RecordCount{{Record: `out "k3" "intruder"`, Times: 1}}
	if rep.OK() || rep.Read == 0 || v.Committed != rep.Read+1 || len(v.Missing)+len(v.Duplicated)+len(v.Changed) > 0 || !slices.Equal(v.Unexpected, want) {
		t.Fatalf("a record another producer wrote among the job's: %s", rep)
	}
}
