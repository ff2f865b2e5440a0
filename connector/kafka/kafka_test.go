package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// broker starts an in-process kfake cluster with the given topics (3
// partitions each).
func broker(t *testing.T, topics ...string) []string {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1)}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(3, topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// produce writes values into topic (records without keys go round-robin
// over its partitions); txn, if set, writes them in one transaction with
// that id, committed unless the id ends in -aborted, at the transaction
// version kgo picks with kfake (2: the sink is capped at 1, so this is the
// test's producer of version 2 transactions for the source and Committed to
// read). Once in CI another producer's committed record never became
// visible: its transaction stayed open (design note 106). kgo has two ways
// to end a transaction otherwise than asked, both answering nil: without an
// EndTxn (seen in the sink, design note 70), and, at version 2, with an
// abort when it believes no produce succeeded. Neither reproduced; the
// helper repairs the first (EndTxn by producer id and epoch), writes the
// transaction again after the second, and logs kgo's debug output for both.
func produce(t *testing.T, brokers []string, topic, txn string, values ...string) {
	t.Helper()
	for attempt := 1; !produceOnce(t, brokers, topic, txn, values); attempt++ {
		if attempt == 3 {
			t.Fatalf("transaction %s: kgo aborted it instead of committing it %d times", txn, attempt)
		}
	}
}

// produceOnce is one attempt of produce; it reports false when kgo aborted
// a transaction it was asked to commit.
func produceOnce(t *testing.T, brokers []string, topic, txn string, values []string) bool {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner())}
	ends := &endTxnWrites{}
	var log strings.Builder
	var logMu sync.Mutex
	logged := func() string {
		logMu.Lock()
		defer logMu.Unlock()
		return log.String()
	}
	if txn != "" {
		opts = append(opts, kgo.TransactionalID(txn), kgo.WithHooks(ends),
			kgo.WithLogger(kgo.BasicLogger(lockedWriter{&logMu, &log}, kgo.LogLevelDebug, nil)))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	if txn != "" {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range values {
		cl.Produce(ctx, kgo.StringRecord(v), func(_ *kgo.Record, err error) {
			if err != nil {
				t.Error(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if txn == "" || len(values) == 0 {
		return true // an empty transaction: kgo rightly sends nothing
	}
	// The transaction's producer id and epoch, before EndTxn (which, at
	// version 2, bumps the epoch).
	id, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	commit := !strings.HasSuffix(txn, "-aborted")
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatal(err)
	}
	if ends.n.Load() > 0 {
		if commit && strings.Contains(logged(), "issuing an abort") {
			t.Logf("kgo aborted transaction %s it was asked to commit; writing it again. kgo's log:\n%s", txn, logged())
			return false
		}
		return true
	}
	t.Logf("kgo ended transaction %s without writing EndTxn; ending it by producer id and epoch. kgo's log:\n%s", txn, logged())
	req := kmsg.NewPtrEndTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch, req.Commit = txn, id, epoch, commit
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		t.Fatalf("ending transaction %s: %v", txn, err)
	}
	return true
}

// lockedWriter serialises writes into a builder kgo's logger and the test
// both use.
type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// consume reads topic read_committed (or read_uncommitted) until it has
// seen the end offsets of every partition, and returns the values.
func consume(t *testing.T, brokers []string, topic string, committed bool) []string {
	t.Helper()
	iso := kgo.ReadCommitted()
	if !committed {
		iso = kgo.ReadUncommitted()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(iso),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	var ends kadm.ListedOffsets
	if committed {
		ends, err = adm.ListCommittedOffsets(ctx, topic)
	} else {
		ends, err = adm.ListEndOffsets(ctx, topic)
	}
	if err != nil {
		t.Fatal(err)
	}
	pos := map[int32]int64{}
	done := func() bool {
		all := true
		ends.Each(func(o kadm.ListedOffset) {
			if pos[o.Partition] < o.Offset {
				all = false
			}
		})
		return all
	}
	var out []string
	for !done() {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s: %v (at %v of %v)", topic, err, pos, ends)
		}
		fs.EachRecord(func(r *kgo.Record) {
			pos[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				out = append(out, string(r.Value))
			}
		})
	}
	slices.Sort(out)
	return out
}

// consumeWhen reads topic read_committed until what it read satisfies ok,
// for up to 10 s, and returns the last read (callers check it): a commit's
// markers reach the partitions after the commit returns (in Kafka as in
// kfake), so what it made visible shows shortly after.
func consumeWhen(t *testing.T, brokers []string, topic string, ok func([]string) bool) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := consume(t, brokers, topic, true)
		if ok(got) || time.Now().After(deadline) {
			return got
		}
		time.Sleep(20 * time.Millisecond) // polling for the condition
	}
}

// stalled reports whether an open transaction holds read_committed
// consumers of topic back: its last stable offsets trail its end offsets.
func stalled(t *testing.T, brokers []string, topic string) bool {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	end, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	stable, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	behind := false
	end.Each(func(o kadm.ListedOffset) {
		if s, ok := stable.Lookup(o.Topic, o.Partition); !ok || s.Offset < o.Offset {
			behind = true
		}
	})
	return behind
}

type collected []string

func (c *collected) Collect(s string) { *c = append(*c, s) }

// drain reads r until it is exhausted.
func drain(t *testing.T, r weir.SourceReader[string], out *collected) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		res, err := r.Read(out)
		if err != nil {
			t.Fatal(err)
		}
		if res.Exhausted {
			return
		}
		if !res.IdleUntil.IsZero() {
			time.Sleep(time.Until(res.IdleUntil)) // the source asked to be polled later
		}
	}
	t.Fatal("the bounded source did not end within 30s")
}

