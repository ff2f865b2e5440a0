package statetest

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/operator/operatortest"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/backend"
)

// Generate drives the backend cfg configures with the operations of a
// seed against a model of keyed state: values, lists (empty elements
// among them), maps and one timer a key, written and read over a few
// hundred keys by subtasks of a parallelism drawn from the seed; reads
// checked as they happen; checkpoints whose asynchronous parts run some
// steps later (the state changing meanwhile), completed or aborted; and
// restores, at a parallelism drawn again, from the latest completed
// checkpoint, after which every key is compared whole. It returns the
// first difference from the model, naming the seed and step (nil: none).
// A Pebble backend should have a small memtable (Config.MemTableBytes),
// so that lists and maps span data files and compactions.
func Generate(t *testing.T, cfg backend.Config, seed uint64) error {
	g := &gen{t: t, cfg: cfg, rng: rand.New(rand.NewPCG(seed, 0x57a7e)), w: &operatortest.MemWriter{}, live: newModel()}
	g.keys = make([]string, 20+g.rng.IntN(300))
	for i := range g.keys {
		g.keys[i] = fmt.Sprint("k", i)
	}
	defer g.closeAll()
	g.reopen(nil)
	steps := 1000 + g.rng.IntN(2000)
	for g.step = 0; g.step < steps; g.step++ {
		if err := g.next(); err != nil {
			return fmt.Errorf("seed %d, step %d of %d (parallelism %d): %w", seed, g.step, steps, len(g.subs), err)
		}
	}
	return nil
}

// model is the state as the operations made it.
type model struct {
	values map[string]int64
	lists  map[string][]string
	maps   map[string]map[string]int64
	timers map[string]int64
}

func newModel() *model {
	return &model{values: map[string]int64{}, lists: map[string][]string{}, maps: map[string]map[string]int64{}, timers: map[string]int64{}}
}

func (m *model) clone() *model {
	c := &model{values: maps.Clone(m.values), lists: map[string][]string{}, maps: map[string]map[string]int64{}, timers: maps.Clone(m.timers)}
	for k, l := range m.lists {
		c.lists[k] = slices.Clone(l)
	}
	for k, mm := range m.maps {
		c.maps[k] = maps.Clone(mm)
	}
	return c
}

type gen struct {
	t    *testing.T
	cfg  backend.Config
	rng  *rand.Rand
	keys []string
	step int
	w    *operatortest.MemWriter
	subs []*tables
	live *model
	// taken is the newest checkpoint's id; pending, checkpoints whose
	// asynchronous parts have not run; latest, the newest completed one.
	taken   checkpoint.ID
	pending []*pendingCheckpoint
	latest  *pendingCheckpoint
}

type pendingCheckpoint struct {
	id     checkpoint.ID
	model  *model
	asyncs []state.Async
	hs     []checkpoint.Handle
}

// reopen closes the subtasks and opens new ones, at a parallelism drawn
// from the seed, restored from c (nil: empty).
func (g *gen) reopen(c *pendingCheckpoint) {
	g.closeAll()
	p := 1 + g.rng.IntN(4)
	g.subs = make([]*tables, p)
	var rs *state.Restored
	if c != nil {
		rs = &state.Restored{Handles: c.hs, Reader: g.w, Owned: true}
	}
	s := &suite{cfg: g.cfg}
	for i := range g.subs {
		g.subs[i] = s.openUnclosed(g.t, keygroup.ForSubtask(maxP, p, i), rs)
	}
	g.pending = nil
}

func (g *gen) closeAll() {
	for _, ts := range g.subs {
		ts.b.Close()
	}
	g.subs = nil
}

// owner makes k's key group current in the subtask that owns it.
func (g *gen) owner(k string) *tables {
	for _, ts := range g.subs {
		if ts.group(k) {
			return ts
		}
	}
	panic("no subtask owns " + k)
}

