package weir

// The join generator: seeded random streams of two sides through the real
// window, interval and regular joins, with checkpoints, crashes that
// restore the latest checkpoint and replay what followed it, and rescales,
// compared with a brute-force model of the joins' semantics. A crash
// changes nothing in exactly-once results, so the model is the run
// without one.
//
//	go test -run TestJoinGenerator -args -window.seeds 10000          # more seeds
//	go test -run TestJoinGenerator -args -window.first 4711 -window.seeds 1 -v

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
	"github.com/weirstream/weir/state/backend"
)

// joinGenConfig is one seed's join: window (a coGroup of tumbling or
// sliding windows), interval (lower, upper) or regular (no TTL).
type joinGenConfig struct {
	kind         string
	a            WindowAssigner
	lower, upper int64
	keys         int
	pebble       bool
}

func (c joinGenConfig) String() string {
	switch c.kind {
	case "window":
		return fmt.Sprintf("window join size %d slide %d, %d keys, pebble %v", c.a.size, c.a.slide, c.keys, c.pebble)
	case "interval":
		return fmt.Sprintf("interval join [%d, %d], %d keys, pebble %v", c.lower, c.upper, c.keys, c.pebble)
	}
	return fmt.Sprintf("regular join, %d keys, pebble %v", c.keys, c.pebble)
}

// joinStep is a record of side a (side 0) or b (1), a watermark, a
// checkpoint or a crash restoring the latest at parallelism p.
type joinStep struct {
	kind      stepKind
	side      int
	key       string
	ts, id, p int64
	wm        int64
}

func (s joinStep) String() string {
	switch s.kind {
	case stepRecord:
		return fmt.Sprintf("%c %s @%d #%d", 'a'+rune(s.side), s.key, s.ts, s.id)
	case stepWatermark:
		return fmt.Sprintf("watermark %d", s.wm)
	case stepCheckpoint:
		return "checkpoint"
	}
	return fmt.Sprintf("crash, restore at parallelism %d", s.p)
}

// joinRun runs the real operator's subtasks through a seed's steps.
type joinRun struct {
	c        joinGenConfig
	knobs    joinKnobs
	stateDir string
	subtasks []*keyedCoOp[string, joined, joined, string]
	out      []string
	w        operatortest.MemWriter
	run      operatortest.Run
	hasher   *codec.Hasher[string]
	// The latest completed checkpoint, the results when it was taken,
	// and the input since, which a crash replays.
	ckpt  *operator.Restore
	outAt int
	since []joinStep
	next  checkpoint.ID
}

// collectAt appends results with their event times.
type collectAt struct {
	c   *chain
	out *[]string
}

func (ca collectAt) Collect(s string) { *ca.out = append(*ca.out, fmt.Sprintf("%s @%d", s, ca.c.now)) }

func (g *joinRun) open(p int) error {
	var cfg backend.Config
	if g.c.pebble {
		cfg = backend.Config{Kind: backend.Pebble, Dir: g.stateDir}
	}
	pair := func(a, b joined) string { return fmt.Sprintf("%s a%d b%d", a.Key, a.ID, b.ID) }
	g.subtasks = nil
	for sub := range p {
		var fn KeyedCoProcessFunction[string, joined, joined, string]
		switch g.c.kind {
		case "window":
			fn = &coGroup[string, joined, joined, string]{w: g.c.a, knobs: g.knobs, f: func(k string, w TimeWindow, as, bs []joined, out Collector[string]) error {
				out.Collect(fmt.Sprintf("%s [%d,%d) a=%v b=%v", k, w.Start.UnixMilli(), w.End.UnixMilli(), slices.Sorted(slices.Values(ids(as))), slices.Sorted(slices.Values(ids(bs)))))
				return nil
			}}
		case "interval":
			fn = &intervalJoin[string, joined, joined, string]{lower: g.c.lower, upper: g.c.upper, knobs: g.knobs, f: pair}
		default:
			fn = &regularJoin[string, joined, joined, string]{f: pair}
		}
		key := func(j joined) string { return j.Key }
		c := &chain{now: operator.MinTime, group: -1, state: cfg}
		op := &keyedCoOp[string, joined, joined, string]{fn: fn, keyA: key, keyB: key, kc: codec.For[string](), n: &node{}}
		op.out, op.c = collectAt{c, &g.out}, c
		if err := op.Open(g.run.Context("join", sub, p, g.ckpt)); err != nil {
			return fmt.Errorf("open subtask %d of %d: %w", sub, p, err)
		}
		g.subtasks = append(g.subtasks, op)
	}
	return nil
}

