package sim

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/checkpoint/barrier"
	"github.com/weirstream/weir/internal/racetest"
)

// defaultSeeds is the number of seeds per mode TestSimulation runs.
var defaultSeeds = 1000

var (
	seeds    = flag.Int("sim.seeds", 0, "number of seeds per mode (default 1000)")
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
	racetest.Skip(t)
	for _, mode := range modes(t) {
		t.Run(mode.String(), func(t *testing.T) {
			n := *seeds
			if n == 0 {
				n = defaultSeeds
			}
			lo, hi := *first, *first+int64(n)
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
				total.Partitions += res.Partitions
				total.Zombies += res.Zombies
				total.Completed += res.Completed
				total.Aborted += res.Aborted
				total.LeaderChanges += res.LeaderChanges
				total.Fenced += res.Fenced
				total.FencedCompletes += res.FencedCompletes
				total.Refused += res.Refused
				total.LateNotices += res.LateNotices
				total.Unaligned += res.Unaligned
				total.Switched += res.Switched
				total.Persisted += res.Persisted
				total.Replayed += res.Replayed
			}
			t.Logf("%d seeds in %v: %d steps, %d task crashes, %d process crashes, %d partitions, %d slow cancellations, %d checkpoints completed, %d aborted",
				hi-lo, time.Since(start).Round(time.Millisecond), total.Steps, total.TaskCrashes, total.ProcessCrashes, total.Partitions, total.Zombies, total.Completed, total.Aborted)
			t.Logf("leader changes: %d; writes of deposed leaders fenced: %d (completions %d); commands and connections of another attempt refused: %d; late notifications obeyed: %d",
				total.LeaderChanges, total.Fenced, total.FencedCompletes, total.Refused, total.LateNotices)
			t.Logf("unaligned snapshots: %d (switched by a timeout: %d); records persisted as input channel state: %d; channel-state records replayed at restores: %d",
				total.Unaligned, total.Switched, total.Persisted, total.Replayed)
			// The runs must exercise what they claim to.
			if hi-lo >= 200 && (total.TaskCrashes == 0 || total.ProcessCrashes == 0 || total.Partitions == 0 || total.Zombies == 0 || total.Completed == 0 || total.Aborted == 0) {
				t.Fatalf("the simulation did not exercise crashes, completions and aborts: %+v", total)
			}
			if hi-lo >= 200 && (total.LeaderChanges == 0 || total.FencedCompletes == 0 || total.Refused == 0) {
				t.Fatalf("the simulation did not exercise leader changes, a deposed leader's completion and refused commands or connections: %+v", total)
			}
			if hi-lo >= 200 && mode == barrier.ExactlyOnce && (total.Unaligned == 0 || total.Switched == 0 || total.Persisted == 0 || total.Replayed == 0) {
				t.Fatalf("the simulation did not exercise unaligned checkpoints, timeouts that switch, persisted input and replayed channel state: %+v", total)
			}
		})
	}
}

