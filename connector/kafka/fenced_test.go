package kafka

import (
	"strings"
	"testing"

	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestASecondRunThatFencesTheFirstIsNamed: the same job started twice
// (another host, other checkpoint storage). Run 1 pre-committed checkpoint
// 1; run 2 starts from nothing, and its start aborts run 1's transaction,
// whose records are lost. Run 1's commit fails for good, saying that
// another writer under its prefix fenced it: it blamed the transaction
// timeout (15 minutes, of which none had passed). Found by an outside
// review, session 39.
func TestASecondRunThatFencesTheFirstIsNamed(t *testing.T) {
	brokers := broker(t, "out")
	w := &operatortest.MemWriter{}
	run1 := &operatortest.Run{}
	defer run1.Close()
	a := sinkFor(t, run1, brokers, 0, 1, nil)
	defer a.Close()
	for _, v := range values("a", 5) {
		if err := a.Write(v); err != nil {
			t.Fatal(err)
		}
	}
	snapshot(t, a, 1, w)
	run2 := &operatortest.Run{}
	defer run2.Close()
	b := sinkFor(t, run2, brokers, 0, 1, nil)
	defer b.Close()
	err := a.NotifyComplete(1)
	if !operator.IsPermanent(err) || !strings.Contains(err.Error(), "another writer with transactional id prefix") || strings.Contains(err.Error(), "most likely at its timeout") {
		t.Fatalf("run 1's commit after run 2 started: %v; want a permanent error naming another writer under the prefix, not the timeout", err)
	}
}