func values(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%03d", prefix, i)
	}
	return out
}

// TestBoundedSourceRestoresAtAnotherParallelism: a bounded source read by
// two subtasks, snapshotted midway and restored by three, reads every
// record once, stops at the end offsets of its first start (records
// produced later are not read), and sees past transaction markers.
func TestBoundedSourceRestoresAtAnotherParallelism(t *testing.T) {
	brokers := broker(t, "lines")
	produce(t, brokers, "lines", "", values("plain", 60)...)
	produce(t, brokers, "lines", "producer", values("txn", 60)...)
	produce(t, brokers, "lines", "producer-aborted", values("aborted", 30)...) // read_committed: never seen
	newReader, err := Source(SourceConfig[string]{Brokers: brokers, Topics: []string{"lines"}, Bounded: true, Decode: StringValue, BatchSize: 7})
	if err != nil {
		t.Fatal(err)
	}
	run := &operatortest.Run{}
	defer run.Close()
	w := &operatortest.MemWriter{}
	var got collected
	var handles []checkpoint.Handle
	for sub := range 2 {
		r := newReader()
		if err := r.Open(run.Context("kafka", sub, 2, nil)); err != nil {
			t.Fatal(err)
		}
		for len(got) < 20*(sub+1) {
			if _, err := r.Read(&got); err != nil {
				t.Fatal(err)
			}
		}
		async, err := r.Snapshot(1)
		if err != nil {
			t.Fatal(err)
		}
		hs, err := async(w)
		if err != nil {
			t.Fatal(err)
		}
		handles = append(handles, hs...)
		r.Close()
	}
	produce(t, brokers, "lines", "", values("late", 10)...) // after the bounded source first started
	for sub := range 3 {
		r := newReader()
		if err := r.Open(run.Context("kafka", sub, 3, &operator.Restore{Checkpoint: 1, Handles: handles, Read: w.Read})); err != nil {
			t.Fatal(err)
		}
		drain(t, r, &got)
		r.Close()
	}
	slices.Sort(got)
	want := append(values("plain", 60), values("txn", 60)...)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("read %d records (%d distinct), want the %d produced before the start", len(got), len(slices.Compact(slices.Clone(got))), len(want))
	}
}

