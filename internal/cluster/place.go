package cluster

import (
	"cmp"
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

// Copies says, of each subtask, which workers hold a local copy of its
// state (local recovery) as of the checkpoint an attempt restores.
type Copies map[checkpoint.TaskID][]string

// Place puts the plan's subtasks on the workers' slots, as Flink's slot
// sharing does: slot i holds subtask i of every vertex that has one (the
// slot's pipeline), so the job needs as many slots as its largest
// parallelism, and a slot runs a whole pipeline (local channels where
// edges are forward). A pipeline goes first to a worker that holds local
// copies of its subtasks' state (copies; the one that holds the most, if
// they differ), so that its restore reads no state over the network; the
// others take the slots left in turn (the first slot of each worker, then
// the second...), so that a vertex's subtasks spread across the workers.
// It is deterministic: the same workers and copies give the same
// placement.
func Place(plan *graph.Plan, workers []Worker, copies Copies) (Placement, error) {
	need := 0
	for _, v := range plan.Vertices {
		need = max(need, v.Parallelism)
	}
	ws := slices.Clone(workers)
	slices.SortFunc(ws, func(a, b Worker) int { return strings.Compare(a.Name, b.Name) })
	free := make([]int, len(ws)) // slots not yet taken, of each worker
	offered := 0
	for i, w := range ws {
		free[i] = min(w.Slots, need) // NB: bounds the work below, whatever a worker offers
		offered += free[i]
	}
	if offered < need {
		return nil, fmt.Errorf("cluster: the job needs %d slots (its largest parallelism); the %d workers offer %d: start more workers, give them more --slots, or lower the parallelism",
			need, len(ws), offered)
	}
	on := make([]int, need) // the worker of each pipeline, by index in ws
	for i := range on {
		on[i] = -1
	}
	// Pipelines to the workers that hold copies of their subtasks: the
	// pairs with the most copies first.
	type pair struct{ pipeline, worker, copies int }
	var pairs []pair
	if len(copies) > 0 {
		index := make(map[string]int, len(ws))
		for i, w := range ws {
			index[w.Name] = i
		}
		held := map[[2]int]int{}
		for _, v := range plan.Vertices {
			for s := range v.Parallelism {
				for _, name := range copies[checkpoint.TaskID{Vertex: v.ID, Subtask: s}] {
					if i, ok := index[name]; ok {
						held[[2]int{s, i}]++
					}
				}
			}
		}
		for k, n := range held {
			pairs = append(pairs, pair{pipeline: k[0], worker: k[1], copies: n})
		}
		slices.SortFunc(pairs, func(a, b pair) int {
			return cmp.Or(cmp.Compare(b.copies, a.copies), cmp.Compare(a.pipeline, b.pipeline), cmp.Compare(a.worker, b.worker))
		})
	}
	skip := make([]int, len(ws)) // slots taken by preference, counted as each worker's first turns
	for _, p := range pairs {
		if on[p.pipeline] < 0 && free[p.worker] > 0 {
			on[p.pipeline] = p.worker
			free[p.worker]--
			skip[p.worker]++
		}
	}
	// The others: the slots left, in turn.
	next := 0
	for round := 0; round < need; round++ {
		for i, w := range ws {
			if round >= min(w.Slots, need) {
				continue
			}
			if skip[i] > 0 {
				skip[i]--
				continue
			}
			for next < need && on[next] >= 0 {
				next++
			}
			if next < need {
				on[next] = i
				next++
			}
		}
	}
	p := Placement{}
	for _, v := range plan.Vertices {
		for s := range v.Parallelism {
			p[checkpoint.TaskID{Vertex: v.ID, Subtask: s}] = ws[on[s]].Name
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
