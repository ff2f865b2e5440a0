package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/weirstream/weir/checkpoint"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestChannelBackPressure: a full channel makes Push wait until the reader
// takes an event, or until the context ends.
func TestChannelBackPressure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGate()
		c := NewLocalChannel(2, g.Ready())
		g.Add(c)
		ctx := context.Background()
		for i := range 2 {
			if err := c.Push(ctx, Event{Kind: KindBarrier, ID: checkpoint.ID(1 + i)}); err != nil {
				t.Fatal(err)
			}
		}
		pushed := make(chan error)
		go func() { pushed <- c.Push(ctx, Event{Kind: KindBarrier, ID: 3}) }()
		synctest.Wait()
		select {
		case <-pushed:
			t.Fatal("Push into a full channel did not wait")
		default:
		}
		if _, e, ok := g.Poll(func(int) bool { return false }); !ok || e.ID != 1 {
			t.Fatalf("poll: %v %v", e, ok)
		}
		if err := <-pushed; err != nil {
			t.Fatal(err)
		}
		// FIFO order holds.
		for _, want := range []checkpoint.ID{2, 3} {
			if _, e, ok := g.Poll(func(int) bool { return false }); !ok || e.ID != want {
				t.Fatalf("poll: %v %v, want %d", e, ok, want)
			}
		}
		// A blocked Push gives up when its context ends.
		c.Push(ctx, Event{Kind: KindEndOfData})
		c.Push(ctx, Event{Kind: KindEndOfData})
		cctx, cancel := context.WithCancelCause(ctx)
		go func() { pushed <- c.Push(cctx, Event{Kind: KindEndOfData}) }()
		synctest.Wait()
		cancel(ErrStopped)
		if err := <-pushed; !errors.Is(err, ErrStopped) {
			t.Fatalf("Push after cancel: %v", err)
		}
	})
}

// TestGateSkipsBlockedChannels: alignment blocks a channel; the gate reads
// the others and leaves the blocked one's events in place.
func TestGateSkipsBlockedChannels(t *testing.T) {
	g := NewGate()
	a, b := NewLocalChannel(4, g.Ready()), NewLocalChannel(4, g.Ready())
	g.Add(a)
	g.Add(b)
	ctx := context.Background()
	a.Push(ctx, Event{Kind: KindBarrier, ID: 7})
	b.Push(ctx, Event{Kind: KindBatch, Batch: []int{1}})
	b.Push(ctx, Event{Kind: KindBatch, Batch: []int{2}})
	blockA := func(c int) bool { return c == 0 }
	for _, want := range []int{1, 2} {
		ch, e, ok := g.Poll(blockA)
		if !ok || ch != 1 || e.Batch.([]int)[0] != want {
			t.Fatalf("poll: %d %v %v", ch, e, ok)
		}
	}
	if _, _, ok := g.Poll(blockA); ok {
		t.Fatal("read a blocked channel")
	}
	if ch, e, ok := g.Poll(func(int) bool { return false }); !ok || ch != 0 || e.ID != 7 {
		t.Fatalf("after unblocking: %d %v %v", ch, e, ok)
	}
}

func TestEmitterBatchesAndRoutes(t *testing.T) {
	g := NewGate()
	outs := []OutputChannel{NewLocalChannel(8, g.Ready()), NewLocalChannel(8, g.Ready())}
	e := NewEmitter[int](context.Background(), outs, func(v int) int { return v % 2 }, 3, nil)
	for v := range 7 {
		e.Collect(v)
	}
	// Evens 0,2,4 fill a batch of three; odds 1,3,5 too; 6 waits.
	if got := drain(outs[0].(*LocalChannel)); len(got) != 1 || len(got[0]) != 3 {
		t.Fatalf("even batches %v", got)
	}
	e.Broadcast(Event{Kind: KindBarrier, ID: 1})
	got := drain(outs[0].(*LocalChannel))
	if len(got) != 1 || got[0][0] != 6 {
		t.Fatalf("a barrier must follow the records before it: %v", got)
	}
}

