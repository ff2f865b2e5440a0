package weir

// The keyed function generator: seeded random records through a keyed
// process function that keeps value, list and map state and registers and
// deletes timers of both kinds, with watermarks, a processing-time clock,
// checkpoints, crashes that restore the latest checkpoint and replay what
// followed it, and rescales; compared with a model of the function over
// plain maps, result by result. Every result says the key's state, so a
// timer that fires with another key's state, a restore that loses a list
// entry or a timer that fires twice or never shows.
//
//	go test -run TestKeyedFunctionGenerator -args -window.seeds 10000      # more seeds
//	go test -run TestKeyedFunctionGenerator -args -window.first 4711 -window.seeds 1 -v
//
// The window generator drives a keyed function's event-time timers alone
// (genTimers); this one adds state, processing time and the end of the
// input.

import (
	"fmt"
	"maps"
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

// kfOp is what a record asks the function to do.
type kfOp uint8

const (
	kfAdd         kfOp = iota // add v to the sum, the list and the map (at v%3)
	kfClear                   // clear the key's state
	kfEventTimer              // register an event-time timer at the record's time + d
	kfDeleteEvent             // delete the event-time timer at the record's time + d
	kfTimer                   // register a processing-time timer at now + d
	kfDeleteTimer             // delete the processing-time timer at now + d
	kfOps
)

var kfOpNames = [...]string{"add", "clear", "event-timer", "delete-event", "timer", "delete-timer"}

type kfRec struct {
	Key  string
	V, D int64
	Op   kfOp
}

// kfFollowUps is what a timer at t does besides saying the state: register
// a later timer of its kind (which may be due at once), delete the one at
// t+1 of its kind, and clear the list and register a timer of the other
// kind. The function and the model both follow it.
func kfFollowUps(t int64) (register int64, registers, deletes, clearsList bool) {
	return t + 1 + t&1, t%5 == 0, t%3 == 1, t%7 == 2
}

// kfState says a key's state as a result does.
func kfState(sum int64, list []int64, m map[int64]int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "sum=%d list=%v map=[", sum, list)
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d:%d", k, m[k])
	}
	b.WriteByte(']')
	return b.String()
}

// kfFunction is the keyed process function under test.
type kfFunction struct {
	sum  *ValueState[string, int64]
	list *ListState[string, int64]
	m    *MapState[string, int64, int64]
}

func (f *kfFunction) Open(c *KeyedContext[string]) (err error) {
	if f.sum, err = NewValueState[string, int64](c, "sum"); err != nil {
		return err
	}
	if f.list, err = NewListState[string, int64](c, "list"); err != nil {
		return err
	}
	f.m, err = NewMapState[string, int64, int64](c, "map")
	return err
}

func (f *kfFunction) state() string {
	sum, _ := f.sum.Value()
	return kfState(sum, f.list.Get(), maps.Collect(f.m.All()))
}

func (f *kfFunction) Process(c *KeyedContext[string], r kfRec, out Collector[string]) error {
	ts, now := c.Timestamp().UnixMilli(), c.Now().UnixMilli()
	switch r.Op {
	case kfAdd:
		sum, _ := f.sum.Value()
		f.sum.Update(sum + r.V)
		f.list.Add(r.V)
		f.m.Put(r.V%3, r.V)
		out.Collect(fmt.Sprintf("%s add %d wm=%d %s", c.Key(), r.V, c.Watermark().UnixMilli(), f.state()))
	case kfClear:
		f.sum.Clear()
		f.list.Clear()
		f.m.Clear()
	case kfEventTimer:
		c.RegisterEventTimer(time.UnixMilli(ts + r.D))
	case kfDeleteEvent:
		c.DeleteEventTimer(time.UnixMilli(ts + r.D))
	case kfTimer:
		c.RegisterTimer(time.UnixMilli(now + r.D))
	case kfDeleteTimer:
		c.DeleteTimer(time.UnixMilli(now + r.D))
	}
	return nil
}

