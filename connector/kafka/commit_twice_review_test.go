package kafka

// An outside review wrote the first two tests against 5879083, which sent
// a second EndTxn after every commit: both failed there (a healthy commit
// called permanently failed, "its records are lost", while its markers
// were pending). The sink now sends that request only for a transaction
// its client did not end, and the restore's commit retries
// CONCURRENT_TRANSACTIONS (TestRestoreWhileCommitMarkersArePending).

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestRestoreWhileCommitMarkersArePending: the run dies just after its
// commit was accepted, and the restore sends that commit again while the
// coordinator still writes its markers: it is answered
// CONCURRENT_TRANSACTIONS, which kerr does not call retriable. The restore
// failed for good, "its records are lost", though they were committed.
func TestRestoreWhileCommitMarkersArePending(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	run := &operatortest.Run{}
	s := sinkFor(t, run, brokers, 0, 1, nil)
	for _, v := range values("a", 5) {
		s.Write(v)
	}
	w := &operatortest.MemWriter{}
	hs := snapshot(t, s, 1, w)
	markersPending(c, 500*time.Millisecond)
	if err := s.NotifyComplete(1); err != nil {
		t.Fatal(err)
	}
	s.Close() // the run dies
	run.Close()

	run = &operatortest.Run{}
	defer run.Close()
	r := sinkFor(t, run, brokers, 0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read})
	defer r.Close()
	want := values("a", 5)
	if got := consumeWhen(t, brokers, "out", func(got []string) bool { return slices.Equal(got, want) }); !slices.Equal(got, want) {
		t.Fatalf("after the restore: %v", got)
	}
}

// markersPending makes the kfake cluster answer like a Kafka transaction
// coordinator whose commit markers are still being written (a partition's
// leader is moving, a broker restarts): the first EndTxn(commit) of a
// producer id and epoch is accepted (PrepareCommit is logged and the client
// is told NONE), and every repeat of it is answered CONCURRENT_TRANSACTIONS
// until the markers are written, pending later. That is what
// TransactionCoordinator.endTransaction answers in state PrepareCommit.
func markersPending(c *kfake.Cluster, pending time.Duration) { repeatAnswered(c, pending, 51) }

// repeatAnswered answers every repeat of an accepted EndTxn(commit) with
// error code for pending.
func repeatAnswered(c *kfake.Cluster, pending time.Duration, code int16) {
	var mu sync.Mutex
	accepted := map[string]time.Time{}
	c.ControlKey(int16(kmsg.EndTxn), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.EndTxnRequest)
		if !req.Commit {
			return nil, nil, false
		}
		key := fmt.Sprintf("%s/%d/%d", req.TransactionalID, req.ProducerID, req.ProducerEpoch)
		mu.Lock()
		defer mu.Unlock()
		at, ok := accepted[key]
		if !ok {
			accepted[key] = time.Now()
			return nil, nil, false // the commit itself: kfake commits
		}
		if time.Since(at) < pending {
			resp := req.ResponseKind().(*kmsg.EndTxnResponse)
			resp.ErrorCode = code
			return resp, nil, true
		}
		return nil, nil, false
	})
}

// TestSinkCommitWhoseMarkersArePendingIsNotAFailure: kgo's EndTransaction
// returned nil, so the broker accepted the commit; its markers take the
// usual few hundred milliseconds to be written. A real coordinator is in
// PrepareCommit then, so the sink's second EndTxn (sent at once, by
// producer id and epoch) is answered CONCURRENT_TRANSACTIONS, which kerr
// does not mark retriable: commitRecorded does not retry it and calls the
// healthy commit permanently failed, "its records are lost". Against a
// real broker this is the common case, not a corner. Before 5879083
// NotifyComplete returned nil here.
func TestSinkCommitWhoseMarkersArePendingIsNotAFailure(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	run := &operatortest.Run{}
	defer run.Close()
	s := sinkFor(t, run, brokers, 0, 1, nil)
	defer s.Close()
	for _, v := range values("a", 5) {
		s.Write(v)
	}
	w := &operatortest.MemWriter{}
	snapshot(t, s, 1, w)
	markersPending(c, 500*time.Millisecond)
	start := time.Now()
	if err := s.NotifyComplete(1); err != nil {
		t.Fatalf("a commit the broker accepted (kgo's EndTransaction answered nil) failed after %v (permanent: %v): %v",
			time.Since(start).Round(time.Millisecond), operator.IsPermanent(err), err)
	}
}

// TestSinkCommitWhoseMarkersArePendingIsNotPermanentlyLost: as above, with
// markers pending for 12 s (a partition leader moving) and a request
// timeout of 20 s: whatever the retries, the accepted commit must not be
// called permanently failed ("its records are lost", the job stops for
// good) while its output is committed.
func TestSinkCommitWhoseMarkersArePendingIsNotPermanentlyLost(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	run := &operatortest.Run{}
	defer run.Close()
	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: "out", Encode: encode, TransactionalIDs: 3, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s := newSink()
	if err := s.Open(run.Context("out", 0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, v := range values("a", 5) {
		s.Write(v)
	}
	w := &operatortest.MemWriter{}
	snapshot(t, s, 1, w)
	markersPending(c, 12*time.Second)
	err = s.NotifyComplete(1)
	if operator.IsPermanent(err) || strings.Contains(fmt.Sprint(err), "records are lost") {
		t.Fatalf("a commit the broker accepted is reported permanently failed: %v", err)
	}
	if err != nil {
		t.Fatalf("a commit the broker accepted failed: %v", err)
	}
}
