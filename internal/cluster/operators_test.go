package cluster

import (
	"slices"
	"testing"
)

// TestOperatorCountsKeepAReplacedProcesssCounts: a worker's later
// heartbeats replace its counts (they are totals since its process
// started), and a new process under the same name (a new incarnation,
// after a kill) starts from 0 without taking away what the old one
// counted: the sums never go down.
func TestOperatorCountsKeepAReplacedProcesssCounts(t *testing.T) {
	o := NewOperatorCounts()
	o.report("w1", 1, []OperatorCount{{UID: "map", Records: 10}, {UID: "window", Records: 4, Late: 1}}, Restored{LocalBytes: 100})
	o.report("w2", 7, []OperatorCount{{UID: "map", Records: 5}}, Restored{RemoteBytes: 7})
	o.report("w1", 1, []OperatorCount{{UID: "map", Records: 30}, {UID: "window", Records: 9, Late: 2}}, Restored{LocalBytes: 100})
	want := []OperatorCount{{UID: "map", Records: 35}, {UID: "window", Records: 9, Late: 2}}
	if got := o.Sum(); !slices.Equal(got, want) {
		t.Fatalf("after w1's second heartbeat: %+v, want %+v", got, want)
	}
	// w1's process is replaced: its new incarnation counts from 0.
	o.report("w1", 2, []OperatorCount{{UID: "map", Records: 3}}, Restored{LocalBytes: 40, RemoteBytes: 2})
	want = []OperatorCount{{UID: "map", Records: 38}, {UID: "window", Records: 9, Late: 2}}
	if got := o.Sum(); !slices.Equal(got, want) {
		t.Fatalf("after w1's replacement: %+v, want %+v", got, want)
	}
	o.report("w1", 2, []OperatorCount{{UID: "map", Records: 8}}, Restored{LocalBytes: 40, RemoteBytes: 2})
	want[0].Records = 43
	if got := o.Sum(); !slices.Equal(got, want) {
		t.Fatalf("after the new w1's second heartbeat: %+v, want %+v", got, want)
	}
	// The bytes restores read too: the old w1's 100 stay.
	if got, want := o.Restored(), (Restored{LocalBytes: 140, RemoteBytes: 9}); got != want {
		t.Fatalf("restored %+v, want %+v", got, want)
	}
}

// TestOperatorCountsTravel: the counts survive the heartbeat's proto.
func TestOperatorCountsTravel(t *testing.T) {
	cs := []OperatorCount{{UID: "a", Records: 1 << 40, Late: 3}, {UID: "b"}}
	if got := operatorsFromProto(operatorsToProto(cs)); !slices.Equal(got, cs) {
		t.Fatalf("round trip: %+v, want %+v", got, cs)
	}
}
