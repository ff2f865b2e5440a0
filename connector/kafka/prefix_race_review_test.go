package kafka

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/operator/operatortest"
)

// TestLoserThatStoppedBeforeRewritingDoesNotWin: job a's sink records
// prefix "shared" and pre-commits checkpoint 1. Job b's sink raced it: b's
// record landed after a's, but b stopped (crashed, or its firstClaim read
// or its rewrite failed with a transient error, which restarts the subtask)
// before it wrote a's record again. The prefix's last record is then b's.
// b's next start must still be refused (a's record is the first claim after
// the last tombstone); it finds its own record last, takes it for "ours
// already", starts, and aborts a's pre-committed transaction.
func TestLoserThatStoppedBeforeRewritingDoesNotWin(t *testing.T) {
	brokers := broker(t, "out", "out2")
	w := &operatortest.MemWriter{}
	a, _ := precommitted(t, brokers, sinkOf{job: "a", topic: "out", prefix: "shared"}, w)

	// b's own claim, as checkPrefix writes it, landed after a's.
	recordPrefix(t, brokers, "shared", mustJSON(ownership{Topic: "out2", Job: "b", UID: "out", Subtask: 0, Parallelism: 1, FirstClaim: true}))

	runB := &operatortest.Run{}
	defer runB.Close()
	b, errB := openPrefixed(t, runB, brokers, sinkOf{job: "b", topic: "out2", prefix: "shared"})
	if b != nil {
		defer b.Close()
	}
	errA := a.NotifyComplete(1)
	if errB == nil || !strings.Contains(errB.Error(), `job "a"`) {
		t.Fatalf("job b restarted after losing the race to job a (its record last, not yet rewritten): b's start: %v (want a refusal naming job a); a's commit of checkpoint 1 afterwards: %v", errB, errA)
	}
}

// TestWinnerRestartInTheLosersWindowIsNotRefused: job a's sink recorded
// prefix "shared" first; job b's record followed (b lost the race, and has
// not yet written a's record again, or never will: it crashed). A start of
// job a's sink in that window (a sibling subtask opening late, a restart
// of the winner) must go on: a's record is the first claim. It is refused
// for good, "belongs to sink of job b", the loser.
func TestWinnerRestartInTheLosersWindowIsNotRefused(t *testing.T) {
	brokers := broker(t, "out", "out2")
	runA := &operatortest.Run{}
	defer runA.Close()
	a, err := openPrefixed(t, runA, brokers, sinkOf{job: "a", topic: "out", prefix: "shared"})
	if err != nil {
		t.Fatal(err)
	}
	a.Close()

	recordPrefix(t, brokers, "shared", mustJSON(ownership{Topic: "out2", Job: "b", UID: "out", Subtask: 0, Parallelism: 1, FirstClaim: true}))

	runA2 := &operatortest.Run{}
	defer runA2.Close()
	a2, err := openPrefixed(t, runA2, brokers, sinkOf{job: "a", topic: "out", prefix: "shared"})
	if a2 != nil {
		a2.Close()
	}
	if err != nil {
		t.Fatalf("job a's sink, the first to record the prefix, started again while the loser's record was the last: %v", err)
	}
}

// recordPrefix writes value as a record of prefix in the ownership topic,
// as a sink's start writes its own.
func recordPrefix(t *testing.T, brokers []string, prefix string, value []byte) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: OwnersTopic, Key: prefixKey(prefix), Value: value}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}
