package weir_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

// keyFn keeps one ValueState[K, int64] named "acc"; at each record it
// emits the key and what the state held before, and stores 1000+x.
type keyFn[K comparable] struct{ s *weir.ValueState[K, int64] }

func (f *keyFn[K]) Open(c *weir.KeyedContext[K]) (err error) {
	f.s, err = weir.NewValueState[K, int64](c, "acc")
	return err
}

func (f *keyFn[K]) Process(c *weir.KeyedContext[K], x int64, out weir.Collector[string]) error {
	v, ok := f.s.Value()
	out.Collect(fmt.Sprintf("%v %v %d", c.Key(), ok, v))
	f.s.Update(1000 + x)
	return nil
}

func keyJob[K comparable](key func(int64) K) func(in *weir.Stream[int64]) *weir.Stream[string] {
	return func(in *weir.Stream[int64]) *weir.Stream[string] {
		return weir.Process(weir.KeyBy(in, key), "acc",
			func() weir.KeyedProcessFunction[K, int64, string] { return &keyFn[K]{} })
	}
}

// TestReviewS40KeyTypeInt64ToString: KeyBy's key goes from int64 to
// string (the same keys, printed) under the same UID. Flink refuses (the
// key serializer is incompatible).
func TestReviewS40KeyTypeInt64ToString(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ckpt := filepath.Join(t.TempDir(), "ckpt")
			sb := b.sb(t)
			if _, _, err := evolveRun(t, ckpt, 1, 2, sb, 10, keyJob(func(v int64) int64 { return v % 10 })); err != nil {
				t.Fatal(err)
			}
			got, res, err := evolveRun(t, ckpt, 2, 2, sb, 10, keyJob(func(v int64) string { return fmt.Sprint(v % 10) }))
			t.Logf("err=%.300v attempts=%d got=%q", err, res.Attempts, got)
			if err == nil {
				for _, l := range got {
					var k, v int64
					var ok bool
					if _, e := fmt.Sscanf(l, "%d %t %d", &k, &ok, &v); e != nil || !ok || v != 1000+k {
						t.Errorf("%q: want key %d's old value %d (%v)", l, k, 1000+k, e)
					}
				}
				return
			}
			checkRefused(t, got, res, err, "acc", "key")
		})
	}
}

// TestReviewS40KeyTypeInt64ToUint64: KeyBy's key goes from int64 to
// uint64 ("ids are never negative") under the same UID.
func TestReviewS40KeyTypeInt64ToUint64(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ckpt := filepath.Join(t.TempDir(), "ckpt")
			sb := b.sb(t)
			if _, _, err := evolveRun(t, ckpt, 1, 2, sb, 10, keyJob(func(v int64) int64 { return v % 10 })); err != nil {
				t.Fatal(err)
			}
			got, res, err := evolveRun(t, ckpt, 2, 2, sb, 10, keyJob(func(v int64) uint64 { return uint64(v % 10) }))
			t.Logf("err=%.300v attempts=%d got=%q", err, res.Attempts, got)
			if err == nil {
				for _, l := range got {
					var k, v int64
					var ok bool
					if _, e := fmt.Sscanf(l, "%d %t %d", &k, &ok, &v); e != nil || !ok || v != 1000+k {
						t.Errorf("%q: want key %d's old value %d (%v)", l, k, 1000+k, e)
					}
				}
				return
			}
			checkRefused(t, got, res, err, "acc", "key")
		})
	}
}

// farTimer registers, for each record x, an event-time timer at
// x+1,000,000 ms (records' event time is x ms), far past the input: none
// fires before the end of input. OnTimer emits key and instant.
type farTimer struct{}

func (farTimer) Process(c *weir.KeyedContext[int64], x int64, out weir.Collector[string]) error {
	c.RegisterEventTimer(time.UnixMilli(x + 1_000_000))
	return nil
}

func (farTimer) OnTimer(c *weir.KeyedContext[int64], at time.Time, out weir.Collector[string]) error {
	out.Collect(fmt.Sprint(c.Key(), "@", at.UnixMilli()))
	return nil
}

// cancelRun runs job "timers" on a rate-limited source "nums" of count
// numbers (event time: the number, in ms) at parallelism p; with
// stopAfter > 0 it cancels the job when stopAfter checkpoints completed.
func cancelRun(t *testing.T, ckpt string, restore bool, p int, sb weir.StateBackend, count int64, stopAfter int,
	build func(in *weir.Stream[int64]) *weir.Stream[string], opt func(*weir.Config)) ([]string, weir.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var done atomic.Int32
	cfg := weir.Config{Job: "timers", Parallelism: p, StateBackend: sb,
		Checkpoint: weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: ckpt},
		OnEvent: func(ev weir.JobEvent) {
			if ev.Kind == weir.EventCheckpointCompleted && stopAfter > 0 && int(done.Add(1)) == stopAfter {
				cancel()
			}
		}}
	if restore {
		cfg.Restore = "latest"
	}
	if opt != nil {
		opt(&cfg)
	}
	e := weir.New(cfg)
	g, err := newRateLimited(2000, count)
	if err != nil {
		t.Fatal(err)
	}
	in := weir.Source(e, "nums", g, weir.Watermarks(weir.BoundedOutOfOrderness(0, func(v int64) time.Time { return time.UnixMilli(v) })))
	var c collect[string]
	weir.Sink(build(in), "out", c.sink())
	res, err := e.Execute(ctx)
	got := c.values()
	slices.Sort(got)
	if stopAfter > 0 && errors.Is(err, context.Canceled) {
		err = nil
	}
	return got, res, err
}