func (g *gen) next() error {
	k := g.keys[g.rng.IntN(len(g.keys))]
	m := g.live
	switch op := g.rng.IntN(100); {
	case op < 2 && g.rng.IntN(2) == 0:
		g.checkpoint()
	case op < 2:
		return g.finish()
	case op < 3 && g.rng.IntN(3) == 0:
		return g.restore()
	case op < 10:
		v := int64(g.rng.IntN(1000))
		g.owner(k).values.Put(k, v)
		m.values[k] = v
	case op < 14:
		g.owner(k).values.Delete(k)
		delete(m.values, k)
	case op < 20:
		return g.checkValue(k)
	case op < 32:
		v := fmt.Sprint(g.step)
		if g.rng.IntN(8) == 0 {
			v = "" // an element of no bytes but its codec's
		}
		g.owner(k).lists.Add(k, v)
		m.lists[k] = append(m.lists[k], v)
	case op < 36:
		vs := make([]string, g.rng.IntN(4))
		for i := range vs {
			vs[i] = fmt.Sprint("u", g.step, ".", i)
		}
		g.owner(k).lists.Update(k, vs)
		if len(vs) == 0 {
			delete(m.lists, k)
		} else {
			m.lists[k] = vs
		}
	case op < 39:
		g.owner(k).lists.Delete(k)
		delete(m.lists, k)
	case op < 47:
		return g.checkList(k)
	case op < 55:
		uk := fmt.Sprint("uk", g.rng.IntN(5))
		v := int64(g.step)
		g.owner(k).maps.Put(k, uk, v)
		if m.maps[k] == nil {
			m.maps[k] = map[string]int64{}
		}
		m.maps[k][uk] = v
	case op < 59:
		uk := fmt.Sprint("uk", g.rng.IntN(5))
		g.owner(k).maps.Remove(k, uk)
		if delete(m.maps[k], uk); len(m.maps[k]) == 0 {
			delete(m.maps, k)
		}
	case op < 61:
		g.owner(k).maps.Delete(k)
		delete(m.maps, k)
	case op < 67:
		return g.checkMap(k)
	case op < 72:
		if _, has := m.timers[k]; !has {
			at := int64(g.rng.IntN(10_000))
			g.owner(k).timers.Register(k, time.UnixMilli(at))
			m.timers[k] = at
		}
	case op < 74:
		if at, has := m.timers[k]; has {
			g.owner(k).timers.Delete(k, time.UnixMilli(at))
			delete(m.timers, k)
		}
	case op < 76:
		return g.fire(int64(g.rng.IntN(10_000)))
	}
	return nil
}

func (g *gen) checkValue(k string) error {
	v, ok := g.owner(k).values.Get(k)
	if want, has := g.live.values[k]; ok != has || v != want {
		return fmt.Errorf("value of %s is %d (present %v), the model's %d (present %v)", k, v, ok, want, has)
	}
	return nil
}

func (g *gen) checkList(k string) error {
	ts := g.owner(k)
	got, want := ts.lists.Get(k), g.live.lists[k]
	if !slices.Equal(got, want) {
		return fmt.Errorf("list of %s is %q, the model's %q", k, got, want)
	}
	// All, stopped part of the way, yields the list's beginning.
	n := g.rng.IntN(len(want) + 1)
	var streamed []string
	for v := range ts.lists.All(k) {
		if len(streamed) == n {
			break
		}
		streamed = append(streamed, v)
	}
	if !slices.Equal(streamed, want[:n]) {
		return fmt.Errorf("the first %d of %s's list stream as %q, the model's %q", n, k, streamed, want[:n])
	}
	return nil
}

func (g *gen) checkMap(k string) error {
	ts := g.owner(k)
	got := map[string]int64{}
	for uk, v := range ts.maps.All(k) {
		if _, twice := got[uk]; twice {
			return fmt.Errorf("map of %s yields %s twice", k, uk)
		}
		got[uk] = v
	}
	if want := g.live.maps[k]; !maps.Equal(got, want) {
		return fmt.Errorf("map of %s is %v, the model's %v", k, got, want)
	}
	uk := fmt.Sprint("uk", g.rng.IntN(5))
	v, ok := ts.maps.Get(k, uk)
	if want, has := g.live.maps[k][uk]; ok != has || v != want {
		return fmt.Errorf("map of %s at %s is %d (present %v), the model's %d (present %v)", k, uk, v, ok, want, has)
	}
	return nil
}

