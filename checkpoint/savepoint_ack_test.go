package checkpoint

import (
	"testing"
	"time"
)

// TestDuplicateAckOfAnOlderSavepointKeepsItsState: a savepoint is never
// deleted by Weir. A duplicate acknowledgement of a completed savepoint
// (a worker retries a Report whose answer it lost; the first copy was
// taken) must not make the coordinator discard that savepoint's state,
// whether or not a newer savepoint completed meanwhile: only the newest
// was known, and an older one's duplicate was discarded as unknown. Found
// by an outside review (session 34).
func TestDuplicateAckOfAnOlderSavepointKeepsItsState(t *testing.T) {
	src := TaskID{Vertex: "src", Subtask: 0}
	c, err := New(Job{Name: "j", Tasks: Tasks{All: []TaskID{src}, Sources: []TaskID{src}}}, Config{}, Restored{})
	if err != nil {
		t.Fatal(err)
	}
	c.Start(t0)
	h := []Handle{{Operator: "op", Subtask: 0, Kind: "keyed", Path: "chk-1/op.0.keyed", SizeBytes: 10}}
	sp := func(at time.Time, hs []Handle) ID {
		id, err := c.TriggerSavepoint(at)
		if err != nil {
			t.Fatal(err)
		}
		c.Acknowledge(at, src, id, hs)
		c.Persisted(at, id, nil)
		c.Ready()
		return id
	}
	first := sp(t0.Add(time.Second), h)
	sp(t0.Add(2*time.Second), []Handle{{Operator: "op", Subtask: 0, Kind: "keyed", Path: "chk-2/op.0.keyed", SizeBytes: 10}})
	// The retried report of savepoint 1 arrives again.
	res := c.Acknowledge(t0.Add(3*time.Second), src, first, h)
	if res != AckDuplicate {
		t.Errorf("a duplicate ack of completed savepoint %d: %v, want AckDuplicate", first, res)
	}
	for _, a := range c.Ready() {
		if d, ok := a.(DiscardState); ok {
			t.Fatalf("a duplicate ack of completed savepoint %d (result %v) deletes its state: %+v", first, res, d)
		}
	}
}