// TestSourceFindsNewPartitions: an unbounded source reads a partition added
// while it runs, from its start.
func TestSourceFindsNewPartitions(t *testing.T) {
	brokers := broker(t, "lines")
	newReader, err := Source(SourceConfig[string]{Brokers: brokers, TopicRegex: "li.*", Decode: StringValue, DiscoveryInterval: time.Millisecond,
		ClientOpts: []kgo.Opt{kgo.MetadataMinAge(10 * time.Millisecond)}}) // read the new partitions' metadata at once

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
	cl, _ := kgo.NewClient(kgo.SeedBrokers(brokers...))
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreatePartitions(context.Background(), 2, "lines"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(context.Background(), 1, -1, nil, "lines2"); err != nil {
		t.Fatal(err)
	}
	produce(t, brokers, "lines", "", values("a", 50)...)
	produce(t, brokers, "lines2", "", values("b", 5)...)
	var got collected
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < 55 && time.Now().Before(deadline) {
		res, err := r.Read(&got)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(res.IdleUntil)) // the source asked to be polled later
	}
	if len(got) != 55 {
		t.Fatalf("read %d of 55 records from 5 partitions, 2 of them new, and a new topic", len(got))
	}
}

// TestSourceDecodeErrors: a record that cannot be decoded fails the job,
// naming topic, partition and offset; or it is skipped, if asked.
func TestSourceDecodeErrors(t *testing.T) {
	brokers := broker(t, "lines")
	produce(t, brokers, "lines", "", "1", "2", "x", "4")
	decode := func(r *kgo.Record) (string, error) {
		if string(r.Value) == "x" {
			return "", errors.New("not a number")
		}
		return string(r.Value), nil
	}
	for _, skip := range []bool{false, true} {
		newReader, err := Source(SourceConfig[string]{Brokers: brokers, Topics: []string{"lines"}, Bounded: true, Decode: decode, SkipInvalid: skip})
		if err != nil {
			t.Fatal(err)
		}
		run := &operatortest.Run{}
		r := newReader()
		if err := r.Open(run.Context("kafka", 0, 1, nil)); err != nil {
			t.Fatal(err)
		}
		var got collected
		var failure error
		for failure == nil {
			res, err := r.Read(&got)
			if err != nil || res.Exhausted {
				failure = err
				break
			}
			time.Sleep(time.Until(res.IdleUntil))
		}
		r.Close()
		run.Close()
		switch {
		case skip && (failure != nil || len(got) != 3):
			t.Errorf("skipping: %v, %d records", failure, len(got))
		case !skip && (!operator.IsPermanent(failure) || !strings.Contains(fmt.Sprint(failure), "at lines/") || !strings.Contains(fmt.Sprint(failure), "offset 0 cannot be decoded: not a number")):
			t.Errorf("decode error: %v", failure)
		}
	}
}

// TestBadConfigurationFailsAtStart: a missing topic, a broker that is down
// and an invalid configuration fail when the source or sink is built.
func TestBadConfigurationFailsAtStart(t *testing.T) {
	brokers := broker(t, "lines")
	for _, c := range []struct {
		err  error
		want string
	}{
		{err1(Source(SourceConfig[string]{Brokers: brokers, Topics: []string{"nope"}, Decode: StringValue})), "topic nope does not exist"},
		{err1(Sink(SinkConfig[string]{Brokers: brokers, Topic: "nope", Encode: encode})), "topic nope does not exist"},
		{err1(Source(SourceConfig[string]{Brokers: []string{"127.0.0.1:1"}, Topics: []string{"lines"}, Decode: StringValue, Timeout: 500 * time.Millisecond})), "cannot reach the brokers"},
		{err1(Source(SourceConfig[string]{Brokers: brokers, Topics: []string{"lines"}})), "Decode is required"},
		{err1(Source(SourceConfig[string]{Brokers: brokers, Topics: []string{"lines"}, Decode: StringValue, Start: Committed})), "needs a Group"},
		{err1(ParseURL("kafka://127.0.0.1:9092")), "no topic"},
		{err1(ParseURL("kafka://127.0.0.1:9092/t?boundd=true")), `unknown option "boundd"`},
		{err1(ParseURL("http://127.0.0.1:9092/t")), "want kafka://host:port/topic"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("error %v, want %q", c.err, c.want)
		}
	}
	// A created topic is there.
	if _, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "made", Encode: encode, CreateTopic: true, Partitions: 2}); err != nil {
		t.Fatal(err)
	}
}

