package kafka

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/weirstream/weir"
)

// With a checkpoint min pause, a transaction opened just after
// checkpoint n's snapshot is pre-committed only at checkpoint n+1, which is
// triggered no sooner than MinPause after n completes. A 20-minute min
// pause therefore keeps every transaction open for over 20 minutes, past
// the 15-minute transaction timeout: the broker aborts it and its records
// are lost. The sink's check must count it, through the runtime's
// CommitWait (it had no such field; found by an outside review).
func TestMinPauseIsCountedInTheTransactionBound(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "one"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	produce(t, brokers, "one", "", values("r", 50)...)
	src, err := Source(SourceConfig[string]{Brokers: brokers, Topics: []string{"one"}, Bounded: true, Decode: StringValue})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "copy", Encode: encode, CreateTopic: true, TransactionTimeout: 15 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	env := weir.New(weir.Config{Job: "copy", Parallelism: 1, Checkpoint: weir.CheckpointConfig{
		Interval: time.Second, Timeout: time.Minute, MinPause: 20 * time.Minute, Dir: t.TempDir()}})
	weir.Sink(weir.Source(env, "in", src), "out", sink)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = env.Execute(ctx)
	if err == nil || !strings.Contains(err.Error(), "transaction timeout") {
		t.Fatalf("a 15m transaction timeout with a 20m checkpoint min pause was accepted (the run: %v)", err)
	}
}
