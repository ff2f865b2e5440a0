package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestRev4RestoreAfterATopicOfTheRegexWasDeleted: a source subscribed by
// regex (events-.*) read events-1 and events-2; events-1 is deleted
// (retired daily topics are). The restore must still open and read
// events-2. The first version of skipDeleted asked for the start offsets
// of every restored partition, and one gone failed Open, on every restart
// (a review of the fix, session 33).
func TestRev4RestoreAfterATopicOfTheRegexWasDeleted(t *testing.T) {
	brokers := broker(t, "events-1", "events-2")
	produce(t, brokers, "events-1", "", values("a", 6)...)
	produce(t, brokers, "events-2", "", values("b", 6)...)
	newReader, err := Source(SourceConfig[string]{Brokers: brokers, TopicRegex: "events-.*", Decode: StringValue, DiscoveryInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	run := &operatortest.Run{}
	defer run.Close()
	w := &operatortest.MemWriter{}
	r := newReader()
	if err := r.Open(run.Context("kafka", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	var got collected
	for len(got) < 12 {
		readFor(t, r, &got, 20*time.Millisecond)
	}
	hs := snapshot(t, r, 1, w)
	r.Close()
	cl, _ := kgo.NewClient(kgo.SeedBrokers(brokers...))
	defer cl.Close()
	if _, err := kadm.NewClient(cl).DeleteTopics(context.Background(), "events-1"); err != nil {
		t.Fatal(err)
	}
	produce(t, brokers, "events-2", "", values("c", 6)...)
	r = newReader()
	if err := r.Open(run.Context("kafka", 0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read})); err != nil {
		t.Fatalf("restore after events-1 was deleted: permanent=%v: %v", operator.IsPermanent(err), err)
	}
	defer r.Close()
	got = nil
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < 6 && time.Now().Before(deadline) {
		readFor(t, r, &got, 20*time.Millisecond)
	}
	if len(got) != 6 {
		t.Fatalf("read %d of events-2's 6 new records", len(got))
	}
}
