package main

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaServeCreatesTopicsOnProduce: `weir kafka serve` creates a topic
// when a client first produces to it, as its --help says and as a broker
// with Kafka's default auto.create.topics.enable does.
func TestKafkaServeCreatesTopicsOnProduce(t *testing.T) {
	addr := serveKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	producer, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	if err := producer.ProduceSync(ctx, &kgo.Record{Topic: "new-topic", Value: []byte("hello")}).FirstErr(); err != nil {
		t.Fatalf("produce to a topic that did not exist: %v", err)
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("new-topic"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	for {
		fs := consumer.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatal("the record produced was never read back")
		}
		for _, r := range fs.Records() {
			if string(r.Value) != "hello" {
				t.Fatalf("read %q, want hello", r.Value)
			}
			return
		}
	}
}