func (g *joinRun) close() error {
	for _, op := range g.subtasks {
		if err := op.Close(); err != nil {
			return err
		}
	}
	return nil
}

func (g *joinRun) input(s joinStep) error {
	if s.kind == stepWatermark {
		for _, op := range g.subtasks {
			if err := op.AdvanceWatermark(s.wm); err != nil {
				return err
			}
		}
		return nil
	}
	group := keygroup.Of(g.hasher.Hash(s.key), keygroup.DefaultMaxParallelism)
	for i, op := range g.subtasks {
		if keygroup.ForSubtask(keygroup.DefaultMaxParallelism, len(g.subtasks), i).Contains(group) {
			return op.ProcessBatch(s.side, []joined{{Key: s.key, ID: s.id}}, []int64{s.ts}, []uint16{uint16(group)})
		}
	}
	panic("no subtask owns key group " + fmt.Sprint(group))
}

func (g *joinRun) step(s joinStep) error {
	switch s.kind {
	case stepRecord, stepWatermark:
		g.since = append(g.since, s)
		return g.input(s)
	case stepCheckpoint:
		g.next++
		r, err := checkpointAll(g.subtasks, g.next, &g.w)
		if err != nil {
			return err
		}
		g.ckpt, g.outAt, g.since = r, len(g.out), nil
		return nil
	}
	if err := g.close(); err != nil {
		return err
	}
	g.out = g.out[:g.outAt]
	if err := g.open(int(s.p)); err != nil {
		return err
	}
	for _, in := range g.since {
		if err := g.input(in); err != nil {
			return err
		}
	}
	return nil
}

// joinModel is the joins' semantics over records in arrival order, the
// watermark going up: a record at or behind the watermark is late (of a
// window join, late for every window of it whose last millisecond the
// watermark reached) and joins nothing.
type joinModel struct {
	c     joinGenConfig
	wm    int64
	recs  []joinStep // on time
	wins  map[windowOf][2][]int64
	fired map[windowOf]bool
	out   []string
}

func (m *joinModel) record(s joinStep) {
	if m.c.kind == "window" {
		a := m.c.a
		for start := floorTo(s.ts, a.slide); start > s.ts-a.size; start -= a.slide {
			w := windowOf{s.key, start, start + a.size}
			if w.End-1 <= m.wm {
				continue
			}
			sides := m.wins[w]
			sides[s.side] = append(sides[s.side], s.id)
			m.wins[w] = sides
		}
		return
	}
	if m.c.kind == "interval" && s.ts <= m.wm {
		return
	}
	for _, o := range m.recs {
		if o.key != s.key || o.side == s.side {
			continue
		}
		a, b := o, s
		if s.side == 0 {
			a, b = s, o
		}
		if m.c.kind == "regular" {
			m.out = append(m.out, fmt.Sprintf("%s a%d b%d @%d", s.key, a.id, b.id, s.ts))
		} else if a.ts+m.c.lower <= b.ts && b.ts <= a.ts+m.c.upper {
			m.out = append(m.out, fmt.Sprintf("%s a%d b%d @%d", s.key, a.id, b.id, max(a.ts, b.ts)))
		}
	}
	m.recs = append(m.recs, s)
}

func (m *joinModel) watermark(wm int64) {
	m.wm = max(m.wm, wm)
	for w, sides := range m.wins {
		if w.End-1 <= m.wm && !m.fired[w] {
			m.fired[w] = true
			m.out = append(m.out, fmt.Sprintf("%s [%d,%d) a=%v b=%v @%d", w.Key, w.Start, w.End,
				slices.Sorted(slices.Values(sides[0])), slices.Sorted(slices.Values(sides[1])), w.End-1))
		}
	}
}

// generateJoin draws a seed's join and steps. Records fall around the
// watermark: behind it, at it and ahead.
func generateJoin(seed uint64) (joinGenConfig, []joinStep) {
	rng := rand.New(rand.NewPCG(seed, 0x701e))
	ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
	c := joinGenConfig{keys: 1 + rng.IntN(3), pebble: rng.IntN(8) == 0}
	span := int64(4)
	switch rng.IntN(5) {
	case 0, 1:
		c.kind = "window"
		size := 1 + rng.Int64N(8)
		c.a, span = Tumbling(ms(size)), size
		if rng.IntN(2) == 0 {
			c.a = Sliding(ms(size), ms(1+rng.Int64N(size+3)))
		}
	case 2, 3:
		c.kind = "interval"
		c.lower = rng.Int64N(9) - 6
		c.upper = c.lower + rng.Int64N(7)
		span = max(4, c.upper-c.lower)
	default:
		c.kind = "regular"
	}
	var steps []joinStep
	wm := int64(-1)
	for i := range 20 + rng.IntN(100) {
		switch r := rng.IntN(100); {
		case r < 60:
			ts := max(wm, 0) - span - 2 + rng.Int64N(2*span+10)
			steps = append(steps, joinStep{kind: stepRecord, side: rng.IntN(2), key: string(rune('a' + rng.IntN(c.keys))), ts: ts, id: int64(i + 1)})
		case r < 82:
			wm += rng.Int64N(5)
			steps = append(steps, joinStep{kind: stepWatermark, wm: wm})
		case r < 93:
			steps = append(steps, joinStep{kind: stepCheckpoint})
		default:
			steps = append(steps, joinStep{kind: stepCrash, p: 1 + rng.Int64N(3)})
		}
	}
	return c, steps
}

