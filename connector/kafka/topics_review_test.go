package kafka

// Found by an outside review of the Kafka connectors (session 35).

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestRestoreAfterTheTopicWasMadeAgainReadsItsRecords: a source read
// 30 records of "lines" (10 per partition) and checkpointed; the topic is
// deleted and created again (same name, as an operator resetting an
// environment does) and 6 new records are written. The restore must read
// those 6 records, or fail or warn naming the partition; it must not drop
// them as "already read" because their offsets are below the checkpoint's.
func TestRestoreAfterTheTopicWasMadeAgainReadsItsRecords(t *testing.T) {
	brokers := broker(t, "lines")
	produce(t, brokers, "lines", "", values("a", 30)...)
	newReader := linesSource(t, brokers, -1)
	var logs lockedBuf
	run := &operatortest.Run{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	defer run.Close()
	w := &operatortest.MemWriter{}
	r := newReader()
	if err := r.Open(run.Context("kafka", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	var got collected
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < 30 && time.Now().Before(deadline) {
		readFor(t, r, &got, 20*time.Millisecond)
	}
	if len(got) != 30 {
		t.Fatalf("read %d of 30", len(got))
	}
	hs := snapshot(t, r, 1, w)
	r.Close()

	remakeLines(t, brokers)
	produce(t, brokers, "lines", "", values("b", 6)...)

	r = newReader()
	if err := r.Open(run.Context("kafka", 0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read})); err != nil {
		t.Fatalf("restore: %v", err)
	}
	defer r.Close()
	got = nil
	deadline = time.Now().Add(5 * time.Second)
	for len(got) < 6 && time.Now().Before(deadline) {
		readFor(t, r, &got, 20*time.Millisecond)
	}
	warned := strings.Contains(logs.String(), "lines")
	if len(got) != 6 && !warned {
		t.Fatalf("after the topic was made again, the restored source read %d of its 6 new records, without an error or a warning: the others were dropped as already read (offsets below the checkpoint's). log:\n%s", len(got), logs.String())
	}
}

// TestStartAtATimeAfterTheLastRecordReadsWhatComesLater: start at a
// time after every record: the source must read the records written after
// it opens (like latest), not fail or read from the start.
func TestStartAtATimeAfterTheLastRecordReadsWhatComesLater(t *testing.T) {
	brokers := broker(t, "lines")
	produce(t, brokers, "lines", "", values("old", 6)...)
	newReader, err := Source(SourceConfig[string]{Brokers: brokers, Topics: []string{"lines"}, Decode: StringValue, DiscoveryInterval: -1,
		Start: AtTimestamp, StartTimestamp: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	run := &operatortest.Run{}
	defer run.Close()
	r := newReader()
	if err := r.Open(run.Context("kafka", 0, 1, nil)); err != nil {
		t.Fatalf("open: %v", err)
	}
	defer r.Close()
	produce(t, brokers, "lines", "", values("new", 6)...)
	var got collected
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < 6 && time.Now().Before(deadline) {
		readFor(t, r, &got, 20*time.Millisecond)
	}
	readFor(t, r, &got, 100*time.Millisecond)
	for _, v := range got {
		if v[:3] == "old" {
			t.Fatalf("read %q, written before the start time: %v", v, got)
		}
	}
	if len(got) != 6 {
		t.Fatalf("read %d of 6 new records: %v", len(got), got)
	}
}

type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestCommitAfterTheBrokerAbortedAtTheTimeoutSaysSo: a pre-committed
// transaction outlives its transaction timeout (a checkpoint's completion
// came late: a slow checkpoint storage, a long GC, a job paused in a
// debugger) and the broker aborts it. The commit at NotifyComplete then
// fails; the error must say the transaction timed out (its records are
// lost; raise TransactionTimeout), not blame another producer sharing the
// transactional id prefix, which sends the user hunting for a second job
// that does not exist.
func TestCommitAfterTheBrokerAbortedAtTheTimeoutSaysSo(t *testing.T) {
	brokers := broker(t, "out")
	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: encode, TransactionalIDs: 3, TransactionTimeout: 300 * time.Millisecond})
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
	for _, v := range values("a", 5) {
		if err := s.Write(v); err != nil {
			t.Fatal(err)
		}
	}
	w := &operatortest.MemWriter{}
	snapshot(t, s, 1, w)
	deadline := time.Now().Add(10 * time.Second)
	for len(ongoing(t, brokers)) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the broker did not abort the transaction at its timeout")
		}
		time.Sleep(20 * time.Millisecond) // polling a condition
	}
	err = s.(interface{ NotifyComplete(checkpoint.ID) error }).NotifyComplete(1)
	if err == nil {
		t.Fatal("the commit of a transaction the broker aborted succeeded?")
	}
	t.Logf("permanent=%v: %v", operator.IsPermanent(err), err)
	if strings.Contains(err.Error(), "another producer") || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("the error blames another producer and does not name the transaction timeout (%v) that aborted the transaction: %v", 300*time.Millisecond, err)
	}
}

