package kafka

// Found by an outside review of session 35's fixes.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestTopicCreatedWhileDownIsReadFromItsStart: a source of TopicRegex
// "ev-.*" with Start Latest and discovery on. A running job reads a topic
// that appears later from its earliest offset (discover). The job is down
// (checkpoint 1 taken) while topic ev-b is created and gets 5 records; the
// restore assigns ev-b with cfg.Start (Latest), so those 5 records are
// never read, although they would have been, had the job been running.
// Flink (FLIP-288) reads partitions not in the restored state from the
// earliest offset.
func TestTopicCreatedWhileDownIsReadFromItsStart(t *testing.T) {
	brokers := broker(t, "ev-a")
	newReader, err := Source(SourceConfig[string]{Brokers: brokers, TopicRegex: "ev-.*", Start: Latest, Decode: StringValue,
		DiscoveryInterval: 10 * time.Millisecond, ClientOpts: []kgo.Opt{kgo.MetadataMinAge(10 * time.Millisecond)}})
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
	readFor(t, r, &got, 50*time.Millisecond) // the first run reads nothing: Latest
	hs := snapshot(t, r, 1, w)
	r.Close()

	cl, _ := kgo.NewClient(kgo.SeedBrokers(brokers...))
	defer cl.Close()
	if resp, err := kadm.NewClient(cl).CreateTopics(context.Background(), 1, -1, nil, "ev-b"); err != nil || resp.Error() != nil {
		t.Fatal(err, resp.Error())
	}
	produce(t, brokers, "ev-b", "", values("b", 5)...)

	r = newReader()
	if err := r.Open(run.Context("kafka", 0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read})); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got = nil
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		readFor(t, r, &got, 20*time.Millisecond)
		if len(got) >= 5 {
			break
		}
	}
	n := 0
	for _, v := range got {
		if strings.HasPrefix(v, "b") {
			n++
		}
	}
	if n != 5 {
		t.Fatalf("topic ev-b, created while the job was down, matched the regex: read %d of its 5 records after the restore (got %v)", n, got)
	}
}

// TestTopicCreatedWhileRunningControl: the same, the job running:
// discovery reads ev-b from its start (passes; the control of the above).
func TestTopicCreatedWhileRunningControl(t *testing.T) {
	brokers := broker(t, "ev-a")
	newReader, err := Source(SourceConfig[string]{Brokers: brokers, TopicRegex: "ev-.*", Start: Latest, Decode: StringValue,
		DiscoveryInterval: 10 * time.Millisecond, ClientOpts: []kgo.Opt{kgo.MetadataMinAge(10 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	run := &operatortest.Run{}
	defer run.Close()
	r := newReader()
	if err := r.Open(run.Context("kafka", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got collected
	readFor(t, r, &got, 50*time.Millisecond)
	cl, _ := kgo.NewClient(kgo.SeedBrokers(brokers...))
	defer cl.Close()
	if resp, err := kadm.NewClient(cl).CreateTopics(context.Background(), 1, -1, nil, "ev-b"); err != nil || resp.Error() != nil {
		t.Fatal(err, resp.Error())
	}
	produce(t, brokers, "ev-b", "", values("b", 5)...)
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < 5 && time.Now().Before(deadline) {
		readFor(t, r, &got, 20*time.Millisecond)
	}
	if len(got) != 5 {
		t.Fatalf("running: read %v", got)
	}
}

// TestPartitionAddedWhileDownIsReadAfterARestore: the job read "lines" (3
// partitions) and checkpointed; while it is down the topic gets a 4th
// partition and records in it. The restore reads partition 3 from its
// start, with discovery off (DiscoveryInterval -1) as with it on: the
// restore assigned only topics the checkpoint did not hold, so with
// discovery off partition 3 of a held topic was never read (Flink's
// enumerator discovers once at every start and reads such partitions from
// the earliest offset).
func TestPartitionAddedWhileDownIsReadAfterARestore(t *testing.T) {
	for _, discovery := range []time.Duration{-1, 10 * time.Millisecond} {
		t.Run(fmt.Sprint("discovery=", discovery), func(t *testing.T) { partitionAddedWhileDown(t, discovery) })
	}
}

func partitionAddedWhileDown(t *testing.T, discovery time.Duration) {
	brokers := broker(t, "lines")
	newReader, err := Source(SourceConfig[string]{Brokers: brokers, Topics: []string{"lines"}, Decode: StringValue, DiscoveryInterval: discovery,
		ClientOpts: []kgo.Opt{kgo.MetadataMinAge(10 * time.Millisecond)}})
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
	hs := snapshot(t, r, 1, w)
	r.Close()
	cl, _ := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("lines"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreatePartitions(context.Background(), 1, "lines"); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Partition: 3, Value: []byte(fmt.Sprint("p3-", i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	r = newReader()
	if err := r.Open(run.Context("kafka", 0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read})); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got collected
	deadline := time.Now().Add(3 * time.Second)
	for len(got) < 4 && time.Now().Before(deadline) {
		readFor(t, r, &got, 20*time.Millisecond)
	}
	if len(got) != 4 {
		t.Fatalf("partition 3, added while the job was down, read %d of its 4 records after the restore: %v", len(got), got)
	}
}
