package weir

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/cacheline"
	"github.com/weirstream/weir/internal/runtime"
)

// The parts a task writes for every record (its operators, its head, its
// emitters) are built one subtask after another by one goroutine. Each
// must be padded (package cacheline, design note 103), or subtask 0's
// part and subtask 1's sit side by side and two cores share their cache
// lines. This builds every vertex of a job of most operator kinds twice,
// as subtasks 0 and 1, and checks that no part of one is within a line
// of the same part of the other. A part allocated plainly fails it when
// the allocator puts the two side by side, as it does for a Rebalance's
// FlatMap built with &flatMapOp{} (48 bytes apart); padded parts never
// can.
func TestSubtaskPartsKeepApart(t *testing.T) {
	env := New(Config{Job: "apart"})
	src := Source(env, "src", func() SourceReader[int] { return review2Source{} }, Parallelism(2),
		Watermarks(WatermarkStrategy[int]{Timestamp: func(v int) time.Time { return time.UnixMilli(int64(v)) }}))
	m := Filter(Map(src, "map", func(v int) int { return v + 1 }), "filter", func(v int) bool { return v > 0 })
	f := FlatMap(Rebalance(m), "flat", func(v int, out Collector[int]) { out.Collect(v) }, Parallelism(2))
	u := Union(f, "union", []*Stream[int]{m}, Parallelism(2))
	r := Reduce(KeyBy(u, func(v int) int { return v % 7 }), "reduce", func(a, b int) int { return a + b }, Parallelism(2))
	w := WindowAggregate(Window(KeyBy(r, func(v int) int { return v % 3 }), Tumbling(time.Second)), "window", Count[int](), Parallelism(2))
	Sink(w, "sink", func() SinkWriter[WindowResult[int, int64]] { return review2WindowSink{} }, Parallelism(2))
	plan, err := env.Plan()
	if err != nil {
		t.Fatal(err)
	}
	build := env.build(plan)
	checked := 0
	for v := range plan.Vertices {
		vx := &plan.Vertices[v]
		var parts [2][]any
		for s := range 2 {
			outs := make([][]runtime.OutputChannel, len(vx.Outputs))
			for i := range outs {
				outs[i] = []runtime.OutputChannel{runtime.NewLocalChannel(4, nil), runtime.NewLocalChannel(4, nil)}
			}
			p, err := build(&runtime.TaskBuild{Ctx: context.Background(), Vertex: vx, Subtask: s, Outputs: outs, BatchSize: 64})
			if err != nil {
				t.Fatal(err)
			}
			for _, op := range p.Ops {
				parts[s] = append(parts[s], op)
			}
			parts[s] = append(parts[s], p.Head)
			for _, o := range p.Outputs {
				if _, ok := o.(publisher); !ok {
					parts[s] = append(parts[s], o)
				}
			}
		}
		for i := range parts[0] {
			a, b := reflect.ValueOf(parts[0][i]), reflect.ValueOf(parts[1][i])
			if a.Kind() != reflect.Pointer || a.Type() != b.Type() {
				continue
			}
			size := a.Type().Elem().Size()
			lo, hi := a.Pointer(), b.Pointer()
			if lo > hi {
				lo, hi = hi, lo
			}
			if hi-lo < size+cacheline.Size {
				t.Errorf("vertex %d: the %T of subtasks 0 and 1 are %d bytes apart (%d bytes each): closer than a cache line; allocate it with cacheline.New", v, parts[0][i], hi-lo, size)
			}
			checked++
		}
	}
	t.Logf("checked %d parts", checked)
	if checked < 10 {
		t.Fatalf("checked %d parts, want at least 10: the job's parts are not what this test expects", checked)
	}
}

type review2WindowSink struct{ review2Sink }

func (review2WindowSink) Write(WindowResult[int, int64]) error { return nil }
