package kafka

// Defects a second outside review of session 39's changes found, each
// fixed; a test's comment says what the defect did.

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// sinkOf says which sink openPrefixed opens: subtask 0 of 1 of job's sink
// "out" into topic ("out" if empty) under prefix ("": the default), with
// enc (encode if nil), restoring restore and resuming resumed.
type sinkOf struct {
	job, topic, prefix string
	enc                func(string) *kgo.Record
	restore            *operator.Restore
	resumed            checkpoint.ID
}

// openPrefixed opens the sink o says.
func openPrefixed(t *testing.T, run *operatortest.Run, brokers []string, o sinkOf) (weir.SinkWriter[string], error) {
	t.Helper()
	enc := o.enc
	if enc == nil {
		enc = encode
	}
	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: cmp.Or(o.topic, "out"), Encode: enc, TransactionalIDPrefix: o.prefix, TransactionalIDs: 3})
	if err != nil {
		t.Fatal(err)
	}
	s := newSink()
	ctx := run.Context("out", 0, 1, o.restore)
	ctx.Job, ctx.Resumed = o.job, o.resumed
	if err := s.Open(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// TestTombstonedPrefixIsRecordedAgain: the refusal tells the
// user to delete the old sink's prefix record with a tombstone. The next
// sink given the prefix must then record it as its own, so that a third
// sink given it is refused. It finds the tombstone, takes it for a record
// of its own ("ours already"), and writes none: from then on every sink
// given the prefix starts, and they abort each other's transactions.
func TestTombstonedPrefixIsRecordedAgain(t *testing.T) {
	brokers := broker(t, "out")
	runA := &operatortest.Run{}
	defer runA.Close()
	a, err := openPrefixed(t, runA, brokers, sinkOf{job: "a", prefix: "shared"})
	if err != nil {
		t.Fatal(err)
	}
	a.Close()

	// Job a will never run again: its record is deleted, as the refusal says.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: OwnersTopic, Key: prefixKey("shared")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()

	runB := &operatortest.Run{}
	defer runB.Close()
	b, err := openPrefixed(t, runB, brokers, sinkOf{job: "b", prefix: "shared"})
	if err != nil {
		t.Fatalf("job b after the tombstone: %v", err)
	}
	defer b.Close()

	runC := &operatortest.Run{}
	defer runC.Close()
	c, err := openPrefixed(t, runC, brokers, sinkOf{job: "c", prefix: "shared"})
	if err == nil {
		c.Close()
		t.Fatal(`job c started under prefix "shared", which job b took after the tombstone: job b recorded no claim, so every later sink given the prefix starts and aborts job b's pre-committed transactions`)
	}
	if !strings.Contains(err.Error(), `belongs to sink "out" of job "b"`) {
		t.Fatalf("job c refused with %v, want a refusal naming job b", err)
	}
}

// TestRenamedJobRestoresItsOwnSavepoint: job a (an explicit
// prefix) pre-commits checkpoint 1 and stops before the commit. The job
// is renamed to b and restores that checkpoint (from a's directory, which
// Weir allows). The checkpoint records transactions under the prefix: the
// prefix is this lineage's. The restore must commit them; it is refused
// for good, as if another sink claimed the prefix, and the completed
// checkpoint's records stay uncommitted (lost at the broker's timeout).
func TestRenamedJobRestoresItsOwnSavepoint(t *testing.T) {
	brokers := broker(t, "out")
	w := &operatortest.MemWriter{}
	runA := &operatortest.Run{}
	a, err := openPrefixed(t, runA, brokers, sinkOf{job: "a", prefix: "p"})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range values("a", 5) {
		if err := a.Write(v); err != nil {
			t.Fatal(err)
		}
	}
	hs := snapshot(t, a, 1, w) // completes; the process stops before the notification
	a.Close()
	runA.Close()

	runB := &operatortest.Run{}
	defer runB.Close()
	b, err := openPrefixed(t, runB, brokers, sinkOf{job: "b", prefix: "p", restore: &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read}})
	if err != nil {
		t.Fatalf("job a renamed b, restoring its own checkpoint 1 (transactions under prefix \"p\"): %v", err)
	}
	defer b.Close()
	want := values("a", 5)
	if got := consumeWhen(t, brokers, "out", func(got []string) bool { return slices.Equal(got, want) }); !slices.Equal(got, want) {
		t.Fatalf("after the restore: read_committed %v, want %v", got, want)
	}
}

