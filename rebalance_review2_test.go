package weir

import (
	"context"
	"reflect"
	"testing"
	"unsafe"

	"github.com/weirstream/weir/internal/cacheline"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/operator"
)

type review2Source struct{ operator.Base }

func (review2Source) Read(Collector[int]) (operator.PollResult, error) {
	return operator.PollResult{Exhausted: true}, nil
}

type review2Sink struct{ operator.Base }

func (review2Sink) Write(int) error { return nil }

// review2Emitters builds the source vertex of source → Rebalance → map →
// sink as subtasks 0 and 1, as the runtime does, and returns their
// emitters.
func review2Emitters(tb testing.TB) []*runtime.Emitter[int] {
	tb.Helper()
	env := New(Config{Job: "review2"})
	src := Source(env, "src", func() SourceReader[int] { return review2Source{} }, Parallelism(2))
	m := Map(Rebalance(src), "m", func(v int) int { return v }, Parallelism(2))
	Sink(m, "sink", func() SinkWriter[int] { return review2Sink{} }, Parallelism(2))
	plan, err := env.Plan()
	if err != nil {
		tb.Fatal(err)
	}
	vx := &plan.Vertices[0]
	if len(vx.Outputs) != 1 {
		tb.Fatalf("vertex %s has %d outputs, want the source's one", vx.ID, len(vx.Outputs))
	}
	build := env.build(plan)
	var ems []*runtime.Emitter[int]
	for s := range 2 {
		chans := []runtime.OutputChannel{runtime.NewLocalChannel(4, nil), runtime.NewLocalChannel(4, nil)}
		parts, err := build(&runtime.TaskBuild{Ctx: context.Background(), Vertex: vx, Subtask: s,
			Outputs: [][]runtime.OutputChannel{chans}, BatchSize: 64})
		if err != nil {
			tb.Fatal(err)
		}
		ems = append(ems, parts.Outputs[0].(*runtime.Emitter[int]))
	}
	return ems
}

// review2Route is an emitter's route.
func review2Route(em *runtime.Emitter[int]) runtime.Route[int] {
	f := reflect.ValueOf(em).Elem().FieldByName("route")
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface().(runtime.Route[int])
}

// review2RouteCounter returns the address of the variable a rebalance
// route increments for every record: the word of the route's closure that
// points at an int which a call changes.
func review2RouteCounter(t *testing.T, em *runtime.Emitter[int]) uintptr {
	t.Helper()
	route := review2Route(em)
	if route == nil {
		t.Fatal("the emitter of a rebalance edge has no route")
	}
	closure := *(*unsafe.Pointer)(unsafe.Pointer(&route))
	words := (*[3]unsafe.Pointer)(closure)
	for _, w := range words[1:] {
		if uintptr(w) < 1<<20 {
			continue // the captured channel count
		}
		p := (*int)(w)
		before := *p
		route(0)
		if *p != before {
			return uintptr(w)
		}
	}
	t.Fatal("found no counter in the rebalance route's closure")
	return 0
}

// A rebalance route increments a counter for every record (stream.go,
// emitterOf). The counters of a vertex's subtasks are built one after
// another by one goroutine, as the chains were (design note 103): an
// 8-byte int each, from the tiny allocator, so they share a cache line
// and two cores write it for every record.
func TestRebalanceRouteCountersApart_review2(t *testing.T) {
	var counters []uintptr
	for _, em := range review2Emitters(t) {
		counters = append(counters, review2RouteCounter(t, em))
	}
	a, b := counters[0], counters[1]
	if a > b {
		a, b = b, a
	}
	if b-a < cacheline.Size || a/cacheline.Size == b/cacheline.Size {
		t.Errorf("the rebalance counters of subtasks 0 and 1 are %d bytes apart (%#x, %#x): both on one cache line", b-a, counters[0], counters[1])
	}
}

// BenchmarkRebalanceRoutes_review2 runs the rebalance routes of two
// subtasks built as the runtime builds them, each on its own goroutine,
// as two tasks on two cores do for every record.
func BenchmarkRebalanceRoutes_review2(b *testing.B) {
	var routes []runtime.Route[int]
	for _, em := range review2Emitters(b) {
		routes = append(routes, review2Route(em))
	}
	b.ResetTimer()
	done := make(chan int)
	for _, r := range routes {
		go func() {
			s := 0
			for range b.N {
				s += r(0)
			}
			done <- s
		}()
	}
	<-done
	<-done
}
