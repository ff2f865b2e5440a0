package weir_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

// A self-join (both inputs the same keyed stream) and a union of a stream
// with itself: Flink pairs every record with every record of its window
// (itself included), and a self-union doubles the stream.
func TestS41SelfWindowJoin(t *testing.T) {
	e := s41Env(2)
	src := weir.Source(e, "src", s41Script(
		recs(s41ev{"a", 1, 1}, s41ev{"a", 2, 2}),
		recs(s41ev{"b", 3, 3}),
	), weir.Watermarks(weir.BoundedOutOfOrderness(0, s41At)))
	ks := weir.KeyBy(src, func(e s41ev) string { return e.Key })
	j := weir.WindowJoin(ks, ks, weir.Tumbling(10*time.Millisecond), "self", func(a, b s41ev) string {
		return fmt.Sprintf("%d-%d", a.V, b.V)
	})
	var got collect[string]
	weir.Sink(j, "out", got.sink())
	s41Run(t, e)
	s41Diff(t, got.values(), []string{"1-1", "1-2", "2-1", "2-2", "3-3"})
}

func TestS41SelfUnionCounts(t *testing.T) {
	e := s41Env(2)
	src := weir.Source(e, "src", s41Script(
		recs(s41ev{"a", 1, 1}, s41ev{"a", 2, 2}),
		recs(s41ev{"b", 13, 3}),
	), weir.Watermarks(weir.BoundedOutOfOrderness(0, s41At)))
	u := weir.Union(src, "self union", []*weir.Stream[s41ev]{src})
	c := weir.WindowAggregate(weir.Window(weir.KeyBy(u, func(e s41ev) string { return e.Key }), weir.Tumbling(10*time.Millisecond)), "count", weir.Count[s41ev]())
	var got collect[weir.WindowResult[string, int64]]
	weir.Sink(c, "out", got.sink())
	s41Run(t, e)
	s41Diff(t, s41Fmt(got.values()), []string{"a [0,10) 4", "b [10,20) 2"})
}
