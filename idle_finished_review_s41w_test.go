package weir_test

import (
	"testing"
	"time"

	"github.com/weirstream/weir"
)

// A bounded input that has ended must not stand for "event time is over"
// while another input of the same operator is only idle: a finished
// input's watermark (the end, MaxTime) left alone among the inputs that
// are not idle moved the union, and the window behind it, to the end of
// event time, so every record the idle source sent after its pause was
// late and dropped. Flink's issue FLINK-38477 describes the same symptom
// (an interval join with zero output) as a bug: a finished input should
// be left out of the minimum as an idle one is.
func TestS41FinishedInputAndIdleInputDoNotEndEventTime(t *testing.T) {
	e := s41Env(1)
	// A: a bounded table of one record, which ends at once.
	a := weir.Source(e, "bounded", s41Script(recs(s41ev{"x", 1, 1})),
		weir.Watermarks(weir.BoundedOutOfOrderness(0, s41At)))
	// B: a stream that pauses (a quiet Kafka partition), idle after 20 ms,
	// then goes on.
	b := weir.Source(e, "stream", s41Script(
		recs(s41ev{"b", 10, 1}, s41ev{"b", 20, 1}),
		s41step{Idle: 400 * time.Millisecond},
		recs(s41ev{"b", 30, 1}, s41ev{"b", 40, 1}),
	), weir.Watermarks(weir.BoundedOutOfOrderness(0, s41At).WithIdleness(20*time.Millisecond)))
	u := weir.Union(a, "union", []*weir.Stream[s41ev]{b})
	c := weir.WindowAggregate(weir.Window(weir.KeyBy(u, func(e s41ev) string { return e.Key }), weir.Tumbling(time.Second)),
		"count", weir.Count[s41ev]())
	var got collect[weir.WindowResult[string, int64]]
	weir.Sink(c, "out", got.sink())
	s41Run(t, e)
	s41Diff(t, s41Fmt(got.values()), []string{"b [0,1000) 4", "x [0,1000) 1"})
}

// The same through an interval join (FLINK-38477's case): orders from a
// bounded source, payments from an idle-then-active stream.
func TestS41FinishedInputAndIdleInputIntervalJoin(t *testing.T) {
	e := s41Env(1)
	a := weir.Source(e, "orders", s41Script(recs(s41ev{"k", 100, 1})),
		weir.Watermarks(weir.BoundedOutOfOrderness(0, s41At)))
	b := weir.Source(e, "payments", s41Script(
		recs(s41ev{"other", 50, 0}),
		s41step{Idle: 400 * time.Millisecond},
		recs(s41ev{"k", 150, 2}),
	), weir.Watermarks(weir.BoundedOutOfOrderness(0, s41At).WithIdleness(20*time.Millisecond)))
	key := func(e s41ev) string { return e.Key }
	j := weir.IntervalJoin(weir.KeyBy(a, key), weir.KeyBy(b, key), 0, time.Second, "join", func(x, y s41ev) string {
		return x.Key
	})
	var got collect[string]
	weir.Sink(j, "out", got.sink())
	s41Run(t, e)
	s41Diff(t, got.values(), []string{"k"})
}

// Control: the same job with the bounded input still open (it ends after
// the stream's pause) counts all four records.
func TestS41FinishedInputControlStillOpen(t *testing.T) {
	e := s41Env(1)
	a := weir.Source(e, "bounded", s41Script(recs(s41ev{"x", 1, 1}), s41step{Idle: 600 * time.Millisecond}),
		weir.Watermarks(weir.BoundedOutOfOrderness(0, s41At)))
	b := weir.Source(e, "stream", s41Script(
		recs(s41ev{"b", 10, 1}, s41ev{"b", 20, 1}),
		s41step{Idle: 400 * time.Millisecond},
		recs(s41ev{"b", 30, 1}, s41ev{"b", 40, 1}),
	), weir.Watermarks(weir.BoundedOutOfOrderness(0, s41At).WithIdleness(20*time.Millisecond)))
	u := weir.Union(a, "union", []*weir.Stream[s41ev]{b})
	c := weir.WindowAggregate(weir.Window(weir.KeyBy(u, func(e s41ev) string { return e.Key }), weir.Tumbling(time.Second)),
		"count", weir.Count[s41ev]())
	var got collect[weir.WindowResult[string, int64]]
	weir.Sink(c, "out", got.sink())
	s41Run(t, e)
	s41Diff(t, s41Fmt(got.values()), []string{"b [0,1000) 4", "x [0,1000) 1"})
}