func err1[T any](_ T, err error) error { return err }

func encode(s string) *kgo.Record { return kgo.StringRecord(s) }

// sinkFor opens subtask sub of p of a sink writing to "out".
func sinkFor(t *testing.T, run *operatortest.Run, brokers []string, sub, p int, r *operator.Restore) weir.SinkWriter[string] {
	t.Helper()
	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: encode, TransactionalIDs: 3})
	if err != nil {
		t.Fatal(err)
	}
	s := newSink()
	if err := s.Open(run.Context("out", sub, p, r)); err != nil {
		t.Fatal(err)
	}
	return s
}

// snapshot takes a sink's or source's snapshot for checkpoint id into w.
func snapshot(t *testing.T, s interface {
	Snapshot(checkpoint.ID) (operator.Async, error)
}, id checkpoint.ID, w *operatortest.MemWriter) []checkpoint.Handle {
	t.Helper()
	async, err := s.Snapshot(id)
	if err != nil {
		t.Fatal(err)
	}
	hs, err := async(w)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

// TestSinkTwoPhaseCommit: records are visible to read_committed consumers
// only once their checkpoint completes. A restore commits what the
// checkpoint recorded — even when the process died between pre-commit and
// commit — and aborts the transaction the dead run left open, so consumers
// do not stall.
func TestSinkTwoPhaseCommit(t *testing.T) {
	brokers := broker(t, "out")
	w := &operatortest.MemWriter{}
	run := &operatortest.Run{}
	s := sinkFor(t, run, brokers, 0, 1, nil)
	for _, v := range values("a", 5) {
		s.Write(v)
	}
	snapshot(t, s, 1, w)
	if got := consume(t, brokers, "out", true); len(got) != 0 {
		t.Fatalf("visible before the checkpoint completed: %v", got)
	}
	if err := s.NotifyComplete(1); err != nil {
		t.Fatal(err)
	}
	if got := consumeWhen(t, brokers, "out", func(got []string) bool { return slices.Equal(got, values("a", 5)) }); !slices.Equal(got, values("a", 5)) {
		t.Fatalf("after checkpoint 1: %v", got)
	}
	for _, v := range values("b", 5) {
		s.Write(v)
	}
	hs := snapshot(t, s, 2, w) // completes, but the process dies before the notification
	for _, v := range values("c", 5) {
		s.Write(v) // after barrier 2: produced again after the restore
	}
	snapshot(t, s, 3, w) // never completes: a lingering transaction
	s.Close()
	run.Close()

	if !stalled(t, brokers, "out") {
		t.Fatal("no transaction left open by the dead run: the test does not test the abort")
	}

	run = &operatortest.Run{}
	defer run.Close()
	r := sinkFor(t, run, brokers, 0, 1, &operator.Restore{Checkpoint: 2, Handles: hs, Read: w.Read})
	defer r.Close()
	if stalled(t, brokers, "out") {
		t.Fatal("after the restore, read_committed consumers stall at a transaction the dead run left open")
	}
	want := append(values("a", 5), values("b", 5)...)
	if got := consumeWhen(t, brokers, "out", func(got []string) bool { return slices.Equal(got, want) }); !slices.Equal(got, want) {
		t.Fatalf("after restoring checkpoint 2: %v", got)
	}
	// The restored sink writes on.
	r.Write("d")
	snapshot(t, r, 4, w)
	if err := r.NotifyComplete(4); err != nil {
		t.Fatal(err)
	}
	if got := consumeWhen(t, brokers, "out", func(got []string) bool { return len(got) == 11 }); len(got) != 11 || got[10] != "d" {
		t.Fatalf("after checkpoint 4: %v", got)
	}
}

// TestSinkCommitsWhatItsClientLeftOpen: kgo's EndTransaction was seen to
// answer nil without sending EndTxn (design note 70): the transaction
// stayed open, read_committed readers stalled, and the next start aborted
// it. The sink sees that its client wrote no EndTxn and commits the
// transaction by producer id and epoch.
func TestSinkCommitsWhatItsClientLeftOpen(t *testing.T) {
	brokers := broker(t, "out")
	w := &operatortest.MemWriter{}
	var log strings.Builder
	run := &operatortest.Run{Logger: slog.New(slog.NewTextHandler(&log, nil))}
	defer run.Close()
	s := sinkFor(t, run, brokers, 0, 1, nil)
	defer s.Close()
	for _, v := range values("a", 5) {
		s.Write(v)
	}
	snapshot(t, s, 1, w)
	plantedEndSkipped.Store(true)
	err := s.NotifyComplete(1)
	plantedEndSkipped.Store(false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "ended a transaction without committing it") {
		t.Errorf("the sink's log does not say what it repaired:\n%s", log.String())
	}
	if stalled(t, brokers, "out") {
		t.Fatal("the transaction its client left open is still open")
	}
	if got := consumeWhen(t, brokers, "out", func(got []string) bool { return slices.Equal(got, values("a", 5)) }); !slices.Equal(got, values("a", 5)) {
		t.Fatalf("after checkpoint 1: %v", got)
	}
}

// TestSinkRefusesAnUnsafeTransactionTimeout: a transaction timeout the job
// could outwait, or above the broker's cap, is refused at start, naming
// the settings.
func TestSinkRefusesAnUnsafeTransactionTimeout(t *testing.T) {
	brokers := broker(t, "out")
	run := &operatortest.Run{}
	defer run.Close()
	for _, c := range []struct {
		timeout time.Duration
		want    string
	}{
		{time.Minute, "transaction timeout 1m0s is not above the longest a pre-committed transaction may wait for its commit, (checkpoint interval 1s + checkpoint timeout 10m0s) × (tolerable checkpoint failures 0 + 1) + the restart strategy's longest delay 5s = 10m6s"},
		{time.Hour, "transaction timeout 1h0m0s is above the broker's transaction.max.timeout.ms 15m0s"},
	} {
		newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: encode, TransactionTimeout: c.timeout})
		if err != nil {
			t.Fatal(err)
		}
		ctx := run.Context("out", 0, 1, nil)
		ctx.CommitWait = operator.CommitWait{Interval: time.Second, Timeout: 10 * time.Minute, RestartDelay: 5 * time.Second}
		s := newSink()
		err = s.Open(ctx)
		s.Close()
		if !operator.IsPermanent(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("timeout %v: %v", c.timeout, err)
		}
	}
}