// TestStartTimestampWithoutAtTimestampIsRefused: a source configured
// with StartTimestamp but without Start: AtTimestamp (an easy slip in the
// Go API: the zero Start is Earliest) silently reads the topic from its
// beginning; and Start: AtTimestamp without a StartTimestamp silently
// reads from the year 1. Both must fail when the source is built.
func TestStartTimestampWithoutAtTimestampIsRefused(t *testing.T) {
	brokers := broker(t, "lines")
	for name, cfg := range map[string]SourceConfig[string]{
		"StartTimestamp without AtTimestamp": {Brokers: brokers, Topics: []string{"lines"}, Decode: StringValue, StartTimestamp: time.Now()},
		"AtTimestamp without StartTimestamp": {Brokers: brokers, Topics: []string{"lines"}, Decode: StringValue, Start: AtTimestamp},
	} {
		if _, err := Source(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// restoreWithTopics reads "lines" with a source of topics first,
// checkpoints, then restores a source of topics then (discovery off, as
// DiscoveryInterval -1 allows) and returns what it reads.
func restoreWithTopics(t *testing.T, first, then []string) collected {
	brokers := broker(t, "lines", "more")
	produce(t, brokers, "lines", "", values("l", 6)...)
	produce(t, brokers, "more", "", values("m", 6)...)
	build := func(topics []string) func() weir.SourceReader[string] {
		newReader, err := Source(SourceConfig[string]{Brokers: brokers, Topics: topics, Decode: StringValue, DiscoveryInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		return newReader
	}
	run := &operatortest.Run{}
	defer run.Close()
	w := &operatortest.MemWriter{}
	r := build(first)()
	if err := r.Open(run.Context("kafka", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	var got collected
	want := 6 * len(first)
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < want && time.Now().Before(deadline) {
		readFor(t, r, &got, 20*time.Millisecond)
	}
	if len(got) != want {
		t.Fatalf("first run read %d of %d", len(got), want)
	}
	hs := snapshot(t, r, 1, w)
	r.Close()
	produce(t, brokers, "lines", "", values("L", 6)...)
	produce(t, brokers, "more", "", values("M", 6)...)
	r = build(then)()
	if err := r.Open(run.Context("kafka", 0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read})); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got = nil
	// Everything there is to read arrives well within this (12 records).
	deadline = time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		readFor(t, r, &got, 20*time.Millisecond)
		if len(got) >= 24 {
			break
		}
	}
	return got
}

// TestTopicAddedToTheConfigIsReadAfterARestore: the job read "lines";
// the user adds "more" to Topics and restores the checkpoint. The source
// must read "more"; with discovery off it never does (only discovery looks
// at partitions the checkpoint does not hold), silently.
func TestTopicAddedToTheConfigIsReadAfterARestore(t *testing.T) {
	got := restoreWithTopics(t, []string{"lines"}, []string{"lines", "more"})
	n := 0
	for _, v := range got {
		if v[0] == 'm' || v[0] == 'M' {
			n++
		}
	}
	if n != 12 {
		t.Fatalf("after a restore with topic more added to the configuration, read %d of its 12 records (total read %d: %v)", n, len(got), got)
	}
}

// TestTopicRemovedFromTheConfigIsNotReadAfterARestore: the job read
// "lines" and "more"; the user removes "more" from Topics and restores.
// The source goes on emitting "more"'s records, from a topic the
// configuration no longer names.
func TestTopicRemovedFromTheConfigIsNotReadAfterARestore(t *testing.T) {
	got := restoreWithTopics(t, []string{"lines", "more"}, []string{"lines"})
	var more []string
	for _, v := range got {
		if v[0] == 'M' {
			more = append(more, v)
		}
	}
	if len(more) > 0 {
		t.Fatalf("after a restore with topic more removed from the configuration, still read %d of its records: %v", len(more), more)
	}
}

// TestRetentionWhileRunningDoesNotFailTheJob: retention deletes
// records a running source has not read yet (a consumer that fell behind).
// A restored source warns and goes on from the log's start (skipDeleted);
// a running one should do the same, not fail Read (a restart, and the
// replay of everything since the last checkpoint, at each occurrence).
func TestRetentionWhileRunningDoesNotFailTheJob(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "lines"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	produce(t, brokers, "lines", "", values("a", 30)...)
	release := make(chan struct{})
	var held atomic.Bool
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		if held.CompareAndSwap(false, true) {
			c.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	newReader := linesSource(t, brokers, -1)
	var logs lockedBuf
	run := &operatortest.Run{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	defer run.Close()
	r := newReader()
	if err := r.Open(run.Context("kafka", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cl, _ := kgo.NewClient(kgo.SeedBrokers(brokers...))
	defer cl.Close()
	var del kadm.Offsets
	for p := range int32(3) {
		del.Add(kadm.Offset{Topic: "lines", Partition: p, At: 5})
	}
	resp, err := kadm.NewClient(cl).DeleteRecords(context.Background(), del)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	var got collected
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < 15 && time.Now().Before(deadline) {
		res, err := r.Read(&got)
		if err != nil {
			t.Fatalf("Read failed after retention deleted unread records (permanent=%v; read %d so far): %v", operator.IsPermanent(err), len(got), err)
		}
		time.Sleep(time.Until(res.IdleUntil))
	}
	if len(got) != 15 {
		t.Fatalf("read %d of the 15 records retention left", len(got))
	}
}

// TestBoundedRestoreAfterTheTopicWasMadeAgainEnds: a bounded source
// (end offsets 10 per partition) checkpointed after reading 4 records; the
// topic is deleted and made again with 2 records per partition. The
// restored source must end (or fail, naming the topic); it waits forever
// for offsets 4..9 that the new log will not hold until someone writes
// them, and then it would drop the new records below offset 4 unread.
func TestBoundedRestoreAfterTheTopicWasMadeAgainEnds(t *testing.T) {
	brokers := broker(t, "lines")
	produce(t, brokers, "lines", "", values("a", 30)...)
	newReader, err := Source(SourceConfig[string]{Brokers: brokers, Topics: []string{"lines"}, Decode: StringValue, Bounded: true, BatchSize: 1})
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
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < 4 && time.Now().Before(deadline) {
		res, err := r.Read(&got)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(res.IdleUntil))
	}
	hs := snapshot(t, r, 1, w)
	r.Close()
	remakeLines(t, brokers)
	produce(t, brokers, "lines", "", values("b", 6)...)
	r = newReader()
	if err := r.Open(run.Context("kafka", 0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read})); err != nil {
		t.Fatalf("restore: %v", err)
	}
	defer r.Close()
	got = nil
	deadline = time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		res, err := r.Read(&got)
		if err != nil {
			t.Logf("Read failed: %v", err)
			return
		}
		if res.Exhausted {
			return
		}
		time.Sleep(time.Until(res.IdleUntil))
	}
	t.Fatalf("the restored bounded source did not end within 5s after its topic was made again (read %d records: %v): the job hangs", len(got), got)
}

// TestEncodeReturningNilIsAnError: an Encode that returns nil (a user
// who meant "skip this value") makes Write panic with a nil dereference
// deep in the sink, instead of an error naming Encode.
func TestEncodeReturningNilIsAnError(t *testing.T) {
	brokers := broker(t, "out")
	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: func(string) *kgo.Record { return nil }, TransactionalIDs: 3})
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
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("Write panicked: %v", p)
		}
	}()
	if err := s.Write("x"); err == nil {
		t.Fatal("Write of a nil record: no error")
	} else {
		t.Log(err)
	}
}

// remakeLines deletes topic "lines" and makes it again, with 3 partitions
// and no records, as an operator resetting an environment does.
func remakeLines(t *testing.T, brokers []string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.DeleteTopics(context.Background(), "lines"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := adm.CreateTopics(context.Background(), 3, -1, nil, "lines")
		if err == nil && resp.Error() == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err, resp.Error())
		}
		time.Sleep(10 * time.Millisecond) // polling a condition: the deletion done
	}
}
