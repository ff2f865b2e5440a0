package weir_test

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/connector/generator"
)

// event is a view or a click of a user, at an event time in ms.
type event struct {
	ID, User, At int64
}

const joinEvents = 4000

// joinCount is the events of each side joinJob reads on backend sb: half
// as many on Pebble under -race, which checks its invariants there (a
// stack trace for every file an iterator opens: 20 times slower).
func joinCount(sb weir.StateBackend) int64 {
	if sb.Kind == weir.PebbleState && weir.RaceEnabled {
		return joinEvents / 2
	}
	return joinEvents
}

// views and clicks: 4000 each, 5 ms apart, up to 90 ms out of order; 10
// users, so each user has a view and a click about every 50 ms.
func view(i int64) event { return event{ID: i, User: i % 10, At: 1_000_000 + i*5 - (i*7919)%19*5} }
func click(i int64) event {
	return event{ID: i, User: (i * 7) % 10, At: 1_000_002 + i*5 - (i*104729)%19*5}
}

func eventAt(e event) time.Time { return time.UnixMilli(e.At) }

// joinJob runs a window join (tumbling 1 s), an interval join (a click
// from 50 ms before to 100 ms after a view) and a regular join (views and
// clicks by ID modulo 400) of the same two streams (joinCount events each)
// into one exactly-once file sink in out; slow sources last 10 s. fail,
// if set, sees every view before the joins.
func joinJob(t *testing.T, cfg weir.Config, out string, slow bool, fail func(event)) *weir.Environment {
	t.Helper()
	e := env(cfg)
	n := joinCount(cfg.StateBackend)
	rate := 20_000.0
	if slow {
		rate = float64(n) / 10
	}
	source := func(name string, make func(int64) event) *weir.Stream[event] {
		g, err := generator.New(generator.Config[event]{Count: n, Make: make, BatchSize: 4, RatePerSecond: rate})
		if err != nil {
			t.Fatal(err)
		}
		return weir.Source(e, name, g, weir.Watermarks(weir.BoundedOutOfOrderness(100*time.Millisecond, eventAt)))
	}
	views := weir.Map(source("views", view), "check", func(v event) event {
		if fail != nil {
			fail(v)
		}
		return v
	})
	clicks := source("clicks", click)
	byUser := func(e event) int64 { return e.User }
	vu, cu := weir.KeyBy(views, byUser), weir.KeyBy(clicks, byUser)

	windowed := weir.WindowJoin(vu, cu, weir.Tumbling(time.Second), "window join", func(v, c event) string {
		return fmt.Sprintf("window %d %d %d", v.User, v.ID, c.ID)
	})
	interval := weir.IntervalJoin(vu, cu, -50*time.Millisecond, 100*time.Millisecond, "interval join", func(v, c event) string {
		return fmt.Sprintf("interval %d %d %d", v.User, v.ID, c.ID)
	})
	byMod := func(e event) int64 { return e.ID % 400 }
	regular := weir.Join(weir.KeyBy(views, byMod), weir.KeyBy(clicks, byMod), "join", func(v, c event) string {
		return fmt.Sprintf("join %d %d", v.ID, c.ID)
	}, weir.JoinConfig{})

	sink, err := file.Sink(file.SinkConfig[string]{Dir: out, Format: lineFormat})
	if err != nil {
		t.Fatal(err)
	}
	weir.Sink(weir.Union(windowed, "joined", []*weir.Stream[string]{interval, regular}), "out", sink)
	return e
}

// joinBruteForce computes joinJob's results over n events of each side by
// comparing every pair.
func joinBruteForce(n int64) []string {
	var out []string
	for i := range n {
		v := view(i)
		for j := range n {
			c := click(j)
			if v.User == c.User && v.At/1000 == c.At/1000 {
				out = append(out, fmt.Sprintf("window %d %d %d", v.User, v.ID, c.ID))
			}
			if v.User == c.User && v.At-50 <= c.At && c.At <= v.At+100 {
				out = append(out, fmt.Sprintf("interval %d %d %d", v.User, v.ID, c.ID))
			}
			if v.ID%400 == c.ID%400 {
				out = append(out, fmt.Sprintf("join %d %d", v.ID, c.ID))
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestJoins: window, interval and regular joins of out-of-order streams
// give every matching pair once, as comparing all pairs does; so does a
// run that fails midway and restores.
func TestJoins(t *testing.T) {
	onBackends(t, func(t *testing.T, sb weir.StateBackend) {
		testJoins(t, sb, joinBruteForce(joinCount(sb)))
	})
}

func testJoins(t *testing.T, sb weir.StateBackend, want []string) {
	kinds := map[string]int{}
	for _, l := range want {
		kinds[l[:4]]++
	}
	if kinds["wind"] == 0 || kinds["inte"] == 0 || kinds["join"] == 0 {
		t.Fatalf("the data gives no pairs of some join: %v", kinds)
	}
	diff := func(got []string) string {
		missing, extra := 0, 0
		i, j := 0, 0
		for i < len(got) || j < len(want) {
			switch {
			case j == len(want) || i < len(got) && got[i] < want[j]:
				extra++
				i++
			case i == len(got) || got[i] > want[j]:
				missing++
				j++
			default:
				i++
				j++
			}
		}
		return fmt.Sprintf("%d results, want %d (%v): %d missing, %d extra", len(got), len(want), kinds, missing, extra)
	}
	if got := runOnce(t, sb, false, func(cfg weir.Config, out string) *weir.Environment { return joinJob(t, cfg, out, false, nil) }); !slices.Equal(got, want) {
		t.Fatal(diff(got))
	}
	var n atomic.Int64
	got := runOnce(t, sb, true, func(cfg weir.Config, out string) *weir.Environment {
		return joinJob(t, cfg, out, false, func(event) {
			if n.Add(1) == joinCount(sb)/2 {
				panic(errors.New("injected failure"))
			}
		})
	})
	if !slices.Equal(got, want) {
		t.Fatal("after a failure: " + diff(got))
	}
	got = runRescaled(t, sb, []int{2, 3, 1}, func(cfg weir.Config, out string, slow bool) *weir.Environment { return joinJob(t, cfg, out, slow, nil) })
	if !slices.Equal(got, want) {
		t.Fatal("rescaled 2 → 3 → 1: " + diff(got))
	}
}