func farTimerJob(in *weir.Stream[int64]) *weir.Stream[string] {
	return weir.Process(weir.KeyBy(in, func(v int64) int64 { return v % 50 }), "timers",
		func() weir.KeyedProcessFunction[int64, int64, string] { return farTimer{} })
}

// TestReviewS40TimersRescaled1To7To3: pending event-time timers survive
// two rescales (1 → 7 → 3): at the end every record's timer fires once.
func TestReviewS40TimersRescaled1To7To3(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ckpt := filepath.Join(t.TempDir(), "ckpt")
			const count = 3000
			for i, p := range []int{1, 7} {
				if _, _, err := cancelRun(t, ckpt, i > 0, p, b.sb(t), count, 3, farTimerJob, nil); err != nil {
					t.Fatalf("run %d at %d: %v", i+1, p, err)
				}
			}
			got, _, err := cancelRun(t, ckpt, true, 3, b.sb(t), count, 0, farTimerJob, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]string, 0, count)
			for x := int64(0); x < count; x++ {
				want = append(want, fmt.Sprint(x%50, "@", x+1_000_000))
			}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				missing, extra := 0, 0
				for _, w := range want {
					if !slices.Contains(got, w) {
						missing++
					}
				}
				extra = len(got) - (len(want) - missing)
				t.Fatalf("%d timers fired, want %d: %d missing, %d extra", len(got), len(want), missing, extra)
			}
		})
	}
}

// TestReviewS40TimerKeyTypeChanged: the key type of an operator with only
// pending timers (no keyed state) changes from int64 to string.
func TestReviewS40TimerKeyTypeChanged(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ckpt := filepath.Join(t.TempDir(), "ckpt")
			if _, _, err := cancelRun(t, ckpt, false, 2, b.sb(t), 3000, 3, farTimerJob, nil); err != nil {
				t.Fatal(err)
			}
			got, res, err := cancelRun(t, ckpt, true, 2, b.sb(t), 3000, 0, func(in *weir.Stream[int64]) *weir.Stream[string] {
				return weir.Process(weir.KeyBy(in, func(v int64) string { return fmt.Sprint(v % 50) }), "timers",
					func() weir.KeyedProcessFunction[string, int64, string] { return farTimerS{} })
			}, nil)
			t.Logf("err=%.300v attempts=%d got %d", err, res.Attempts, len(got))
			if err == nil {
				for _, l := range got {
					var k, at int64
					if _, e := fmt.Sscanf(l, "%d@%d", &k, &at); e != nil || (at-1_000_000)%50 != k {
						t.Errorf("timer %q: its key is not its record's (%v)", l, e)
					}
				}
				if len(got) != 3000 {
					t.Errorf("%d timers fired, want 3000", len(got))
				}
				return
			}
			checkRefused(t, got, res, err, "timers", "key")
		})
	}
}

type farTimerS struct{}

func (farTimerS) Process(c *weir.KeyedContext[string], x int64, out weir.Collector[string]) error {
	c.RegisterEventTimer(time.UnixMilli(x + 1_000_000))
	return nil
}

func (farTimerS) OnTimer(c *weir.KeyedContext[string], at time.Time, out weir.Collector[string]) error {
	out.Collect(fmt.Sprint(c.Key(), "@", at.UnixMilli()))
	return nil
}

// TestReviewS40MaxParallelismTimersOnly: an operator whose only keyed
// state is pending timers, restored under another max parallelism, is
// refused as keyed state is (timers are in key groups too).
func TestReviewS40MaxParallelismTimersOnly(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ckpt := filepath.Join(t.TempDir(), "ckpt")
			if _, _, err := cancelRun(t, ckpt, false, 2, b.sb(t), 3000, 3, farTimerJob, nil); err != nil {
				t.Fatal(err)
			}
			got, res, err := cancelRun(t, ckpt, true, 2, b.sb(t), 3000, 0, farTimerJob, func(c *weir.Config) { c.MaxParallelism = 64 })
			t.Logf("err=%.300v attempts=%d got %d", err, res.Attempts, len(got))
			if err == nil || !strings.Contains(err.Error(), "max parallelism") {
				t.Fatalf("restored under max parallelism 64 a checkpoint taken under 128: %v; %d timers fired, want 3000", err, len(got))
			}
		})
	}
}