func (f *kfFunction) OnTimer(c *KeyedContext[string], at time.Time, out Collector[string]) error {
	t := at.UnixMilli()
	sum, _ := f.sum.Value()
	f.sum.Update(sum + 1000)
	out.Collect(fmt.Sprintf("%s %v timer %d %s", c.Key(), c.TimeDomain(), t, f.state()))
	register, registers, deletes, clearsList := kfFollowUps(t)
	event := c.TimeDomain() == EventTime
	if registers {
		if event {
			c.RegisterEventTimer(time.UnixMilli(register))
		} else {
			c.RegisterTimer(time.UnixMilli(register))
		}
	}
	if deletes {
		if event {
			c.DeleteEventTimer(time.UnixMilli(t + 1))
		} else {
			c.DeleteTimer(time.UnixMilli(t + 1))
		}
	}
	if clearsList {
		f.list.Clear()
		if event {
			c.RegisterTimer(time.UnixMilli(t + 2))
		} else {
			c.RegisterEventTimer(time.UnixMilli(t + 2))
		}
	}
	return nil
}

// kfStep is a record, a watermark, the clock's move to now, a checkpoint,
// a crash restoring the latest at parallelism p, or the end of the input.
type kfStep struct {
	kind stepKind
	r    kfRec
	ts   int64
	wm   int64
	now  int64
	p    int
}

const (
	kfStepClock stepKind = iota + 100
	kfStepEnd
)

func (s kfStep) String() string {
	switch s.kind {
	case stepRecord:
		return fmt.Sprintf("%s %s %d d%d @%d", s.r.Key, kfOpNames[s.r.Op], s.r.V, s.r.D, s.ts)
	case stepWatermark:
		return fmt.Sprintf("watermark %d", s.wm)
	case kfStepClock:
		return fmt.Sprintf("clock %d", s.now)
	case stepCheckpoint:
		return "checkpoint"
	case kfStepEnd:
		return "end of input"
	}
	return fmt.Sprintf("crash, restore at parallelism %d", s.p)
}

type kfConfig struct {
	keys   int
	pebble bool
}

func (c kfConfig) String() string { return fmt.Sprintf("%d keys, pebble %v", c.keys, c.pebble) }

// generateKeyed draws a seed's steps: records around the watermark and
// timers around the watermark and the clock, so that timers meet at one
// instant, fall due at once and are deleted before and while they fire.
func generateKeyed(seed uint64) (kfConfig, []kfStep) {
	rng := rand.New(rand.NewPCG(seed, 0x6b66))
	c := kfConfig{keys: 1 + rng.IntN(3), pebble: rng.IntN(6) == 0}
	var steps []kfStep
	wm, now := int64(-1), int64(100)
	for i := range 20 + rng.IntN(100) {
		switch r := rng.IntN(100); {
		case r < 55:
			op := kfOp(rng.IntN(int(kfOps)))
			if rng.IntN(3) == 0 {
				op = kfAdd
			}
			steps = append(steps, kfStep{kind: stepRecord, ts: max(wm, 0) - 3 + rng.Int64N(10),
				r: kfRec{Key: string(rune('a' + rng.IntN(c.keys))), V: int64(i + 1), D: rng.Int64N(9) - 3, Op: op}})
		case r < 70:
			wm += rng.Int64N(5)
			steps = append(steps, kfStep{kind: stepWatermark, wm: wm})
		case r < 82:
			now += rng.Int64N(5)
			steps = append(steps, kfStep{kind: kfStepClock, now: now})
		case r < 93:
			steps = append(steps, kfStep{kind: stepCheckpoint})
		default:
			steps = append(steps, kfStep{kind: stepCrash, p: 1 + rng.IntN(3)})
		}
	}
	// The end: the last watermark, the end of the input, a checkpoint and
	// a restore of it, after which the clock runs on and nothing fires.
	return c, append(steps, kfStep{kind: stepWatermark, wm: operator.MaxTime}, kfStep{kind: kfStepEnd}, kfStep{kind: stepCheckpoint},
		kfStep{kind: stepCrash, p: 1 + rng.IntN(3)}, kfStep{kind: kfStepClock, now: now + 1000})
}

// kfRun runs the real operator's subtasks through a seed's steps.
type kfRun struct {
	c        kfConfig
	knobs    keyedKnobs
	stateDir string
	subtasks []*processOp[string, kfRec, string]
	chains   []*chain
	out      []string
	w        operatortest.MemWriter
	run      operatortest.Run
	hasher   *codec.Hasher[string]
	now      int64
	// The latest completed checkpoint, the results and the clock when it
	// was taken, and the input since, which a crash replays.
	ckpt         *operator.Restore
	outAt, nowAt int64
	since        []kfStep
	next         checkpoint.ID
}