// TestSinkDoesNotReuseAnIDARestoreMayCommit: after checkpoint 1 commits
// its transaction, the next records go under another transactional id
// until a newer checkpoint completes; a crash then restores checkpoint 1,
// whose transaction the restore commits again by producer id and epoch. A
// new transaction under the same id would fence that commit.
func TestSinkDoesNotReuseAnIDARestoreMayCommit(t *testing.T) {
	brokers := broker(t, "out")
	w := &operatortest.MemWriter{}
	run := &operatortest.Run{}
	s := sinkFor(t, run, brokers, 0, 1, nil)
	s.Write("a")
	hs := snapshot(t, s, 1, w)
	if err := s.NotifyComplete(1); err != nil {
		t.Fatal(err)
	}
	s.Write("b")
	snapshot(t, s, 2, w) // never completes: the process dies
	s.Close()
	run.Close()

	run = &operatortest.Run{}
	defer run.Close()
	newSink, _ := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: encode, TransactionalIDs: 3})
	r := newSink()
	defer r.Close()
	if err := r.Open(run.Context("out", 0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read})); err != nil {
		t.Fatalf("restoring checkpoint 1: %v", err)
	}
	if got := consumeWhen(t, brokers, "out", func(got []string) bool { return len(got) == 1 }); !slices.Equal(got, []string{"a"}) || stalled(t, brokers, "out") {
		t.Fatalf("after the restore: %v", got)
	}
}