// TestFenceNamedWhateverTheRecordTimestamps: as
// TestASecondRunThatFencesTheFirstIsNamed, but Encode keeps the input's
// event time as the record's timestamp (kgo keeps a set Timestamp), here
// two hours ago (a replay). The fence comes milliseconds after the
// transaction's first record; commitFailed measures the age from the
// record's timestamp and blames the transaction timeout, telling the user
// to raise TransactionTimeout.
func TestFenceNamedWhateverTheRecordTimestamps(t *testing.T) {
	brokers := broker(t, "out")
	w := &operatortest.MemWriter{}
	eventTime := time.Now().Add(-2 * time.Hour)
	enc := func(s string) *kgo.Record {
		r := kgo.StringRecord(s)
		r.Timestamp = eventTime
		return r
	}
	a, _ := precommitted(t, brokers, sinkOf{job: "test", enc: enc}, w)
	run2 := &operatortest.Run{}
	defer run2.Close()
	b, err := openPrefixed(t, run2, brokers, sinkOf{job: "test", enc: enc})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	err = a.NotifyComplete(1)
	if !operator.IsPermanent(err) || !strings.Contains(err.Error(), "another writer with transactional id prefix") || strings.Contains(err.Error(), "most likely at its timeout") {
		t.Fatalf("run 1's commit, fenced by run 2 milliseconds after its first record (records stamped with event times 2h old): %v; want the error naming another writer, not the timeout", err)
	}
}

// TestFutureRecordTimestampsBlameAnotherWriter: Encode stamps
// records with event times an hour ahead of this host's clock (a source
// whose clock runs ahead, or scheduled events). The commit is fenced 20
// minutes (the task's clock, ctx.Now) after the transaction's first
// record, beyond its 15-minute timeout: the timeout is the likely cause.
// commitFailed computes the age from the record's timestamp, negative
// here, and says "well within its timeout", blaming another writer.
func TestFutureRecordTimestampsBlameAnotherWriter(t *testing.T) {
	brokers := broker(t, "out")
	w := &operatortest.MemWriter{}
	start := time.Now()
	enc := func(s string) *kgo.Record {
		r := kgo.StringRecord(s)
		r.Timestamp = start.Add(time.Hour)
		return r
	}
	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: enc, TransactionalIDs: 3})
	if err != nil {
		t.Fatal(err)
	}
	run1 := &operatortest.Run{}
	defer run1.Close()
	a := newSink()
	ctx := run1.Context("out", 0, 1, nil)
	if err := a.Open(ctx); err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, v := range values("a", 5) {
		if err := a.Write(v); err != nil {
			t.Fatal(err)
		}
	}
	snapshot(t, a, 1, w)
	// 20 minutes pass on the task's clock; the transaction is aborted
	// (here by a fence, as the broker's timeout does).
	ctx.Now = func() time.Time { return start.Add(20 * time.Minute) }
	run2 := &operatortest.Run{}
	defer run2.Close()
	b := sinkFor(t, run2, brokers, 0, 1, nil)
	defer b.Close()
	err = a.NotifyComplete(1)
	if err == nil || strings.Contains(err.Error(), "well within its timeout") {
		t.Fatalf("commit fenced 20 minutes after the first record (timeout 15m), records stamped an hour ahead: %v; want no claim that it was well within its timeout", err)
	}
}
