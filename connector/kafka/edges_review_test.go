package kafka

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// readFor reads r for d and appends what it emits to got.
func readFor(t *testing.T, r weir.SourceReader[string], got *collected, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		res, err := r.Read(got)
		if err != nil {
			t.Fatal(err)
		}
		if res.Exhausted {
			return
		}
		time.Sleep(time.Until(res.IdleUntil))
	}
}

// TestReview3PartitionFoundByAnotherSubtaskIsReadAfterARestore: subtask A
// discovers a new partition that subtask B owns, before B's own discovery
// runs. A checkpoint taken then records the partition as known (union
// state, from A) but no subtask holds its split. After a restore of that
// checkpoint nobody reads the partition: discovery skips known partitions.
func TestReview3PartitionFoundByAnotherSubtaskIsReadAfterARestore(t *testing.T) {
	brokers := broker(t, "lines") // 3 partitions
	cfg := SourceConfig[string]{Brokers: brokers, Topics: []string{"lines"}, Decode: StringValue, DiscoveryInterval: time.Millisecond,
		ClientOpts: []kgo.Opt{kgo.MetadataMinAge(10 * time.Millisecond)}}
	newReader, err := Source(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run := &operatortest.Run{}
	defer run.Close()
	w := &operatortest.MemWriter{}
	const p = 2
	readers := make([]weir.SourceReader[string], p)
	for sub := range p {
		readers[sub] = newReader()
		if err := readers[sub].Open(run.Context("kafka", sub, p, nil)); err != nil {
			t.Fatal(err)
		}
	}
	cl, _ := kgo.NewClient(kgo.SeedBrokers(brokers...))
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreatePartitions(context.Background(), 1, "lines"); err != nil { // adds partition 3
		t.Fatal(err)
	}
	ownerSub := owner("lines", 3, p)
	other := readers[1-ownerSub].(*reader[string])
	// The other subtask's discovery runs once the metadata lists it.
	for seen := false; !seen; {
		parts, err := other.partitions(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		seen = slices.Contains(parts, tp{"lines", 3})
	}
	if err := other.discover(); err != nil {
		t.Fatal(err)
	}
	// Checkpoint 1, before the owner's discovery ran.
	got := checkpointRestoreRead3(t, brokers, readers, newReader, run, w)
	if len(got) != 10 {
		t.Fatalf("after the restore, read %d of the 10 records of partition 3 (found while the job ran, by subtask %d; owned by subtask %d): lost", len(got), 1-ownerSub, ownerSub)
	}
}

// checkpointRestoreRead3 takes checkpoint 1 of readers (closing them),
// restores it into as many readers of newReader, writes 10 records to
// partition 3 of topic lines, and returns what the restored readers read.
func checkpointRestoreRead3(t *testing.T, brokers []string, readers []weir.SourceReader[string], newReader func() weir.SourceReader[string],
	run *operatortest.Run, w *operatortest.MemWriter) collected {
	t.Helper()
	var hs []checkpoint.Handle
	for _, r := range readers {
		hs = append(hs, snapshot(t, r, 1, w)...)
		r.Close()
	}
	p := len(readers)
	restored := make([]weir.SourceReader[string], p)
	for sub := range p {
		restored[sub] = newReader()
		if err := restored[sub].Open(run.Context("kafka", sub, p, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read})); err != nil {
			t.Fatal(err)
		}
		defer restored[sub].Close()
	}
	pcl, _ := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer pcl.Close()
	var recs []*kgo.Record
	for _, v := range values("p3-", 10) {
		recs = append(recs, &kgo.Record{Topic: "lines", Partition: 3, Value: []byte(v)})
	}
	if err := pcl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var got collected
	for range 50 {
		for _, r := range restored {
			readFor(t, r, &got, 20*time.Millisecond)
		}
		if len(got) == 10 {
			break
		}
	}
	return got
}

// TestReview3RestoreBelowTheLogStartIsNotSilent: a checkpoint recorded
// partition offsets that retention has since deleted (DeleteRecords stands
// for retention). The restored source cannot read those records; it says
// so in a warning naming each partition and how many it skips, then reads
// the rest (franz-go reset to the log's start silently before; an outside
// review, session 33).
func TestReview3RestoreBelowTheLogStartIsNotSilent(t *testing.T) {
	brokers := broker(t, "lines")
	produce(t, brokers, "lines", "", values("a", 30)...) // 10 per partition
	newReader, err := Source(SourceConfig[string]{Brokers: brokers, Topics: []string{"lines"}, Decode: StringValue, DiscoveryInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	run := &operatortest.Run{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	defer run.Close()
	w := &operatortest.MemWriter{}
	r := newReader()
	if err := r.Open(run.Context("kafka", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	var got collected
	for len(got) < 30 {
		readFor(t, r, &got, 20*time.Millisecond)
	}
	hs := snapshot(t, r, 1, w) // at offset 10 in each partition
	r.Close()
	produce(t, brokers, "lines", "", values("b", 30)...) // offsets 10..19
	cl, _ := kgo.NewClient(kgo.SeedBrokers(brokers...))
	defer cl.Close()
	var del kadm.Offsets
	for p := range int32(3) {
		del.Add(kadm.Offset{Topic: "lines", Partition: p, At: 15})
	}
	if resp, err := kadm.NewClient(cl).DeleteRecords(context.Background(), del); err != nil || resp.Error() != nil {
		t.Fatal(err, resp.Error())
	}
	r = newReader()
	if err := r.Open(run.Context("kafka", 0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read})); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got = nil
	for len(got) < 15 {
		readFor(t, r, &got, 20*time.Millisecond)
	}
	for p := range 3 {
		want := fmt.Sprintf("topic=lines partition=%d checkpointed=10 log-start=15 skipped=5", p)
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the restore's log does not say %q:\n%s", want, logs.String())
		}
	}
	readFor(t, r, &got, 100*time.Millisecond)
	if len(got) != 15 {
		t.Errorf("read %d records after the restore, want the 15 left (offsets 15-19 of each partition)", len(got))
	}
}

// TestReview3ProduceErrorNamesTheRecordsTopic: Encode may send a record to
// another topic (Record.Topic). When that topic does not exist, the error
// names the sink's default topic instead of the one the record went to.
func TestReview3ProduceErrorNamesTheRecordsTopic(t *testing.T) {
	brokers := broker(t, "out")
	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Delivery: AtLeastOnce,
		Encode: func(s string) *kgo.Record { return &kgo.Record{Topic: "elsewhere", Value: []byte(s)} }})
	if err != nil {
		t.Fatal(err)
	}
	run := &operatortest.Run{}
	defer run.Close()
	s := newSink()
	if err := s.Open(run.Context("out", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Write("x")
	if err == nil {
		_, err = s.Snapshot(1)
	}
	if err == nil || !strings.Contains(err.Error(), "elsewhere") {
		t.Fatalf("a record for topic elsewhere, which does not exist: error %v (permanent=%v), want it to name elsewhere", err, operator.IsPermanent(err))
	}
}

// TestReview3EmptyIntervalsOpenNoTransactions (holds): checkpoints with no
// records in between open, commit and leave open no transaction, and use
// no id.
func TestReview3EmptyIntervalsOpenNoTransactions(t *testing.T) {
	brokers := broker(t, "out")
	run := &operatortest.Run{}
	defer run.Close()
	s := sinkFor(t, run, brokers, 0, 1, nil)
	defer s.Close()
	w := &operatortest.MemWriter{}
	s.Write("a")
	snapshot(t, s, 1, w)
	if err := s.NotifyComplete(1); err != nil {
		t.Fatal(err)
	}
	for id := checkpoint.ID(2); id <= 20; id++ {
		snapshot(t, s, id, w)
		if err := s.NotifyComplete(id); err != nil {
			t.Fatal(err)
		}
	}
	if got := ongoing(t, brokers); len(got) != 0 {
		t.Fatalf("open transactions after empty checkpoints: %v", got)
	}
	if n := len(s.(*writer[string]).pending); n != 0 {
		t.Fatalf("%d pending", n)
	}
}

// TestReview3TooFewTransactionalIDsAreWarnedOf: a pool set by hand that
// the tolerated checkpoint failures can use up is warned of when the sink
// opens, naming both settings and the size needed (a small pool still
// serves a sink that writes rarely, as it did before).
func TestReview3TooFewTransactionalIDsAreWarnedOf(t *testing.T) {
	var logs bytes.Buffer
	run := &operatortest.Run{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	defer run.Close()
	toleratingSink(t, run, broker(t, "out"), 11, 10, nil).Close()
	if want := "transactional-ids=11 tolerable-failures=10 needed=24"; !strings.Contains(logs.String(), want) {
		t.Fatalf("open with 11 ids and 10 tolerable failures logged %q, want a warning with %q", logs.String(), want)
	}
}