// runJoinSeed runs a seed through the joins and the model and says how
// their results differ ("" when they agree).
func runJoinSeed(t *testing.T, seed uint64, knobs joinKnobs) (string, error) {
	c, steps := generateJoin(seed)
	g := &joinRun{c: c, knobs: knobs, hasher: codec.NewHasher(codec.For[string]())}
	if c.pebble {
		g.stateDir = t.TempDir()
	}
	defer g.run.Close()
	if err := g.open(1); err != nil {
		return "", err
	}
	m := &joinModel{c: c, wm: operator.MinTime, wins: map[windowOf][2][]int64{}, fired: map[windowOf]bool{}}
	end := joinStep{kind: stepWatermark, wm: operator.MaxTime}
	for _, s := range append(steps, end) {
		if err := g.step(s); err != nil {
			g.close()
			return "", fmt.Errorf("seed %d (%v), step %v: %w", seed, c, s, err)
		}
		switch s.kind {
		case stepRecord:
			m.record(s)
		case stepWatermark:
			m.watermark(s.wm)
		}
	}
	left := g.left()
	if err := g.close(); err != nil {
		return "", err
	}
	got, want := slices.Sorted(slices.Values(g.out)), slices.Sorted(slices.Values(m.out))
	if slices.Equal(got, want) && left == "" {
		return "", nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d (%v): results differ from the model:\n%s", seed, c, left)
	for _, r := range got {
		if !slices.Contains(want, r) || count(got, r) > count(want, r) {
			fmt.Fprintf(&b, "  got %s\n", r)
		}
	}
	for _, r := range want {
		if count(got, r) < count(want, r) {
			fmt.Fprintf(&b, "  missing %s\n", r)
		}
	}
	b.WriteString("  steps:")
	for _, s := range steps {
		fmt.Fprintf(&b, " %v;", s)
	}
	return b.String(), nil
}

// left says what state a window or interval join's subtasks hold after
// the end of the input ("" when none, as it must be).
func (g *joinRun) left() string {
	var b strings.Builder
	for i, op := range g.subtasks {
		for k := range g.c.keys {
			key := string(rune('a' + k))
			group := keygroup.Of(g.hasher.Hash(key), keygroup.DefaultMaxParallelism)
			if !keygroup.ForSubtask(keygroup.DefaultMaxParallelism, len(g.subtasks), i).Contains(group) {
				continue
			}
			op.setKey(key)
			var as, bs string
			switch f := op.fn.(type) {
			case *intervalJoin[string, joined, joined, string]:
				as, bs = byTime(f.as.All()), byTime(f.bs.All())
			case *coGroup[string, joined, joined, string]:
				as, bs = byTime(f.as.All()), byTime(f.bs.All())
			default:
				continue // a regular join without a TTL keeps every record
			}
			if as != "{}" || bs != "{}" {
				fmt.Fprintf(&b, "  left in state of key %s: a %s b %s\n", key, as, bs)
			}
		}
	}
	return b.String()
}

func count(xs []string, x string) int {
	n := 0
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}

// TestJoinGenerator runs -window.seeds seeds (400 by default) of the join
// generator from -window.first, and stops after three that fail.
func TestJoinGenerator(t *testing.T) {
	runSeeds(t, runJoinSeed)
}

// TestJoinGeneratorCatchesPlantedBugs puts back a defect in each time
// join and checks that the generator finds it.
func TestJoinGeneratorCatchesPlantedBugs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		knobs joinKnobs
	}{
		{"a window join takes a record for a window that fired", joinKnobs{lateAfterEnd: true}},
		{"an interval join takes a record at the watermark", joinKnobs{takeAtWatermark: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			findsPlanted(t, runJoinSeed, tc.knobs)
		})
	}
}