// fire fires every subtask's timers up to limit, checking each against the
// model, and that none it holds is left.
func (g *gen) fire(limit int64) error {
	for _, ts := range g.subs {
		var wrong error
		if err := ts.timers.FireUpTo(limit, func(k string, at time.Time) error {
			if want, has := g.live.timers[k]; !has || want != at.UnixMilli() || want > limit {
				wrong = fmt.Errorf("timer of %s at %d fired up to %d; the model's is at %d (present %v)", k, at.UnixMilli(), limit, want, has)
				return wrong
			}
			delete(g.live.timers, k)
			return nil
		}); err != nil && wrong == nil {
			g.t.Fatal(err)
		}
		if wrong != nil {
			return wrong
		}
	}
	for k, at := range g.live.timers {
		if at <= limit {
			return fmt.Errorf("timer of %s at %d did not fire up to %d", k, at, limit)
		}
	}
	return nil
}

// checkpoint takes the synchronous part of the next checkpoint in every
// subtask; its asynchronous parts run when it finishes.
func (g *gen) checkpoint() {
	g.taken++
	c := &pendingCheckpoint{id: g.taken, model: g.live.clone()}
	for _, ts := range g.subs {
		async, err := ts.b.Snapshot(c.id)
		if err != nil {
			g.t.Fatal(err)
		}
		c.asyncs = append(c.asyncs, async)
	}
	g.pending = append(g.pending, c)
}

// finish runs the oldest pending checkpoint's asynchronous parts and
// completes it, or (one time in four) aborts it.
func (g *gen) finish() error {
	if len(g.pending) == 0 {
		return nil
	}
	c := g.pending[0]
	g.pending = g.pending[1:]
	if g.rng.IntN(4) == 0 {
		for _, ts := range g.subs {
			ts.b.NotifyAborted(c.id)
		}
		return nil
	}
	for i, async := range c.asyncs {
		hs, err := async(g.w)
		if err != nil {
			g.t.Fatal(err)
		}
		for j := range hs {
			hs[j].Subtask, hs[j].Operator = i, "op" // as the operator's writer does
		}
		c.hs = append(c.hs, hs...)
	}
	c.asyncs = nil
	for _, ts := range g.subs {
		ts.b.NotifyComplete(c.id)
	}
	g.latest = c
	return nil
}

// restore starts over from the latest completed checkpoint (or empty) and
// compares every key with the model as that checkpoint took it.
func (g *gen) restore() error {
	if g.latest == nil {
		g.live = newModel()
		g.reopen(nil)
	} else {
		g.live = g.latest.model.clone()
		g.reopen(g.latest)
	}
	for _, k := range g.keys {
		if err := g.checkValue(k); err != nil {
			return fmt.Errorf("after a restore: %w", err)
		}
		if err := g.checkList(k); err != nil {
			return fmt.Errorf("after a restore: %w", err)
		}
		if err := g.checkMap(k); err != nil {
			return fmt.Errorf("after a restore: %w", err)
		}
	}
	// Each subtask's next timer is the earliest of the model's in its key
	// groups.
	for _, ts := range g.subs {
		var want int64 = -1
		for k, at := range g.live.timers {
			if ts.r.Contains(keygroup.Of(ts.hasher.Hash(k), maxP)) && (want < 0 || at < want) {
				want = at
			}
		}
		at, ok := ts.timers.Next()
		if ok != (want >= 0) || ok && at.UnixMilli() != want {
			return fmt.Errorf("after a restore, key groups %v's next timer is at %d (present %v), the model's at %d", ts.r, at.UnixMilli(), ok, want)
		}
	}
	return g.fire(int64(g.rng.IntN(10_000)))
}
