package weir_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/generator"
)

type failingTimer struct{ domain weir.TimeDomain }

func (f failingTimer) Process(c *weir.KeyedContext[int64], v int64, out weir.Collector[int64]) error {
	if f.domain == weir.EventTime {
		c.RegisterEventTimer(time.UnixMilli(v))
	} else {
		c.RegisterTimer(c.Now())
	}
	return nil
}

func (failingTimer) OnTimer(c *weir.KeyedContext[int64], at time.Time, out weir.Collector[int64]) error {
	return weir.Permanent(errors.New("timer boom"))
}

// An error returned from OnTimer names the operator, as one from Process
// does ("p: record 7 ...").
func TestReviewKPFOnTimerErrorNamesOperator(t *testing.T) {
	for _, d := range []weir.TimeDomain{weir.EventTime, weir.ProcessingTime} {
		t.Run(d.String(), func(t *testing.T) {
			e := env(weir.Config{})
			src := weir.Source(e, "n", gen(t, 50, func(i int64) int64 { return i }), weir.Watermarks(weir.Monotonous(func(v int64) time.Time { return time.UnixMilli(v) })))
			mid := weir.Map(src, "mid", func(v int64) int64 { return v })
			out := weir.Process(weir.KeyBy(mid, func(v int64) int64 { return v % 3 }), "the-timer-op",
				func() weir.KeyedProcessFunction[int64, int64, int64] { return failingTimer{d} })
			weir.Sink(out, "out", (&collect[int64]{}).sink())
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := e.Execute(ctx)
			if err == nil || !strings.Contains(err.Error(), "timer boom") {
				t.Fatalf("err %v", err)
			}
			if !strings.Contains(err.Error(), "the-timer-op") {
				t.Fatalf("the error does not name the operator whose OnTimer failed: %v", err)
			}
			t.Log(err)
		})
	}
}

type evNoTime struct{}

func (evNoTime) Process(c *weir.KeyedContext[int64], v int64, out weir.Collector[int64]) error {
	c.RegisterEventTimer(time.UnixMilli(v))
	return nil
}

func (evNoTime) OnTimer(c *weir.KeyedContext[int64], at time.Time, out weir.Collector[int64]) error {
	out.Collect(at.UnixMilli())
	return nil
}

// Event-time timers all fire at the end of the input (the doc of
// RegisterEventTimer), on a stream without event time too.
func TestReviewKPFEventTimersFireAtEndWithoutEventTime(t *testing.T) {
	e := env(weir.Config{Parallelism: 2})
	src := weir.Source(e, "n", gen(t, 20, func(i int64) int64 { return i }))
	got := &collect[int64]{}
	weir.Sink(weir.Process(weir.KeyBy(src, func(v int64) int64 { return v }), "p",
		func() weir.KeyedProcessFunction[int64, int64, int64] { return evNoTime{} }), "out", got.sink())
	execute(t, e)
	if n := len(got.values()); n != 20 {
		t.Fatalf("%d of 20 event timers fired: %v", n, got.values())
	}
}

type ptAll struct{ domain weir.TimeDomain }

func (p ptAll) Process(c *weir.KeyedContext[int64], v int64, out weir.Collector[int64]) error {
	if p.domain == weir.EventTime {
		c.RegisterEventTimer(time.UnixMilli(1_000_000))
	} else {
		c.RegisterTimer(time.UnixMilli(1)) // long due
	}
	return nil
}

func (ptAll) OnTimer(c *weir.KeyedContext[int64], at time.Time, out weir.Collector[int64]) error {
	out.Collect(c.Key())
	return nil
}

// A chained sink that failed is not written to again by the timers that
// follow in the same firing (event time stops at the first failure).
func TestReviewKPFSinkWrittenAfterFailureByProcessingTimers(t *testing.T) {
	for _, d := range []weir.TimeDomain{weir.EventTime, weir.ProcessingTime} {
		t.Run(d.String(), func(t *testing.T) {
			e := env(weir.Config{})
			g, err := generator.New(generator.Config[int64]{Count: 10, Make: func(i int64) int64 { return i }, BatchSize: 10})
			if err != nil {
				t.Fatal(err)
			}
			// a second batch much later, so that due timers get a turn
			g2, err := generator.New(generator.Config[int64]{Count: 20, Make: func(i int64) int64 { return i }, BatchSize: 10, RatePerSecond: 100})
			if err != nil {
				t.Fatal(err)
			}
			src := weir.Union(weir.Source(e, "n", g, weir.Watermarks(weir.Monotonous(func(v int64) time.Time { return time.UnixMilli(v) }))), "u",
				[]*weir.Stream[int64]{weir.Source(e, "slow", g2, weir.Watermarks(weir.Monotonous(func(v int64) time.Time { return time.UnixMilli(v) })))})
			out := weir.Process(weir.KeyBy(src, func(v int64) int64 { return v }), "p",
				func() weir.KeyedProcessFunction[int64, int64, int64] { return ptAll{d} })
			calls := 0
			weir.Sink(out, "out", weir.SinkFunc(func(v int64) error {
				calls++
				return weir.Permanent(errors.New("sink down"))
			}))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err = e.Execute(ctx)
			if err == nil || !strings.Contains(err.Error(), "sink down") {
				t.Fatalf("err %v", err)
			}
			if calls != 1 {
				t.Fatalf("the failed sink was written %d times (%v)", calls, err)
			}
		})
	}
}

