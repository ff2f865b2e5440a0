package weir_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

func TestS41SessionLateBridgeE2E(t *testing.T) {
	e := s41Env(1)
	src := weir.Source(e, "src", s41Script(
		recs(s41ev{"a", 0, 1}, s41ev{"a", 30, 2}),
		recs(s41ev{"z", 50, 0}),
		recs(s41ev{"a", 15, 4}),
		recs(s41ev{"a", 22, 8}),
		recs(s41ev{"z", 200, 0}),
		recs(s41ev{"a", 35, 16}),
	), weir.Watermarks(weir.BoundedOutOfOrderness(0, s41At)))
	var late *weir.Stream[s41ev]
	ws := weir.Window(weir.KeyBy(src, func(e s41ev) string { return e.Key }), weir.Session(10*time.Millisecond),
		weir.AllowedLateness(100*time.Millisecond), weir.LateTo(&late))
	res := weir.WindowProcess(ws, "sessions", func(k string, w weir.TimeWindow, in []s41ev, out weir.Collector[string]) error {
		if k == "a" {
			var vs []int64
			for _, r := range in {
				vs = append(vs, r.V)
			}
			out.Collect(fmt.Sprintf("%s [%d,%d) %v", k, w.Start.UnixMilli(), w.End.UnixMilli(), vs))
		}
		return nil
	})
	var got, lates collect[string]
	weir.Sink(res, "out", got.sink())
	weir.Sink(weir.Map(late, "fmt late", func(e s41ev) string { return fmt.Sprint(e) }), "late", lates.sink())
	s41Run(t, e)
	s41Diff(t, got.values(), []string{"a [0,10) [1]", "a [30,40) [2]", "a [15,25) [4]", "a [15,40) [4 2 8]"})
	s41Diff(t, lates.values(), []string{"{a 35 16}"})
}