// forwardingAligner is a deliberately faulty exactly-once aligner: it
// snapshots and forwards on the first barrier of a checkpoint, never blocking
// the channels that delivered it.
type forwardingAligner struct {
	lastDone checkpoint.ID
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
func (a *forwardingAligner) Aligning() []checkpoint.ID                    { return nil }
func (a *forwardingAligner) Persisting() []checkpoint.ID                  { return nil }
func (a *forwardingAligner) Tick(time.Time) []barrier.Action              { return nil }
func (a *forwardingAligner) OnAlignedBarrier(c int, id checkpoint.ID) []barrier.Action {
	return a.OnBarrier(c, id)
}

// abortDropsOlder plants the aligner bug of the restore-safety issue: an
// abort of checkpoint n also throws away the alignment of every older
// checkpoint, without declining it; the coordinator learns of it only at
// the timeout.
type abortDropsOlder struct{ *barrier.Aligner }

func (a abortDropsOlder) Abort(id checkpoint.ID) []barrier.Action {
	var out []barrier.Action
	for _, old := range a.Aligner.Aligning() {
		if old < id {
			out = append(out, a.Aligner.Abort(old)...)
		}
	}
	return append(out, a.Aligner.Abort(id)...)
}

// countsOldFailures plants the coordinator bug of the restore-safety
// issue: a failure of a checkpoint older than the newest completed one
// counts towards the tolerable failures, and can fail the job over.
type countsOldFailures struct {
	*checkpoint.Coordinator
	tolerable  int
	newest     checkpoint.ID
	extra      int
	savepoints map[checkpoint.ID]bool
}

func (c *countsOldFailures) Start(now time.Time) {
	c.extra = 0
	c.Coordinator.Start(now)
}

func (c *countsOldFailures) Persisted(now time.Time, id checkpoint.ID, err error) {
	if err == nil {
		c.newest, c.extra = max(c.newest, id), 0
	}
	c.Coordinator.Persisted(now, id, err)
}

func (c *countsOldFailures) ConsecutiveFailures() int {
	return c.Coordinator.ConsecutiveFailures() + c.extra
}

func (c *countsOldFailures) Ready() []checkpoint.Action {
	acts := c.Coordinator.Ready()
	for _, a := range acts {
		switch a := a.(type) {
		case checkpoint.Trigger:
			c.savepoints[a.ID] = a.Savepoint
		case checkpoint.Abort:
			if a.Reason.Counts() && !c.savepoints[a.ID] && a.ID < c.newest {
				if c.extra++; c.ConsecutiveFailures() > c.tolerable {
					return append(acts, checkpoint.FailJob{Cause: fmt.Errorf("checkpoint %d failed", a.ID)})
				}
			}
		}
	}
	return acts
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
	racetest.Skip(t)
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{
			name: "aligner forwards without blocking",
			cfg: Config{Mode: barrier.ExactlyOnce, NewAligner: func(barrier.Mode, int, ...barrier.Option) Aligner {
				return &forwardingAligner{}
			}},
			want: "inconsistent cut",
		},
		{
			name: "coordinator announces completion before the metadata is durable",
			cfg: Config{Mode: barrier.ExactlyOnce, WrapCoordinator: func(c *checkpoint.Coordinator, _ checkpoint.Config) Coordinator {
				return eagerCoordinator{c}
			}},
			want: "announced complete before its metadata was durable",
		},
		{
			name: "an abort drops the alignment of older checkpoints too",
			cfg: Config{Mode: barrier.ExactlyOnce, NewAligner: func(m barrier.Mode, n int, opts ...barrier.Option) Aligner {
				return abortDropsOlder{barrier.New(m, n, opts...)}
			}},
			want: "ended silently",
		},
		{
			name: "failures of checkpoints older than the newest completed count",
			cfg: Config{Mode: barrier.ExactlyOnce, WrapCoordinator: func(c *checkpoint.Coordinator, cfg checkpoint.Config) Coordinator {
				var newest checkpoint.ID
				if l, ok := c.Latest(); ok {
					newest = l.ID
				}
				return &countsOldFailures{Coordinator: c, tolerable: cfg.TolerableFailures, newest: newest, savepoints: map[checkpoint.ID]bool{}}
			}},
			// Seen either in the count or in the job failing over.
			want: "consecutive checkpoint failures, the model|checkpoint failures that count",
		},
		{
			name: "a cut-off worker fences itself after the coordinator's timeout",
			cfg:  Config{Mode: barrier.ExactlyOnce, FenceAfter: 1.25},
			want: "declared lost while its task",
		},
		{
			name: "the tasks of an earlier attempt hear of the new attempt's checkpoints",
			cfg:  Config{Mode: barrier.ExactlyOnce, NotifyZombies: true},
			want: "written 2 times|lost|counts",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			caught := 0
			const runs = 200
			for seed := int64(1); seed <= runs; seed++ {
				cfg := tc.cfg
				// These bugs are not about alignment: aligned runs keep
				// the schedules (and the time) they had before issue 21.
				cfg.Seed, cfg.Alignment = seed, Aligned
				_, err := Run(cfg)
				if err == nil {
					continue
				}
				if !slices.ContainsFunc(strings.Split(tc.want, "|"), func(w string) bool { return strings.Contains(err.Error(), w) }) {
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

// TestSimulationCatchesLeaderBugs plants, in runs with high availability,
// the bugs that etcd's fencing and attempts numbered from the epoch
// prevent: the generator must find a failing seed among the first
// leaderBugSeeds, and it must fail on the invariant the bug breaks. A bug
// that costs output or a restore must show there too, with the leader
// changes' own invariants turned off: the output and restore checks find
// it alone.
func TestSimulationCatchesLeaderBugs(t *testing.T) {
	racetest.Skip(t)
	const leaderBugSeeds = 300
	cases := []struct {
		name string
		cfg  Config
		// want is how it is caught; output how it is caught by the
		// output and restore checks alone ("": it costs nothing there).
		want, output string
	}{
		{
			name:   "etcd records a deposed leader's completion",
			cfg:    Config{CompleteDeposed: true},
			want:   "recorded as completed in etcd by the coordinator of epoch",
			output: "written|lost|counts|storage holds no metadata",
		},
		{
			name:   "a new leader restores the newest metadata, not the newest checkpoint etcd records",
			cfg:    Config{RestoreNewestMetadata: true},
			want:   "written|lost|counts|differs from storage's",
			output: "written|lost|counts",
		},
		{
			name:   "a task accepts a data connection of an old term's task",
			cfg:    Config{AcceptOldConnections: true},
			want:   "written|lost|counts|inconsistent cut|end of data twice",
			output: "written|lost|counts|inconsistent cut|end of data twice",
		},
		{
			name: "a task obeys a deposed leader's command",
			cfg:  Config{ObeyOldAttempts: true},
			want: "a task obeys only its own term's coordinator",
		},
	}
	find := func(t *testing.T, cfg Config, outputOnly bool, want string) {
		t.Helper()
		for seed := int64(1); seed <= leaderBugSeeds; seed++ {
			// Aligned: as in TestSimulationCatchesPlantedBugs.
			cfg.Seed, cfg.Mode, cfg.HA, cfg.Alignment = seed, barrier.ExactlyOnce, true, Aligned
			s := newSim(cfg)
			s.outputCheckOnly = outputOnly
			err := s.run()
			if err == nil {
				continue
			}
			if !slices.ContainsFunc(strings.Split(want, "|"), func(w string) bool { return strings.Contains(err.Error(), w) }) {
				t.Fatalf("seed %d: caught, but as %q; want %q", seed, err, want)
			}
			t.Logf("caught at seed %d (output and restore checks alone: %v): %v", seed, outputOnly, err)
			return
		}
		t.Fatalf("the planted bug survived %d seeds (output and restore checks alone: %v)", leaderBugSeeds, outputOnly)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			find(t, tc.cfg, false, tc.want)
			if tc.output != "" {
				find(t, tc.cfg, true, tc.output)
			}
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

// lateSwitch plants the bug of a timeout that switches after the snapshot:
// when the aligned timeout switches a checkpoint to unaligned, the channels
// are persisted and unblocked at once, but the snapshot is taken only at
// the aligner's next call, after records were read and persisted. It still
// reports the checkpoint as aligning until then, so that only the channel
// state shows the bug.
type lateSwitch struct {
	*barrier.Aligner
	held []barrier.Action
}

func (a *lateSwitch) release(acts []barrier.Action) []barrier.Action {
	out := append(a.held, acts...)
	a.held = nil
	return out
}

func (a *lateSwitch) Tick(now time.Time) []barrier.Action {
	out := a.release(nil)
	for _, x := range a.Aligner.Tick(now) {
		if s, ok := x.(barrier.Snapshot); ok && s.Unaligned {
			a.held = append(a.held, s)
			continue
		}
		out = append(out, x)
	}
	return out
}

func (a *lateSwitch) OnBarrier(c int, id checkpoint.ID) []barrier.Action {
	return a.release(slices.Clone(a.Aligner.OnBarrier(c, id)))
}

func (a *lateSwitch) OnAlignedBarrier(c int, id checkpoint.ID) []barrier.Action {
	return a.release(slices.Clone(a.Aligner.OnAlignedBarrier(c, id)))
}

func (a *lateSwitch) OnCancel(c int, id checkpoint.ID) []barrier.Action {
	return a.release(slices.Clone(a.Aligner.OnCancel(c, id)))
}

func (a *lateSwitch) Abort(id checkpoint.ID) []barrier.Action {
	return a.release(slices.Clone(a.Aligner.Abort(id)))
}

func (a *lateSwitch) Aligning() []checkpoint.ID {
	ids := a.Aligner.Aligning()
	for _, x := range a.held {
		ids = append(ids, x.(barrier.Snapshot).ID)
	}
	return ids
}

// finalOnce plants the coordinator bug the model checker found (design
// note 91): once the input is exhausted, a checkpoint triggered while one
// that can end the job is pending or complete is not Final, so its
// barriers do not align; yet it may complete first and end the job.
// (The real coordinator makes every trigger after the input's end Final;
// the planted one only those triggered while none of them is pending or
// complete, as it did before.)
type finalOnce struct {
	*checkpoint.Coordinator
	pending map[checkpoint.ID]bool // triggered after the input's end, not over
	done    bool                   // one of them completed
}

func (c *finalOnce) Start(now time.Time) {
	c.pending, c.done = map[checkpoint.ID]bool{}, false
	c.Coordinator.Start(now)
}

func (c *finalOnce) Ready() []checkpoint.Action {
	acts := c.Coordinator.Ready()
	for i, a := range acts {
		switch a := a.(type) {
		case checkpoint.Trigger:
			if !a.Final {
				continue
			}
			if len(c.pending) > 0 || c.done {
				acts[i] = checkpoint.Trigger{ID: a.ID, Savepoint: a.Savepoint, At: a.At}
			}
			c.pending[a.ID] = true
		case checkpoint.NotifyComplete:
			c.done = c.done || c.pending[a.ID]
			delete(c.pending, a.ID)
		case checkpoint.Abort:
			delete(c.pending, a.ID)
		case checkpoint.Discard:
			delete(c.pending, a.ID)
		}
	}
	return acts
}

// TestSimulationFinalCheckpointAligns replays the seeds that show the bug
// finalOnce plants, which the model checker found (design note 91) and the
// simulation missed (none in 1,500 seeds of drawn sizes; these three of
// 1,500 with 20 records per source): unaligned, a checkpoint
// triggered while the final one is pending, not Final, completes after the
// final one expired and ends the job; the records a task read after its
// unaligned snapshot are covered by no completed checkpoint. Each seed must
// fail with the bug planted and pass with the real coordinator. (Seed 279
// was one; since a late completion no longer ends a run of checkpoint
// failures, session 39, its schedule does not reach the bug, and 1140,
// the next of 4,000 that does, replaces it.)
func TestSimulationFinalCheckpointAligns(t *testing.T) {
	for _, tc := range []struct {
		seed    int64
		records int
		want    string
	}{
		{seed: 1140, records: 20, want: "no completed checkpoint covers"},
		{seed: 604, records: 20, want: "before its input ended"},
		{seed: 1046, records: 20, want: "no completed checkpoint covers"},
	} {
		cfg := Config{Seed: tc.seed, Mode: barrier.ExactlyOnce, Alignment: Unaligned, RecordsPerSource: tc.records}
		if _, err := Run(cfg); err != nil {
			t.Errorf("seed %d (%d records per source): %v", tc.seed, tc.records, err)
		}
		cfg.WrapCoordinator = func(c *checkpoint.Coordinator, _ checkpoint.Config) Coordinator {
			return &finalOnce{Coordinator: c, pending: map[checkpoint.ID]bool{}}
		}
		if _, err := Run(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("seed %d (%d records per source) with the bug planted: %v, want %q", tc.seed, tc.records, err, tc.want)
		}
	}
}

// TestSimulationCatchesChannelStateBugs plants bugs of unaligned
// checkpoints (issue 21): the generator must find a failing seed among the
// first unalignedBugSeeds, caught by the consistent-cut check as the bug it
// is, and one caught by the output and restore checks alone too (the
// records are processed twice or lost after a restore). Rates are in
// design note 74.
func TestSimulationCatchesChannelStateBugs(t *testing.T) {
	const unalignedBugSeeds = 200
	cases := []struct {
		name       string
		cfg        Config
		want       string
		outputWant string
	}{
		{
			name:       "a record persisted twice (its barrier does not overtake the output it captured)",
			cfg:        Config{Alignment: Unaligned, BarrierBehindOutput: true},
			want:       "persisted twice",
			outputWant: "written|counts",
		},
		{
			name:       "a channel's state cut short (the records queued when persistence starts are not persisted)",
			cfg:        Config{Alignment: Unaligned, PersistArrivalsOnly: true},
			want:       "cut short",
			outputWant: "lost|counts",
		},
		{
			name:       "a channel's state cut short, at a timeout's switch",
			cfg:        Config{Alignment: AlignedTimeout, PersistArrivalsOnly: true},
			want:       "cut short",
			outputWant: "lost|counts",
		},
		{
			name: "the timeout switches after the snapshot",
			cfg: Config{Alignment: AlignedTimeout, NewAligner: func(m barrier.Mode, n int, opts ...barrier.Option) Aligner {
				return &lateSwitch{Aligner: barrier.New(m, n, opts...)}
			}},
			want:       "persisted twice",
			outputWant: "written|counts",
		},
	}
	matches := func(err error, want string) bool {
		return slices.ContainsFunc(strings.Split(want, "|"), func(w string) bool { return strings.Contains(err.Error(), w) })
	}
	// find returns the first seed whose run fails, and fails the test if
	// none does or one fails otherwise than want says.
	find := func(t *testing.T, cfg Config, noCutCheck bool, want string) int64 {
		t.Helper()
		for seed := int64(1); seed <= unalignedBugSeeds; seed++ {
			cfg.Seed, cfg.Mode = seed, barrier.ExactlyOnce
			s := newSim(cfg)
			s.noCutCheck = noCutCheck
			err := s.run()
			if err == nil {
				continue
			}
			if !matches(err, want) {
				t.Fatalf("seed %d (cut check off: %v): caught, but as %q; want %q", seed, noCutCheck, err, want)
			}
			return seed
		}
		t.Fatalf("the planted bug survived %d seeds (cut check off: %v)", unalignedBugSeeds, noCutCheck)
		return 0
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			first := find(t, tc.cfg, false, tc.want)
			firstOutput := find(t, tc.cfg, true, tc.outputWant)
			t.Logf("caught at seed %d; with the cut check off, at seed %d", first, firstOutput)
		})
	}
}
