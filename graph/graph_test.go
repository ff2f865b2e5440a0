package graph

import (
	"strings"
	"testing"
)

func TestChainsForwardRunsOfEqualParallelism(t *testing.T) {
	// source → map → (hash) count → sink, plus a second source unioned in.
	g := Graph{Nodes: []Node{
		{UID: "src", Parallelism: 2},
		{UID: "map", Parallelism: 2, Inputs: []Input{{From: 0, Partition: Forward}}},
		{UID: "count", Parallelism: 3, Inputs: []Input{{From: 1, Partition: Hash}}},
		{UID: "sink", Parallelism: 3, Inputs: []Input{{From: 2, Partition: Forward}}},
		{UID: "src2", Parallelism: 1},
		{UID: "union", Parallelism: 3, Inputs: []Input{{From: 3, Partition: Forward}, {From: 4, Partition: Rebalance}}},
		{UID: "out", Kind: KindSink, Parallelism: 3, Inputs: []Input{{From: 5, Partition: Forward}}},
	}}
	p, err := NewPlan(g)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range p.Vertices {
		var names []string
		for _, n := range v.Nodes {
			names = append(names, g.Nodes[n].UID)
		}
		got = append(got, strings.Join(names, "+"))
	}
	// sink has one consumer (union), but union has two inputs: no chain.
	if want := "src+map count+sink src2 union+out"; strings.Join(got, " ") != want {
		t.Fatalf("vertices %q, want %q", strings.Join(got, " "), want)
	}
	tasks := p.Tasks()
	if len(tasks.All) != 2+3+1+3 || len(tasks.Sources) != 3 {
		t.Fatalf("tasks %v, sources %v", tasks.All, tasks.Sources)
	}
	if u := p.Vertices[3]; len(u.Inputs) != 2 || p.Edges[u.Inputs[1]].Input != 1 {
		t.Fatalf("union inputs %v", u.Inputs)
	}
}

func TestInvalidGraphsNameTheOperator(t *testing.T) {
	cases := []struct {
		g    Graph
		want string
	}{
		{Graph{Nodes: []Node{{UID: "a", Parallelism: 1}, {UID: "a", Parallelism: 1, Inputs: []Input{{From: 0, Partition: Forward}}}}}, `share the UID "a"`},
		{Graph{Nodes: []Node{{UID: "a", Parallelism: 1}, {UID: "b", Kind: KindSink, Parallelism: 1}}}, `operator "a" has no consumer: its records go nowhere`},
		{Graph{Nodes: []Node{{UID: "a", Parallelism: 2}, {UID: "b", Parallelism: 3, Inputs: []Input{{From: 0, Partition: Forward}}}}}, `"b" (parallelism 3) is connected forward to "a" (parallelism 2)`},
		{Graph{Nodes: []Node{{UID: "a", Parallelism: 0}}}, `operator "a": parallelism 0`},
		{Graph{Nodes: []Node{{UID: "a", Parallelism: 200}}}, `parallelism 200 is outside 1..128`},
	}
	for _, c := range cases {
		if _, err := NewPlan(c.g); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
}
