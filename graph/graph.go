// Package graph turns a job graph (operators and the edges between them)
// into an execution plan: vertices (chains of operators run by one task per
// subtask) and the edges between vertices. It is pure: no I/O, no goroutines.
package graph

import (
	"fmt"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/keygroup"
)

// Partition says how records of an edge are spread over downstream subtasks.
type Partition int

const (
	// Forward sends subtask i's records to subtask i; both sides need the
	// same parallelism.
	Forward Partition = iota + 1
	// Hash sends each record to the subtask owning its key's key group.
	Hash
	// Rebalance spreads records round-robin.
	Rebalance
	// Broadcast sends every record to every subtask.
	Broadcast
)

func (p Partition) String() string {
	switch p {
	case Forward:
		return "forward"
	case Hash:
		return "hash"
	case Rebalance:
		return "rebalance"
	case Broadcast:
		return "broadcast"
	}
	return fmt.Sprintf("partition(%d)", int(p))
}

// KindSink is the Kind of a node that writes records out of the job; every
// other node must have a consumer.
const KindSink = "sink"

// Node is one operator of a job graph.
type Node struct {
	UID  string
	Name string
	// Kind names what the operator does ("source", "keyed-process", "sink",
	// ...); checkpoints record it with the UID.
	Kind           string
	Parallelism    int
	MaxParallelism int // 0: keygroup.DefaultMaxParallelism
	// Inputs are the edges into the node, in input order; a source has none.
	Inputs []Input
	// NoChain keeps the node out of its predecessor's chain.
	NoChain bool
}

// Input is one edge into a node.
type Input struct {
	From      int // index of the upstream node; always below the node's own
	Partition Partition
	// Port is the upstream node's output the edge reads: 0 its records,
	// above 0 a side output (late records, say).
	Port int
}

// Graph is a job graph; nodes appear after their inputs.
type Graph struct{ Nodes []Node }

// Vertex is a chain of nodes run by one task per subtask.
type Vertex struct {
	ID             string // the head node's UID
	Nodes          []int  // head first
	Parallelism    int
	MaxParallelism int
	Inputs         []int // edges into the head, in input order
	Outputs        []int // edges out of the tail
}

// Edge joins the tail of one vertex to the head of another.
type Edge struct {
	From, To  int // vertex indexes
	Input     int // index among To's inputs
	Partition Partition
	Port      int // the tail's output: 0 its records, above 0 a side output
}

// Plan is the execution plan of a graph.
type Plan struct {
	Graph    Graph
	Vertices []Vertex
	Edges    []Edge
	// VertexOf maps a node to its vertex.
	VertexOf []int
}