// TestIdleSubtasksDoNotHoldBackCheckpoints: with more subtasks than
// partitions, the idle ones take part in checkpoints at once; a bounded job
// ends with its final checkpoint. Offsets go to the consumer group when a
// checkpoint completes.
func TestIdleSubtasksDoNotHoldBackCheckpoints(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "one"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	produce(t, brokers, "one", "", values("r", 500)...)
	src, err := Source(SourceConfig[string]{Brokers: brokers, Topics: []string{"one"}, Bounded: true, Decode: StringValue, Group: "lag"})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "copy", Encode: encode, CreateTopic: true})
	if err != nil {
		t.Fatal(err)
	}
	env := weir.New(weir.Config{Job: "copy", Parallelism: 3, Checkpoint: weir.CheckpointConfig{Interval: 10 * time.Millisecond}})
	weir.Sink(weir.Source(env, "in", src), "out", sink)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := env.Execute(ctx)
	if err != nil || res.Checkpoints == 0 {
		t.Fatalf("%v after %d checkpoints", err, res.Checkpoints)
	}
	if got := consumeWhen(t, brokers, "copy", func(got []string) bool { return len(got) == 500 }); !slices.Equal(got, values("r", 500)) {
		t.Fatalf("copied %d records", len(got))
	}
	cl, _ := kgo.NewClient(kgo.SeedBrokers(brokers...))
	defer cl.Close()
	offs, err := kadm.NewClient(cl).FetchOffsets(context.Background(), "lag")
	if o, ok := offs.Lookup("one", 0); err != nil || !ok || o.At != 500 {
		t.Fatalf("group offset %+v %v: want 500", o, err)
	}
}

// TestSinkFatalErrorsSayWhatToDo: a record larger than the topic allows
// is an error a restart cannot fix, and says so.
func TestSinkFatalErrorsSayWhatToDo(t *testing.T) {
	brokers := broker(t)
	cl, _ := kgo.NewClient(kgo.SeedBrokers(brokers...))
	defer cl.Close()
	limit := "200"
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 1, -1, map[string]*string{"max.message.bytes": &limit}, "small"); err != nil {
		t.Fatal(err)
	}
	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "small", Encode: encode, Delivery: AtLeastOnce})
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
	s.Write(strings.Repeat("x", 5000))
	_, err = s.Snapshot(1)
	if !operator.IsPermanent(err) || !strings.Contains(fmt.Sprint(err), "max.message.bytes") {
		t.Fatalf("a record too large: %v", err)
	}
}

