package cluster

import (
	"fmt"
	"slices"
	"strings"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/internal/cluster/clusterpb"
)

// Placement says which worker runs each subtask.
type Placement map[checkpoint.TaskID]string

// First is the task of worker that sorts first, the one a failure of the
// worker itself is reported for (zero when it runs none).
func (p Placement) First(worker string) checkpoint.TaskID {
	var first checkpoint.TaskID
	for id, w := range p {
		if w == worker && (first == (checkpoint.TaskID{}) || id.String() < first.String()) {
			first = id
		}
	}
	return first
}

// Place puts the plan's subtasks on the workers' slots, as Flink's slot
// sharing does: slot i holds subtask i of every vertex that has one, so
// the job needs as many slots as its largest parallelism, and a slot runs
// a whole pipeline (local channels where edges are forward). Slots are
// taken from the workers in turn (the first slot of each, then the
// second...), so a vertex's subtasks spread across the workers. It is
// deterministic: the same workers give the same placement.
func Place(plan *graph.Plan, workers []Worker) (Placement, error) {
	need := 0
	for _, v := range plan.Vertices {
		need = max(need, v.Parallelism)
	}
	ws := slices.Clone(workers)
	slices.SortFunc(ws, func(a, b Worker) int { return strings.Compare(a.Name, b.Name) })
	var slots []string // worker names, one per slot, in the order taken
	for round := 0; len(slots) < need; round++ {
		took := false
		for _, w := range ws {
			if round < w.Slots && len(slots) < need {
				slots = append(slots, w.Name)
				took = true
			}
		}
		if !took {
			return nil, fmt.Errorf("cluster: the job needs %d slots (its largest parallelism); the %d workers offer %d: start more workers, give them more --slots, or lower the parallelism",
				need, len(ws), len(slots))
		}
	}
	p := Placement{}
	for _, v := range plan.Vertices {
		for s := range v.Parallelism {
			p[checkpoint.TaskID{Vertex: v.ID, Subtask: s}] = slots[s]
		}
	}
	return p, nil
}

func placementToProto(p Placement) []*clusterpb.Assignment {
	out := make([]*clusterpb.Assignment, 0, len(p))
	for id, w := range p {
		out = append(out, &clusterpb.Assignment{Task: taskToProto(id), Worker: w})
	}
	return out
}

func placementFromProto(as []*clusterpb.Assignment) Placement {
	p := Placement{}
	for _, a := range as {
		p[taskFromProto(a.GetTask())] = a.GetWorker()
	}
	return p
}
