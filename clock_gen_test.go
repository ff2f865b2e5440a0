package weir

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

var (
	clockSeeds = flag.Int("clock.seeds", 0, "seeds the clock generator runs (default 2000, 500 with -short)")
	clockFirst = flag.Uint64("clock.first", 1, "the clock generator's first seed")
)

// A generator of sources' event times across checkpoints and restores
// (session 39; an outside review found a subtask that had read nothing by
// a checkpoint restored with another's event time, and its records late).
// A seed draws a parallelism and a schedule: subtasks read records (some
// outside any split, some in splits each owned by one subtask), the
// sources checkpoint, and they restore from any checkpoint taken, at the
// same parallelism or another. A model keeps what each checkpoint should
// hold. After every restore a subtask must resume with its own event time
// at the same parallelism (none if it had read nothing) and with no more
// than the least of the old subtasks' at another, and every split with the
// event time it had: a greater one would make records on time late.

// clockCheckpoint is what the model says a checkpoint holds: each
// subtask's greatest event time outside splits (MinTime: none), and each
// split's that was read in the run that took it.
type clockCheckpoint struct {
	selfs   []int64
	splits  map[string]int64
	handles *operator.Restore
}

// runClockSeed runs one seed; unreadUnwritten puts the defect back. It
// says what broke ("" when nothing did).
func runClockSeed(seed uint64, unreadUnwritten bool) (string, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	w := &operatortest.MemWriter{}
	wmOf := func(ms int64) int64 { return ms - 1 }
	var (
		clocks []*clock
		selfs  []int64          // the model: per subtask, outside splits
		splits map[string]int64 // the model: per split read in this run
		back   map[string]int64 // the model: per split, what the restore gave it
		inside []bool           // per subtask: it entered a split (records go to the last one)
		cks    []clockCheckpoint
		trace  []string
	)
	open := func(p int, from *clockCheckpoint) (string, error) {
		var r *operator.Restore
		if from != nil {
			r = from.handles
		}
		clocks, selfs, splits, back, inside = make([]*clock, p), make([]int64, p), map[string]int64{}, map[string]int64{}, make([]bool, p)
		if from != nil {
			back = from.splits
		}
		for sub := range p {
			c := newClock(wmOf, 0)
			c.unreadUnwritten = unreadUnwritten
			if err := c.open((&operatortest.Run{}).Context("src", sub, p, r)); err != nil {
				return "", err
			}
			clocks[sub], selfs[sub] = c, operator.MinTime
			if from == nil {
				continue
			}
			got, ok := c.restored[c.self]
			switch {
			case len(from.selfs) == p && (!ok || got != from.selfs[sub]):
				return fmt.Sprintf("subtask %d of %d restored event time %d (%v), want its own, %d", sub, p, got, ok, from.selfs[sub]), nil
			case len(from.selfs) != p && ok && got > slices.Min(from.selfs):
				return fmt.Sprintf("subtask %d of %d, rescaled from %d, restored event time %d, above the least of the old subtasks' %v", sub, p, len(from.selfs), got, from.selfs), nil
			}
			if ok {
				selfs[sub] = got
			}
		}
		if from == nil {
			return "", nil
		}
		for id, want := range from.splits {
			if got := clocks[0].restored[id]; got != want {
				return fmt.Sprintf("split %s restored event time %d, want %d", id, got, want), nil
			}
		}
		return "", nil
	}
	p := 1 + rng.IntN(4)
	if diff, err := open(p, nil); diff != "" || err != nil {
		return diff, err
	}
	for range 10 + rng.IntN(50) {
		switch k := rng.IntN(10); {
		case k < 6: // a record
			sub := rng.IntN(p)
			c := clocks[sub]
			ts := int64(rng.IntN(1000))
			if !inside[sub] && rng.IntN(3) > 0 {
				trace = append(trace, fmt.Sprintf("%d/%d reads %d", sub, p, ts))
				c.observe(ts)
				selfs[sub] = max(selfs[sub], ts)
				continue
			}
			// A split this subtask owns: split i belongs to i mod p.
			id := fmt.Sprintf("split-%d", sub+p*rng.IntN(2))
			trace = append(trace, fmt.Sprintf("%d/%d reads %d in %s", sub, p, ts, id))
			c.enterSplit(id)
			inside[sub] = true
			c.observe(ts)
			if _, ok := splits[id]; !ok {
				splits[id] = operator.MinTime
				if m, ok := back[id]; ok {
					splits[id] = m
				}
			}
			splits[id] = max(splits[id], ts)
		case k < 8: // a checkpoint
			ck := clockCheckpoint{selfs: slices.Clone(selfs), splits: map[string]int64{}}
			for id, m := range splits {
				if m != operator.MinTime {
					ck.splits[id] = m
				}
			}
			r := &operator.Restore{Checkpoint: 1, Read: w.Read}
			for sub, c := range clocks {
				hs, err := c.snapshot((&operatortest.Run{}).Context("src", sub, p, nil))(w)
				if err != nil {
					return "", err
				}
				r.Handles = append(r.Handles, hs...)
			}
			ck.handles = r
			cks = append(cks, ck)
			trace = append(trace, fmt.Sprintf("checkpoint %d", len(cks)))
		default: // a failure: restore any checkpoint, at any parallelism
			if len(cks) == 0 {
				continue
			}
			i := rng.IntN(len(cks))
			if rng.IntN(2) == 0 {
				p = 1 + rng.IntN(4)
			}
			trace = append(trace, fmt.Sprintf("restore checkpoint %d at parallelism %d", i+1, p))
			diff, err := open(p, &cks[i])
			if err != nil {
				return "", err
			}
			if diff != "" {
				return fmt.Sprintf("seed %d: %s\n  after: %s", seed, diff, strings.Join(trace, "; ")), nil
			}
		}
	}
	return "", nil
}

func clockGeneratorSeeds() uint64 {
	switch {
	case *clockSeeds > 0:
		return uint64(*clockSeeds)
	case testing.Short():
		return 500
	}
	return 2000
}

// TestClockGenerator runs -clock.seeds seeds from -clock.first.
func TestClockGenerator(t *testing.T) {
	failures := 0
	for seed := *clockFirst; seed < *clockFirst+clockGeneratorSeeds(); seed++ {
		diff, err := runClockSeed(seed, false)
		if err != nil {
			t.Fatal(err)
		}
		if diff != "" {
			t.Error(diff)
			if failures++; failures == 3 {
				t.Fatal("stopping after 3 failing seeds")
			}
		}
	}
}

// TestClockGeneratorCatchesThePlantedBug puts back the defect the generator
// exists for and checks that it finds it.
func TestClockGeneratorCatchesThePlantedBug(t *testing.T) {
	for seed := uint64(1); seed <= 2000; seed++ {
		diff, err := runClockSeed(seed, true)
		if err != nil {
			t.Fatal(err)
		}
		if diff != "" {
			t.Logf("found at seed %d: %s", seed, diff)
			return
		}
	}
	t.Fatal("the planted bug survived 2000 seeds")
}
