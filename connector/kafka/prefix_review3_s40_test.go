package kafka

import (
	"strings"
	"testing"

	"github.com/weirstream/weir/operator/operatortest"
)

// TestReview3S40TakeOverRecordedByEarlierVersionStillHolds: job a's sink
// recorded prefix "shared"; then, under the previous version (before
// TakesOver existed), job b restored a's savepoint (the job renamed) and
// took the prefix over: that version wrote b's record without a flag, and
// read the last record as the holder. After an upgrade, a start of the old
// job a (an old deployment started again, not restoring) must still be
// refused: b holds the prefix and a's start aborts b's pre-committed
// transactions. nextOwner takes the first claim (a's) for the holder, as
// b's record carries no takes_over, and a starts.
func TestReview3S40TakeOverRecordedByEarlierVersionStillHolds(t *testing.T) {
	brokers := broker(t, "out")
	runA := &operatortest.Run{}
	defer runA.Close()
	a, err := openPrefixed(t, runA, brokers, sinkOf{job: "a", topic: "out", prefix: "shared"})
	if err != nil {
		t.Fatal(err)
	}
	a.Close()

	// b's take-over record, as the previous version's checkPrefix wrote it
	// (continues, no TakesOver field).
	b0 := []byte(`{"topic":"out","job":"b","uid":"out","subtask":0,"parallelism":1}`)
	recordPrefix(t, brokers, "shared", b0)
	if o, ok := claimOf(&found{value: b0}); !ok || o.Job != "b" {
		t.Fatalf("the record written does not read as b's claim: %+v %v", o, ok)
	}

	runA2 := &operatortest.Run{}
	defer runA2.Close()
	a2, err := openPrefixed(t, runA2, brokers, sinkOf{job: "a", topic: "out", prefix: "shared"})
	if a2 != nil {
		a2.Close()
	}
	if err == nil || !strings.Contains(err.Error(), `job "b"`) {
		t.Fatalf("job a started fresh after job b took prefix %q over (recorded by the previous version, b's record the last): start: %v; want a refusal naming job b", "shared", err)
	}
}
