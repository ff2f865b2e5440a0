package weir_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

// twoStates counts records per key in state "a" and, when it declares
// "b", counts them there too but clears the count of every tenth key at
// its second record (a deletion in a delta). With report, it emits each
// record's key and its count in b, and changes nothing.
type twoStates struct {
	declareB, report bool
	a, b             *weir.ValueState[int64, int64]
}

func (f *twoStates) Open(c *weir.KeyedContext[int64]) (err error) {
	if f.a, err = weir.NewValueState[int64, int64](c, "a"); err != nil || !f.declareB {
		return err
	}
	f.b, err = weir.NewValueState[int64, int64](c, "b")
	return err
}

func (f *twoStates) Process(c *weir.KeyedContext[int64], v int64, out weir.Collector[string]) error {
	if f.report {
		n, ok := f.b.Value()
		out.Collect(fmt.Sprint(c.Key(), " ", n, " ", ok))
		return nil
	}
	n, _ := f.a.Value()
	f.a.Update(n + 1)
	if f.b == nil {
		return nil
	}
	switch n, _ := f.b.Value(); {
	case c.Key()%10 == 0 && n == 1:
		f.b.Clear()
	default:
		f.b.Update(n + 1)
	}
	return nil
}

// TestUndeclaredStateSurvivesFullCheckpoints: a job restored from an
// incremental heap checkpoint with state it no longer declares, into full
// heap checkpoints or into Pebble (whose timers stay on a full heap
// backend), checkpoints as usual, and a later run on the same backend that
// declares the state again finds it as the first run left it (on Pebble,
// moved into the database then; the heap backend refuses a Pebble
// checkpoint: see switch_test.go).
func TestUndeclaredStateSurvivesFullCheckpoints(t *testing.T) {
	for _, tc := range []struct {
		name string
		sb   func(t *testing.T) weir.StateBackend
	}{
		{"heap full", func(*testing.T) weir.StateBackend { return weir.StateBackend{Full: true} }},
		{"pebble", func(t *testing.T) weir.StateBackend {
			return weir.StateBackend{Kind: weir.PebbleState, Dir: t.TempDir()}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ckpt := filepath.Join(t.TempDir(), "ckpt")
			// run runs the job at its n-th run: sources nums1..numsN (those
			// of earlier runs restored, exhausted), the n-th of count
			// records. It returns what the job emitted and how many
			// checkpoints completed.
			run := func(n int, sb weir.StateBackend, count int64, f twoStates) ([]string, int) {
				t.Helper()
				completed, restore := 0, ""
				if n > 1 {
					restore = "latest"
				}
				e := weir.New(weir.Config{Job: "undeclared", Parallelism: 2, StateBackend: sb, Restore: restore,
					Checkpoint: weir.CheckpointConfig{Interval: 5 * time.Millisecond, Dir: ckpt},
					OnEvent: func(ev weir.JobEvent) {
						if ev.Kind == weir.EventCheckpointCompleted {
							completed++
						}
					}})
				in := numberRuns(t, e, n, count)
				var c collect[string]
				out := weir.Process(weir.KeyBy(in, func(v int64) int64 { return v % 1000 }), "count",
					func() weir.KeyedProcessFunction[int64, int64, string] { f := f; return &f })
				weir.Sink(out, "out", c.sink())
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if res, err := e.Execute(ctx); err != nil || res.Attempts != 1 {
					t.Fatalf("run %d: %v after %d attempts", n, err, res.Attempts)
				}
				return c.values(), completed
			}
			// Two records a key, the first of each before the second of any:
			// the keys' groups take deltas after their first sections.
			run(1, weir.StateBackend{}, 2000, twoStates{declareB: true})
			if _, completed := run(2, tc.sb(t), 1000, twoStates{}); completed < 2 {
				t.Fatalf("%d checkpoints completed after the restore that left b undeclared", completed)
			}
			got, _ := run(3, tc.sb(t), 1000, twoStates{declareB: true, report: true})
			if len(got) != 1000 {
				t.Fatalf("%d records reported, want 1000", len(got))
			}
			for _, l := range got {
				var k, n int64
				var ok bool
				if _, err := fmt.Sscan(l, &k, &n, &ok); err != nil {
					t.Fatal(err)
				}
				if want := k%10 != 0; ok != want || (ok && n != 2) {
					t.Fatalf("key %d: b = %d %v, want 2 %v", k, n, ok, want)
				}
			}
		})
	}
}