// NewPlan validates g and chains its nodes. Errors name the operator at
// fault and say how to fix it.
func NewPlan(g Graph) (*Plan, error) {
	if len(g.Nodes) == 0 {
		return nil, fmt.Errorf("the job has no operators")
	}
	uids := map[string]int{}
	consumers := make([]int, len(g.Nodes))
	for i := range g.Nodes {
		n := &g.Nodes[i]
		if n.UID == "" {
			return nil, fmt.Errorf("operator %d of the job (%s) has no name and no UID: give it a name, or a UID (weir.UID)", i, n.Kind)
		}
		if j, dup := uids[n.UID]; dup {
			return nil, fmt.Errorf("operators %d (%s %q) and %d (%s %q) of the job share the UID %q: UIDs match state to operators across restarts and must be unique, and an operator's UID is its name unless weir.UID sets one; give each a name of its own, or a UID of its own (weir.UID)",
				j, g.Nodes[j].Kind, g.Nodes[j].Name, i, n.Kind, n.Name, n.UID)
		}
		uids[n.UID] = i
		if n.MaxParallelism == 0 {
			n.MaxParallelism = keygroup.DefaultMaxParallelism
		}
		if n.MaxParallelism < 1 || n.MaxParallelism > keygroup.MaxMaxParallelism {
			return nil, fmt.Errorf("operator %q: max parallelism %d is outside 1..%d", n.UID, n.MaxParallelism, keygroup.MaxMaxParallelism)
		}
		if n.Parallelism < 1 || n.Parallelism > n.MaxParallelism {
			return nil, fmt.Errorf("operator %q: parallelism %d is outside 1..%d (its max parallelism)", n.UID, n.Parallelism, n.MaxParallelism)
		}
		for _, in := range n.Inputs {
			if in.From < 0 || in.From >= i {
				return nil, fmt.Errorf("operator %q: input from operator %d, which does not come before it", n.UID, in.From)
			}
			up := g.Nodes[in.From]
			if in.Partition == Forward && up.Parallelism != n.Parallelism {
				return nil, fmt.Errorf("operator %q (parallelism %d) is connected forward to %q (parallelism %d); forward needs equal parallelism: set the same parallelism or rebalance",
					n.UID, n.Parallelism, up.UID, up.Parallelism)
			}
			consumers[in.From]++
		}
	}
	for i, n := range g.Nodes {
		if consumers[i] == 0 && n.Kind != KindSink {
			return nil, fmt.Errorf("operator %q has no consumer: its records go nowhere; add a sink (weir.Sink) after it, or remove it", n.UID)
		}
	}
	p := &Plan{Graph: g, VertexOf: make([]int, len(g.Nodes))}
	for i, n := range g.Nodes {
		chained := len(n.Inputs) == 1 && !n.NoChain && n.Inputs[0].Partition == Forward &&
			consumers[n.Inputs[0].From] == 1 && n.Inputs[0].Port == 0
		if chained {
			v := p.VertexOf[n.Inputs[0].From]
			p.Vertices[v].Nodes = append(p.Vertices[v].Nodes, i)
			p.VertexOf[i] = v
			continue
		}
		p.VertexOf[i] = len(p.Vertices)
		p.Vertices = append(p.Vertices, Vertex{ID: n.UID, Nodes: []int{i}, Parallelism: n.Parallelism, MaxParallelism: n.MaxParallelism})
		for k, in := range n.Inputs {
			e := Edge{From: p.VertexOf[in.From], To: p.VertexOf[i], Input: k, Partition: in.Partition, Port: in.Port}
			p.Vertices[e.To].Inputs = append(p.Vertices[e.To].Inputs, len(p.Edges))
			p.Vertices[e.From].Outputs = append(p.Vertices[e.From].Outputs, len(p.Edges))
			p.Edges = append(p.Edges, e)
		}
	}
	return p, nil
}

// Operators lists the graph's operators as checkpoint metadata records them.
func (g Graph) Operators() []checkpoint.Operator {
	ops := make([]checkpoint.Operator, len(g.Nodes))
	for i, n := range g.Nodes {
		ops[i] = checkpoint.Operator{UID: n.UID, Kind: n.Kind, MaxParallelism: n.MaxParallelism}
	}
	return ops
}

// Tasks lists every task of the plan and the source tasks among them.
func (p *Plan) Tasks() checkpoint.Tasks {
	var t checkpoint.Tasks
	for _, v := range p.Vertices {
		for s := range v.Parallelism {
			id := checkpoint.TaskID{Vertex: v.ID, Subtask: s}
			t.All = append(t.All, id)
			if len(v.Inputs) == 0 {
				t.Sources = append(t.Sources, id)
			}
		}
	}
	return t
}

// Connects reports whether edge e carries records from upstream subtask i to
// downstream subtask j.
func (p *Plan) Connects(e Edge, i, j int) bool {
	if e.Partition == Forward {
		return i == j
	}
	return true
}

// Upstream is the far end of an input channel: a subtask of a vertex.
type Upstream struct{ Vertex, Subtask int }

// InputChannels lists the input channels of subtask j of vertex v in the
// order its input gate numbers them: by input edge, then by upstream
// subtask (as the runtime adds them).
func (p *Plan) InputChannels(v, j int) []Upstream {
	var out []Upstream
	for _, ei := range p.Vertices[v].Inputs {
		e := p.Edges[ei]
		for i := range p.Vertices[e.From].Parallelism {
			if p.Connects(e, i, j) {
				out = append(out, Upstream{Vertex: e.From, Subtask: i})
			}
		}
	}
	return out
}
