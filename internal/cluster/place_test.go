package cluster

import (
	"strings"
	"testing"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/graph"
)

func plan(parallelism ...int) *graph.Plan {
	p := &graph.Plan{}
	for i, n := range parallelism {
		p.Vertices = append(p.Vertices, graph.Vertex{ID: string(rune('a' + i)), Parallelism: n})
	}
	return p
}

func TestPlaceSpreadsSubtasksAcrossWorkers(t *testing.T) {
	ws := []Worker{{Name: "w2", Slots: 2}, {Name: "w1", Slots: 2}, {Name: "w3", Slots: 1}}
	p, err := Place(plan(4, 2, 1), ws)
	if err != nil {
		t.Fatal(err)
	}
	// Slots in turn: w1, w2, w3, w1 (w3 has one slot).
	want := map[checkpoint.TaskID]string{
		{Vertex: "a", Subtask: 0}: "w1", {Vertex: "a", Subtask: 1}: "w2", {Vertex: "a", Subtask: 2}: "w3", {Vertex: "a", Subtask: 3}: "w1",
		{Vertex: "b", Subtask: 0}: "w1", {Vertex: "b", Subtask: 1}: "w2",
		{Vertex: "c", Subtask: 0}: "w1",
	}
	if len(p) != len(want) {
		t.Fatalf("placed %d subtasks, want %d: %v", len(p), len(want), p)
	}
	for id, w := range want {
		if p[id] != w {
			t.Errorf("%v on %q, want %q", id, p[id], w)
		}
	}
	again, _ := Place(plan(4, 2, 1), []Worker{ws[2], ws[0], ws[1]})
	for id, w := range p {
		if again[id] != w {
			t.Fatalf("the placement depends on the workers' order: %v", again)
		}
	}
}

func TestPlaceNeedsEnoughSlots(t *testing.T) {
	_, err := Place(plan(3, 5), []Worker{{Name: "w1", Slots: 2}, {Name: "w2", Slots: 2}})
	if err == nil || !strings.Contains(err.Error(), "needs 5 slots (its largest parallelism); the 2 workers offer 4") {
		t.Fatalf("error %v", err)
	}
	if _, err := Place(plan(1), nil); err == nil {
		t.Fatal("placed a job on no workers")
	}
}
