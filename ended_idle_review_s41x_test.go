package weir_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

// s41xArrivals records when each window result reached the sink.
type s41xArrivals struct {
	mu  sync.Mutex
	at  map[string]time.Duration
	t0  time.Time
	ord []string
}

func (a *s41xArrivals) sink() func() weir.SinkWriter[weir.WindowResult[string, int64]] {
	return weir.SinkFunc(func(r weir.WindowResult[string, int64]) error {
		a.mu.Lock()
		defer a.mu.Unlock()
		s := fmt.Sprintf("%s [%d,%d) %d", r.Key, r.Window.Start.UnixMilli(), r.Window.End.UnixMilli(), r.Value)
		a.at[s] = time.Since(a.t0)
		a.ord = append(a.ord, s)
		return nil
	})
}

// An input that ended and one that is idle: the idle one had promised,
// by its watermark (649), that no record at or before 649 will come from
// it; the ended one sends nothing more. So nothing can come into the
// windows [0,100) (x's record at 50) and [500,600) (b's record at 550):
// they are complete. The task nevertheless stays at the watermark the
// ended input last held it at (49) until the idle input sends again, so
// the windows wait for the idle input's next record: 2 s here, forever
// for a stream that stays quiet (a quiet Kafka partition, a file source
// watching a directory). The same task with the idle input alone would be
// at 649; with the first input idle rather than ended (it could still
// send records after 49) it holds at 49, which is right there, and
// Flink (FLINK-7728, FLINK-38477) moves a task whose remaining inputs are
// all idle to their watermark.
func TestS41xEndedAndIdleInputsHoldBelowTheIdleInputsWatermark(t *testing.T) {
	e := s41Env(1)
	// A: one record at 50 (watermark 49), then the input ends ~300 ms in.
	a := weir.Source(e, "bounded", s41Script(recs(s41ev{"x", 50, 1}), s41step{Idle: 300 * time.Millisecond}),
		weir.Watermarks(weir.BoundedOutOfOrderness(0, s41At)))
	// B: records up to 650 (watermark 649), idle after 20 ms, quiet until
	// the two windows are out (a minute at most: a stream that stays
	// quiet), then one more record.
	arr := &s41xArrivals{at: map[string]time.Duration{}, t0: time.Now()}
	out := func() bool {
		arr.mu.Lock()
		defer arr.mu.Unlock()
		_, x := arr.at["x [0,100) 1"]
		_, b := arr.at["b [500,600) 1"]
		return x && b
	}
	b := weir.Source(e, "stream", s41Script(
		recs(s41ev{"b", 550, 1}, s41ev{"b", 650, 1}),
		s41step{Until: out},
		recs(s41ev{"b", 750, 1}),
	), weir.Watermarks(weir.BoundedOutOfOrderness(0, s41At).WithIdleness(20*time.Millisecond)))
	u := weir.Union(a, "union", []*weir.Stream[s41ev]{b})
	c := weir.WindowAggregate(weir.Window(weir.KeyBy(u, func(e s41ev) string { return e.Key }), weir.Tumbling(100*time.Millisecond)),
		"count", weir.Count[s41ev]())
	weir.Sink(c, "out", arr.sink())
	s41Run(t, e)
	arr.mu.Lock()
	defer arr.mu.Unlock()
	t.Logf("arrivals: %v (order %q)", arr.at, arr.ord)
	for _, w := range []string{"x [0,100) 1", "b [500,600) 1"} {
		if i := slices.Index(arr.ord, w); i < 0 || i > slices.Index(arr.ord, "b [600,700) 1") {
			t.Errorf("%s emitted after b's next record (%q): the window waited for the idle input", w, arr.ord)
		}
	}
}