func drain(c *LocalChannel) [][]int {
	var out [][]int
	for {
		e, ok := c.TryPop()
		if !ok || e.Kind != KindBatch {
			return out
		}
		out = append(out, e.Batch.([]int))
	}
}

func TestRestartStrategies(t *testing.T) {
	f := FixedDelay{Delay: time.Second, MaxAttempts: 2}
	for i, want := range []bool{true, true, false} {
		if d, ok := f.Next(Failures{Consecutive: i + 1}); ok != want || (ok && d != time.Second) {
			t.Errorf("fixed delay, failure %d: %v %v", i+1, d, ok)
		}
	}
	e := ExponentialBackoff{Initial: 100 * time.Millisecond, Max: time.Second, MaxAttempts: 6}
	var got []time.Duration
	for i := range 6 {
		d, ok := e.Next(Failures{Consecutive: i + 1})
		if !ok {
			t.Fatalf("gave up at failure %d", i+1)
		}
		got = append(got, d)
	}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("back-off %v, want %v ms", got, want)
		}
	}
	if _, ok := e.Next(Failures{Consecutive: 7}); ok {
		t.Fatal("exponential back-off did not give up after MaxAttempts")
	}
	if (NoRestart{}).String() == "" || validateRestart(ExponentialBackoff{Initial: 0, Max: 1}) == nil {
		t.Fatal("invalid back-off accepted")
	}
}

// TestFailureRate: at most MaxFailures within any Interval, whatever
// checkpoints completed between them (they reset Consecutive, not Times).
func TestFailureRate(t *testing.T) {
	r := FailureRate{MaxFailures: 3, Interval: time.Minute, Delay: time.Second}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var h Failures
	for i, c := range []struct {
		after time.Duration
		want  bool
	}{{0, true}, {10 * time.Second, true}, {20 * time.Second, true}, {30 * time.Second, false}, {2 * time.Minute, true}} {
		h.Times = append(h.Times, t0.Add(c.after))
		h.Consecutive = 1 // a checkpoint completed before each failure
		if d, ok := r.Next(h); ok != c.want || d != time.Second {
			t.Errorf("failure %d at +%v: %v %v, want %v", i+1, c.after, d, ok, c.want)
		}
	}
	if validateRestart(FailureRate{MaxFailures: 0, Interval: time.Minute}) == nil || validateRestart(FailureRate{MaxFailures: 1}) == nil {
		t.Fatal("invalid failure rate accepted")
	}
}

func TestEventKindsHaveNames(t *testing.T) {
	for k := EventRunning; k <= EventFinished; k++ {
		if s := k.String(); s == "" || strings.HasPrefix(s, "event(") {
			t.Errorf("event kind %d has no name: %q", int(k), s)
		}
	}
}

// TestBatchesComeBack: a consumer on another goroutine hands every batch
// back after reading it; the emitter fills those again, so a long stream
// uses no more batches than the channel holds plus the one being read and
// the one being filled, and every record arrives once, in order, whatever
// a reused batch held before.
func TestBatchesComeBack(t *testing.T) {
	const capacity, size, n = 4, 16, 100_000
	g := NewGate()
	lc := NewLocalChannel(capacity, g.Ready())
	g.Add(lc)
	e := NewEmitter[int](context.Background(), []OutputChannel{lc}, nil, size, nil)
	arrays := map[*int]bool{}
	done := make(chan error, 1)
	go func() {
		next := 0
		for next < n {
			i, ev, ok := g.Poll(func(int) bool { return false })
			if !ok {
				<-g.Ready()
				continue
			}
			b := ev.Batch.([]int)
			arrays[&b[:1][0]] = true
			for _, v := range b {
				if v != next {
					done <- fmt.Errorf("got record %d, want %d", v, next)
					return
				}
				next++
			}
			g.Recycle(i, ev)
		}
		done <- nil
	}()
	for v := range n {
		e.Collect(v)
	}
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(arrays) > capacity+2 {
		t.Errorf("%d batches of %d records carried %d records through a channel of %d: want at most %d", len(arrays), size, n, capacity, capacity+2)
	}
}