// TestPartitionsHaveTheirOwnWatermarks: one subtask reads three partitions
// whose event times are far apart (partition 0 ten seconds ahead of
// partition 1). Each partition has its own watermark and the source's is
// the least, so however the fetches interleave them, no record is late and
// every one-second window counts all of its records.
func TestPartitionsHaveTheirOwnWatermarks(t *testing.T) {
	brokers := broker(t, "events")
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	offset := []int64{10_000, 0, 5_000} // per partition, ms
	var recs []*kgo.Record
	for p := range int32(3) {
		for i := range int64(1000) {
			recs = append(recs, &kgo.Record{Topic: "events", Partition: p, Value: fmt.Appendf(nil, "%d", offset[p]+i*10)})
		}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()

	newReader, err := Source(SourceConfig[int64]{Brokers: brokers, Topics: []string{"events"}, Bounded: true, BatchSize: 100,
		Decode: func(r *kgo.Record) (int64, error) {
			var ms int64
			_, err := fmt.Sscan(string(r.Value), &ms)
			return ms, err
		}})
	if err != nil {
		t.Fatal(err)
	}
	e := weir.New(weir.Config{Checkpoint: weir.CheckpointConfig{Mode: weir.NoCheckpoints}, WatermarkInterval: time.Millisecond})
	src := weir.Source(e, "events", newReader, weir.Watermarks(weir.Monotonous(func(ms int64) time.Time { return time.UnixMilli(ms) })))
	var late *weir.Stream[int64]
	w := weir.Window(weir.KeyBy(src, func(int64) int { return 0 }), weir.Tumbling(time.Second), weir.LateTo(&late))
	counts := weir.WindowAggregate(w, "counts", weir.Count[int64]())
	var mu sync.Mutex
	got, lateCount := map[int64]int64{}, 0
	weir.Sink(counts, "out", weir.SinkFunc(func(r weir.WindowResult[int, int64]) error {
		mu.Lock()
		defer mu.Unlock()
		got[r.Window.Start.UnixMilli()] += r.Value
		return nil
	}))
	weir.Sink(late, "late", weir.SinkFunc(func(int64) error {
		mu.Lock()
		defer mu.Unlock()
		lateCount++
		return nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := e.Execute(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[int64]int64{}
	for p := range 3 {
		for i := range int64(1000) {
			ms := offset[p] + i*10
			want[ms-ms%1000]++
		}
	}
	if lateCount != 0 || !maps.Equal(got, want) {
		t.Fatalf("%d records late; window counts %v, want %v", lateCount, got, want)
	}
}

// TestGroupCommitsSurviveFailedCheckpoints: a source keeps the offsets of
// its recent snapshots to commit to the consumer group when their
// checkpoint completes; checkpoints that fail are never notified. After
// many failed ones, the completion of any of the newest commits its
// offsets (the bound once dropped an arbitrary snapshot's, the newest
// included).
func TestGroupCommitsSurviveFailedCheckpoints(t *testing.T) {
	brokers := broker(t, "lines")
	produce(t, brokers, "lines", "", values("r", 200)...)
	newReader, err := Source(SourceConfig[string]{Brokers: brokers, Topics: []string{"lines"}, Decode: StringValue, BatchSize: 1, Group: "lag"})
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
	const snapshots = 3 * maxCommits
	for id := checkpoint.ID(1); id <= snapshots; id++ {
		for want := len(got) + 1; len(got) < want; {
			if _, err := r.Read(&got); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := r.Snapshot(id); err != nil {
			t.Fatal(err)
		}
	}
	cl, _ := kgo.NewClient(kgo.SeedBrokers(brokers...))
	defer cl.Close()
	// Each of the newest snapshots, completing in turn, commits the
	// positions it recorded: one record a snapshot, over the topic's three
	// partitions.
	for id := checkpoint.ID(snapshots - maxCommits + 1); id <= snapshots; id++ {
		if err := r.NotifyComplete(id); err != nil {
			t.Fatal(err)
		}
		offs, err := kadm.NewClient(cl).FetchOffsets(context.Background(), "lag")
		if err != nil {
			t.Fatal(err)
		}
		var read int64
		for p := range int32(3) {
			if o, ok := offs.Lookup("lines", p); ok {
				read += o.At
			}
		}
		if read != int64(id) {
			t.Fatalf("after checkpoint %d completed: the group's offsets add up to %d, want %d", id, read, id)
		}
	}
}
