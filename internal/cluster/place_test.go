package cluster

import (
	"maps"
	"slices"
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
	p, err := Place(plan(4, 2, 1), ws, nil)
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
	again, _ := Place(plan(4, 2, 1), []Worker{ws[2], ws[0], ws[1]}, nil)
	for id, w := range p {
		if again[id] != w {
			t.Fatalf("the placement depends on the workers' order: %v", again)
		}
	}
}

func TestPlaceNeedsEnoughSlots(t *testing.T) {
	_, err := Place(plan(3, 5), []Worker{{Name: "w1", Slots: 2}, {Name: "w2", Slots: 2}}, nil)
	if err == nil || !strings.Contains(err.Error(), "needs 5 slots (its largest parallelism); the 2 workers offer 4") {
		t.Fatalf("error %v", err)
	}
	if _, err := Place(plan(1), nil, nil); err == nil {
		t.Fatal("placed a job on no workers")
	}
}

// pipelines says which worker runs each pipeline (slot i: subtask i of
// every vertex), failing if a pipeline's subtasks are split.
func pipelines(t *testing.T, pl *graph.Plan, p Placement) []string {
	t.Helper()
	var out []string
	for _, v := range pl.Vertices {
		for s := range v.Parallelism {
			w := p[checkpoint.TaskID{Vertex: v.ID, Subtask: s}]
			if s == len(out) {
				out = append(out, w)
			} else if out[s] != w {
				t.Fatalf("pipeline %d is split: %v", s, p)
			}
		}
	}
	return out
}

func TestPlacePrefersTheWorkersThatHoldLocalCopies(t *testing.T) {
	three := []Worker{{Name: "w1", Slots: 1}, {Name: "w2", Slots: 1}, {Name: "w3", Slots: 1}}
	task := func(v string, s int) checkpoint.TaskID { return checkpoint.TaskID{Vertex: v, Subtask: s} }
	for _, tc := range []struct {
		name    string
		workers []Worker
		plan    *graph.Plan
		copies  Copies
		want    []string
	}{
		{"no copies: slots in turn", three, plan(2, 2), nil, []string{"w1", "w2"}},
		// w1 joined; w2 and w3 held the pipelines before.
		{"each pipeline where its copies are", three, plan(2, 2),
			Copies{task("a", 0): {"w2"}, task("b", 0): {"w2"}, task("a", 1): {"w3"}, task("b", 1): {"w3"}}, []string{"w2", "w3"}},
		// w3 left; w2 holds pipeline 1's copies, pipeline 0's are gone.
		{"a pipeline without copies takes a slot left", three[:2], plan(2, 2),
			Copies{task("a", 1): {"w2"}, task("b", 1): {"w2"}}, []string{"w1", "w2"}},
		{"the worker with the most of a pipeline's copies", three, plan(1, 1, 1),
			Copies{task("a", 0): {"w1"}, task("b", 0): {"w3"}, task("c", 0): {"w3"}}, []string{"w3"}},
		// w1 has one slot and the copies of both pipelines: the first
		// (the most copies, then the lowest pipeline) gets it.
		{"no more than a worker's slots", three[:2], plan(2),
			Copies{task("a", 0): {"w1"}, task("a", 1): {"w1"}}, []string{"w1", "w2"}},
		{"copies on workers not placeable are ignored", three[:2], plan(2),
			Copies{task("a", 0): {"gone"}, task("a", 1): {"w1"}}, []string{"w2", "w1"}},
		// Slots taken by copies count as their worker's first turns: the
		// rest still spread.
		{"the rest spread", []Worker{{Name: "w1", Slots: 2}, {Name: "w2", Slots: 2}}, plan(3),
			Copies{task("a", 2): {"w1"}}, []string{"w2", "w1", "w1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Place(tc.plan, tc.workers, tc.copies)
			if err != nil {
				t.Fatal(err)
			}
			if got := pipelines(t, tc.plan, p); !slices.Equal(got, tc.want) {
				t.Fatalf("pipelines on %v, want %v", got, tc.want)
			}
			rev := slices.Clone(tc.workers)
			slices.Reverse(rev)
			again, _ := Place(tc.plan, rev, tc.copies)
			if !maps.Equal(again, p) {
				t.Fatalf("the placement depends on the workers' order: %v, then %v", p, again)
			}
		})
	}
}