func (g *kfRun) open(p int) error {
	var cfg backend.Config
	if g.c.pebble {
		cfg = backend.Config{Kind: backend.Pebble, Dir: g.stateDir}
	}
	g.subtasks, g.chains = nil, nil
	for sub := range p {
		c := &chain{now: operator.MinTime, group: -1, state: cfg}
		op := &processOp[string, kfRec, string]{fn: &kfFunction{}, key: func(r kfRec) string { return r.Key }, kc: codec.For[string]()}
		op.out, op.c, op.knobs = collectAt{c, &g.out}, c, g.knobs
		oc := g.run.Context("keyed", sub, p, g.ckpt)
		oc.Now = func() time.Time { return time.UnixMilli(g.now) }
		if err := op.Open(oc); err != nil {
			op.Close()
			return fmt.Errorf("open subtask %d of %d: %w", sub, p, err)
		}
		g.subtasks, g.chains = append(g.subtasks, op), append(g.chains, c)
	}
	return nil
}

func (g *kfRun) close() error {
	var first error
	for _, op := range g.subtasks {
		if err := op.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// input hands a step of the input to the subtasks.
func (g *kfRun) input(s kfStep) error {
	switch s.kind {
	case stepWatermark:
		for _, op := range g.subtasks {
			if err := op.AdvanceWatermark(s.wm); err != nil {
				return err
			}
		}
		return nil
	case kfStepClock:
		g.now = s.now
		for _, op := range g.subtasks {
			if err := op.FireTimers(time.UnixMilli(s.now)); err != nil {
				return err
			}
		}
		return nil
	case kfStepEnd:
		for _, op := range g.subtasks {
			if err := op.Finish(); err != nil {
				return err
			}
		}
		return nil
	}
	group := keygroup.Of(g.hasher.Hash(s.r.Key), keygroup.DefaultMaxParallelism)
	for i, op := range g.subtasks {
		if keygroup.ForSubtask(keygroup.DefaultMaxParallelism, len(g.subtasks), i).Contains(group) {
			c := g.chains[i]
			c.now, c.group = s.ts, group
			op.Collect(s.r)
			return c.err
		}
	}
	panic("no subtask owns key group " + fmt.Sprint(group))
}

func (g *kfRun) step(s kfStep) error {
	switch s.kind {
	case stepCheckpoint:
		g.next++
		r, err := checkpointAll(g.subtasks, g.next, &g.w)
		if err != nil {
			return err
		}
		g.ckpt, g.outAt, g.nowAt, g.since = r, int64(len(g.out)), g.now, nil
		return nil
	case stepCrash:
		if err := g.close(); err != nil {
			return err
		}
		g.out, g.now = g.out[:g.outAt], g.nowAt
		if err := g.open(s.p); err != nil {
			return err
		}
		for _, in := range g.since {
			if err := g.input(in); err != nil {
				return err
			}
		}
		return nil
	}
	g.since = append(g.since, s)
	return g.input(s)
}

// kfKey is the model's state of a key.
type kfKey struct {
	sum          int64
	list         []int64
	m            map[int64]int64
	event, timer map[int64]bool
}

// kfModel is the function's semantics over maps: a timer is one per key,
// kind and instant; event-time timers at or before a watermark that moves
// up fire, earliest first, those their firing makes due too; the clock
// fires the processing-time timers at or before it; the end of the input
// drops the processing-time timers.
type kfModel struct {
	wm   int64
	keys map[string]*kfKey
	out  []string
}

func (m *kfModel) key(k string) *kfKey {
	if m.keys[k] == nil {
		m.keys[k] = &kfKey{m: map[int64]int64{}, event: map[int64]bool{}, timer: map[int64]bool{}}
	}
	return m.keys[k]
}

func (m *kfModel) step(s kfStep, now int64) {
	switch s.kind {
	case stepRecord:
		k, r := m.key(s.r.Key), s.r
		switch r.Op {
		case kfAdd:
			k.sum += r.V
			k.list = append(k.list, r.V)
			k.m[r.V%3] = r.V
			wm := m.wm
			if wm == operator.MinTime {
				wm = time.Time{}.UnixMilli() // c.Watermark() before the first
			}
			m.out = append(m.out, fmt.Sprintf("%s add %d wm=%d %s @%d", r.Key, r.V, wm, kfState(k.sum, k.list, k.m), s.ts))
		case kfClear:
			k.sum, k.list, k.m = 0, nil, map[int64]int64{}
		case kfEventTimer:
			k.event[s.ts+r.D] = true
		case kfDeleteEvent:
			delete(k.event, s.ts+r.D)
		case kfTimer:
			k.timer[now+r.D] = true
		case kfDeleteTimer:
			delete(k.timer, now+r.D)
		}
	case stepWatermark:
		if s.wm > m.wm {
			m.wm = s.wm
			m.fire(true, s.wm)
		}
	case kfStepClock:
		m.fire(false, s.now)
	case kfStepEnd:
		for _, k := range m.keys {
			clear(k.timer)
		}
	}
}

// fire fires the timers of a kind at or before limit, earliest first.
func (m *kfModel) fire(event bool, limit int64) {
	timers := func(k *kfKey) map[int64]bool {
		if event {
			return k.event
		}
		return k.timer
	}
	for {
		key, at, found := "", int64(0), false
		for name, k := range m.keys {
			for t := range timers(k) {
				if t <= limit && (!found || t < at) {
					key, at, found = name, t, true
				}
			}
		}
		if !found {
			return
		}
		k := m.keys[key]
		delete(timers(k), at)
		k.sum += 1000
		kind, ts := "processing time", int64(operator.MinTime) // no event time
		if event {
			kind, ts = "event time", at
		}
		m.out = append(m.out, fmt.Sprintf("%s %s timer %d %s @%d", key, kind, at, kfState(k.sum, k.list, k.m), ts))
		register, registers, deletes, clearsList := kfFollowUps(at)
		if registers {
			timers(k)[register] = true
		}
		if deletes {
			delete(timers(k), at+1)
		}
		if clearsList {
			k.list = nil
			if event {
				k.timer[at+2] = true
			} else {
				k.event[at+2] = true
			}
		}
	}
}

// runKeyedSeed runs a seed through the function and the model and says how
// their results differ ("" when they agree).
func runKeyedSeed(t *testing.T, seed uint64, knobs keyedKnobs) (string, error) {
	c, steps := generateKeyed(seed)
	g := &kfRun{c: c, knobs: knobs, hasher: codec.NewHasher(codec.For[string]()), now: 100, nowAt: 100}
	if c.pebble {
		g.stateDir = t.TempDir()
	}
	defer g.run.Close()
	if err := g.open(1); err != nil {
		return "", err
	}
	m := &kfModel{wm: operator.MinTime, keys: map[string]*kfKey{}}
	now := int64(100)
	for _, s := range steps {
		if err := g.step(s); err != nil {
			g.close()
			return "", fmt.Errorf("seed %d (%v), step %v: %w", seed, c, s, err)
		}
		if s.kind == kfStepClock {
			now = s.now
		}
		m.step(s, now)
	}
	if err := g.close(); err != nil {
		return "", err
	}
	// A key's results come in one order (its records in arrival order, its
	// timers earliest first); keys interleave in any.
	got, want := byKey(g.out), byKey(m.out)
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if !slices.Equal(got[k], want[k]) {
			fmt.Fprintf(&b, "  key %s: got\n    %s\n  want\n    %s\n", k, strings.Join(got[k], "\n    "), strings.Join(want[k], "\n    "))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			fmt.Fprintf(&b, "  key %s: got %v, want nothing\n", k, got[k])
		}
	}
	if b.Len() == 0 {
		return "", nil
	}
	b.WriteString("  steps:")
	for _, s := range steps {
		fmt.Fprintf(&b, " %v;", s)
	}
	return fmt.Sprintf("seed %d (%v): results differ from the model:\n%s", seed, c, b.String()), nil
}

// byKey groups results by their key (their first word), in order.
func byKey(out []string) map[string][]string {
	m := map[string][]string{}
	for _, r := range out {
		k, _, _ := strings.Cut(r, " ")
		m[k] = append(m[k], r)
	}
	return m
}

// TestKeyedFunctionGenerator runs -window.seeds seeds (400 by default) of
// the keyed function generator from -window.first, and stops after three
// that fail.
func TestKeyedFunctionGenerator(t *testing.T) {
	runSeeds(t, runKeyedSeed)
}

// TestKeyedFunctionGeneratorCatchesPlantedBugs puts back a defect of the
// keyed operator and checks that the generator finds it.
func TestKeyedFunctionGeneratorCatchesPlantedBugs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		knobs keyedKnobs
	}{
		{"a processing-time timer fires with the event time of the record before it", keyedKnobs{staleTimerTime: true}},
		{"the end of the input leaves processing-time timers that a restore fires", keyedKnobs{keepProcessingTimers: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			findsPlanted(t, runKeyedSeed, tc.knobs)
		})
	}
}
