package sim

import (
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/checkpoint/barrier"
)

var (
	seeds    = flag.Int("sim.seeds", 2000, "number of seeds per mode")
	first    = flag.Int64("sim.first", 1, "first seed")
	only     = flag.Int64("sim.seed", 0, "run only this seed (with -v, trace it)")
	modeFlag = flag.String("sim.mode", "", "run only this mode: exactly-once or at-least-once")
)

func modes(t *testing.T) []barrier.Mode {
	switch *modeFlag {
	case "":
		return []barrier.Mode{barrier.ExactlyOnce, barrier.AtLeastOnce}
	case "exactly-once":
		return []barrier.Mode{barrier.ExactlyOnce}
	case "at-least-once":
		return []barrier.Mode{barrier.AtLeastOnce}
	}
	t.Fatalf("-sim.mode %q: want exactly-once or at-least-once", *modeFlag)
	return nil
}

func replay(seed int64, mode barrier.Mode) string {
	return fmt.Sprintf("go test ./internal/sim -run 'TestSimulation$' -sim.seed=%d -sim.mode=%s -v", seed, mode)
}

// TestSimulation runs the real coordinator and aligners through -sim.seeds
// random schedules per mode, with crashes and failures, and checks every
// invariant on each.
func TestSimulation(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(mode.String(), func(t *testing.T) {
			lo, hi := *first, *first+int64(*seeds)
			if *only != 0 {
				lo, hi = *only, *only+1
			}
			var total Result
			start := time.Now()
			for seed := lo; seed < hi; seed++ {
				cfg := Config{Seed: seed, Mode: mode}
				if *only != 0 && testing.Verbose() {
					cfg.Trace = func(s string) { t.Log(s) }
				}
				res, err := Run(cfg)
				if err != nil {
					t.Fatalf("%v\nreplay: %s", err, replay(seed, mode))
				}
				total.Steps += res.Steps
				total.TaskCrashes += res.TaskCrashes
				total.ProcessCrashes += res.ProcessCrashes
				total.Completed += res.Completed
				total.Aborted += res.Aborted
			}
			t.Logf("%d seeds in %v: %d steps, %d task crashes, %d process crashes, %d checkpoints completed, %d aborted",
				hi-lo, time.Since(start).Round(time.Millisecond), total.Steps, total.TaskCrashes, total.ProcessCrashes, total.Completed, total.Aborted)
			// The runs must exercise what they claim to.
			if hi-lo >= 200 && (total.TaskCrashes == 0 || total.ProcessCrashes == 0 || total.Completed == 0 || total.Aborted == 0) {
				t.Fatalf("the simulation did not exercise crashes, completions and aborts: %+v", total)
			}
		})
	}
}

// forwardingAligner is a deliberately faulty exactly-once aligner: it
// snapshots and forwards on the first barrier of a checkpoint, never blocking
// the channels that delivered it.
type forwardingAligner struct {
	channels, ended int
	lastDone        checkpoint.ID
}

func (a *forwardingAligner) OnBarrier(_ int, id checkpoint.ID) []barrier.Action {
	if id <= a.lastDone {
		return nil
	}
	a.lastDone = id
	return []barrier.Action{barrier.Snapshot{ID: id}, barrier.Forward{ID: id}}
}
func (a *forwardingAligner) OnCancel(int, checkpoint.ID) []barrier.Action { return nil }
func (a *forwardingAligner) Abort(checkpoint.ID) []barrier.Action         { return nil }
func (a *forwardingAligner) Blocked(int) bool                             { return false }
func (a *forwardingAligner) OnEndOfInput(int) []barrier.Action {
	a.ended++
	if a.ended == a.channels {
		return []barrier.Action{barrier.EndOfInput{}}
	}
	return nil
}

// eagerCoordinator is a deliberately faulty coordinator: it announces a
// checkpoint complete as soon as it asks for the metadata write.
type eagerCoordinator struct{ *checkpoint.Coordinator }

func (c eagerCoordinator) Ready() []checkpoint.Action {
	var out []checkpoint.Action
	for _, a := range c.Coordinator.Ready() {
		out = append(out, a)
		if p, ok := a.(checkpoint.Persist); ok {
			out = append(out, checkpoint.NotifyComplete{ID: p.Metadata.ID})
		}
	}
	return out
}

// TestSimulationCatchesPlantedBugs shows the simulation has teeth: each
// planted bug must be caught, with the invariant it breaks.
func TestSimulationCatchesPlantedBugs(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{
			name: "aligner forwards without blocking",
			cfg: Config{Mode: barrier.ExactlyOnce, NewAligner: func(_ barrier.Mode, n int) Aligner {
				return &forwardingAligner{channels: n}
			}},
			want: "inconsistent cut",
		},
		{
			name: "coordinator announces completion before the metadata is durable",
			cfg: Config{Mode: barrier.ExactlyOnce, WrapCoordinator: func(c *checkpoint.Coordinator) Coordinator {
				return eagerCoordinator{c}
			}},
			want: "announced complete before its metadata was durable",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			caught := 0
			const runs = 200
			for seed := int64(1); seed <= runs; seed++ {
				cfg := tc.cfg
				cfg.Seed = seed
				_, err := Run(cfg)
				if err == nil {
					continue
				}
				if !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("seed %d: caught, but as %q; want %q", seed, err, tc.want)
				}
				caught++
			}
			if caught == 0 {
				t.Fatalf("the planted bug survived %d seeds", runs)
			}
			t.Logf("caught in %d of %d seeds", caught, runs)
		})
	}
}

// TestSimulationOutputCheckHasTeeth plants a duplicate and a loss in the
// external output of a correct run and requires the final check to see both.
func TestSimulationOutputCheckHasTeeth(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*external)
		want   string
	}{
		{"duplicate", func(x *external) { x.output = append(x.output, x.output[0]) }, "written 2 times"},
		{"loss", func(x *external) { x.output = x.output[1:] }, "lost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(Config{Seed: 7, Mode: barrier.ExactlyOnce})
			if err := s.run(); err != nil {
				t.Fatal(err)
			}
			tc.mutate(&s.ext)
			s.checkOutput()
			if s.violation == nil || !strings.Contains(s.violation.What, tc.want) {
				t.Fatalf("output check after a planted %s: %v; want %q", tc.name, s.violation, tc.want)
			}
		})
	}
}