type dueTimer struct{}

func (dueTimer) Process(c *weir.KeyedContext[int64], v int64, out weir.Collector[int64]) error {
	c.RegisterTimer(c.Now().Add(-time.Hour)) // due when registered
	return nil
}

func (dueTimer) OnTimer(c *weir.KeyedContext[int64], at time.Time, out weir.Collector[int64]) error {
	out.Collect(c.Key())
	return nil
}

// RegisterTimer: "At the end of the input, timers that are not due yet do
// not fire": a timer already due when registered fires.
func TestReviewKPFDueProcessingTimerFiresBeforeEnd(t *testing.T) {
	e := env(weir.Config{})
	src := weir.Source(e, "n", gen(t, 50, func(i int64) int64 { return i }))
	got := &collect[int64]{}
	weir.Sink(weir.Process(weir.KeyBy(src, func(v int64) int64 { return v }), "p",
		func() weir.KeyedProcessFunction[int64, int64, int64] { return dueTimer{} }), "out", got.sink())
	execute(t, e)
	if n := len(got.values()); n != 50 {
		t.Fatalf("%d of 50 processing-time timers, due when registered, fired", n)
	}
}

type dueTimer1 struct{}

func (dueTimer1) Process(c *weir.KeyedContext[int64], v int64, out weir.Collector[int64]) error {
	c.RegisterTimer(time.UnixMilli(1)) // due when registered
	return nil
}

func (dueTimer1) OnTimer(c *weir.KeyedContext[int64], at time.Time, out weir.Collector[int64]) error {
	out.Collect(c.Key())
	return nil
}

func TestReviewKPFDueProcessingTimerFiresBeforeEndWM(t *testing.T) {
	for _, wm := range []bool{false, true} {
		for _, one := range []bool{false, true} {
			t.Run(fmt.Sprint(wm, one), func(t *testing.T) {
				e := env(weir.Config{})
				var opts []weir.Option
				if wm {
					opts = append(opts, weir.Watermarks(weir.Monotonous(func(v int64) time.Time { return time.UnixMilli(v) })))
				}
				src := weir.Source(e, "n", gen(t, 50, func(i int64) int64 { return i }), opts...)
				got := &collect[int64]{}
				weir.Sink(weir.Process(weir.KeyBy(src, func(v int64) int64 { return v }), "p",
					func() weir.KeyedProcessFunction[int64, int64, int64] {
						if one {
							return dueTimer1{}
						}
						return dueTimer{}
					}), "out", got.sink())
				execute(t, e)
				if n := len(got.values()); n != 50 {
					t.Fatalf("%d of 50 processing-time timers, due when registered, fired", n)
				}
			})
		}
	}
}

type openTimer struct{}

func (openTimer) Open(c *weir.KeyedContext[int64]) error {
	c.RegisterEventTimer(time.UnixMilli(5)) // no current key
	return nil
}

func (openTimer) Process(c *weir.KeyedContext[int64], v int64, out weir.Collector[int64]) error {
	return nil
}

func (openTimer) OnTimer(c *weir.KeyedContext[int64], at time.Time, out weir.Collector[int64]) error {
	out.Collect(c.Key())
	return nil
}

// TestReviewKPFTimerInOpenEndToEnd: a timer registered in Open has no key
// to belong to: Flink throws ("No key set"), and so does Weir; it
// registered the timer for the zero key in every subtask.
func TestReviewKPFTimerInOpenEndToEnd(t *testing.T) {
	e := env(weir.Config{Parallelism: 3})
	src := weir.Source(e, "n", gen(t, 50, func(i int64) int64 { return i + 1 }))
	got := &collect[int64]{}
	weir.Sink(weir.Process(weir.KeyBy(src, func(v int64) int64 { return v }), "p",
		func() weir.KeyedProcessFunction[int64, int64, int64] { return openTimer{} }), "out", got.sink())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := e.Execute(ctx)
	if err == nil || !strings.Contains(err.Error(), "p used keyed state or a timer in Open, where there is no current key") {
		t.Fatalf("registering a timer in Open: %v (OnTimer ran for keys %v), want the job failed, saying there is no current key", err, got.values())
	}
}
