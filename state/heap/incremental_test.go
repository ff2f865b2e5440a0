package heap

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
)

var modelSeeds = flag.Int("heap.seeds", 40, "seeds TestIncrementalAgainstAModel runs")

// store keeps what snapshots write, as a checkpoint storage does; it
// counts the bytes written.
type store struct {
	files   map[string][]byte
	written int // bytes of shared files
}

func newStore() *store { return &store{files: map[string][]byte{}} }

func (s *store) Write(h checkpoint.Handle, data []byte) (checkpoint.Handle, error) {
	h.Path = fmt.Sprint("own/", len(s.files))
	h.SizeBytes = int64(len(data))
	s.files[h.Path] = slices.Clone(data)
	return h, nil
}

func (s *store) WriteShared(h checkpoint.Handle, r io.Reader) (checkpoint.Handle, error) {
	data, err := io.ReadAll(r)
	h.Path = fmt.Sprint("shared/", len(s.files))
	h.SizeBytes = int64(len(data))
	s.files[h.Path] = data
	s.written += len(data)
	return h, err
}

func (s *store) read(h checkpoint.Handle) ([]byte, error) {
	d, ok := s.files[h.Path]
	if !ok {
		return nil, fmt.Errorf("no file %s", h.Path)
	}
	return d, nil
}

// take runs checkpoint id of subtask i (of operator "op") to the end, as
// the runtime does: its handles name the subtask.
func take(t *testing.T, b *Backend, id checkpoint.ID, i int, s *store) []checkpoint.Handle {
	t.Helper()
	async, err := b.Snapshot(id)
	if err != nil {
		t.Fatal(err)
	}
	return finish(t, async, i, s)
}

func finish(t *testing.T, async state.Async, i int, s *store) []checkpoint.Handle {
	t.Helper()
	hs, err := async(s)
	if err != nil {
		t.Fatal(err)
	}
	for j := range hs {
		hs[j].Operator, hs[j].Subtask = "op", i
	}
	return hs
}

func openInc(t *testing.T, r keygroup.Range, hs []checkpoint.Handle, s *store) *tables {
	t.Helper()
	b := NewIncremental(r)
	if hs != nil {
		if err := b.Restore(hs, s.read); err != nil {
			t.Fatal(err)
		}
	}
	return declare(t, b)
}

// model is what the tables should hold.
type model struct {
	counts map[string]int
	lists  map[string][]string
	maps   map[string]map[string]int
	timers map[string]int64 // key → time: a key's timers at distinct times
}

type timerAt struct {
	k  string
	at int64
}

func newModel() *model {
	return &model{counts: map[string]int{}, lists: map[string][]string{}, maps: map[string]map[string]int{}, timers: map[string]int64{}}
}

func (m *model) clone() *model {
	c := &model{counts: maps.Clone(m.counts), lists: map[string][]string{}, maps: map[string]map[string]int{}, timers: maps.Clone(m.timers)}
	for k, l := range m.lists {
		c.lists[k] = slices.Clone(l)
	}
	for k, mm := range m.maps {
		c.maps[k] = maps.Clone(mm)
	}
	return c
}

// check compares the state restored from hs, into one subtask, with m.
func check(t *testing.T, what string, hs []checkpoint.Handle, s *store, m *model, keys []string) {
	t.Helper()
	holds(t, what, openInc(t, keygroup.Range{First: 0, Last: maxP - 1}, hs, s), m, keys)
}

// holds fails unless the tables got hold what m says, for keys.
func holds(t *testing.T, what string, got *tables, m *model, keys []string) {
	t.Helper()
	for _, k := range keys {
		at(got.b, k)
		v, ok := got.counts.Get(k)
		if want, wok := m.counts[k]; ok != wok || v != want {
			t.Fatalf("%s: value %s = %d %v, want %d %v", what, k, v, ok, want, wok)
		}
		if l, want := got.lists.Get(k), m.lists[k]; !slices.Equal(l, want) {
			t.Fatalf("%s: list %s = %v, want %v", what, k, l, want)
		}
		if mm, want := maps.Collect(got.maps.All(k)), m.maps[k]; !maps.Equal(mm, want) {
			t.Fatalf("%s: map %s = %v, want %v", what, k, mm, want)
		}
	}
	fired := map[string]int64{}
	if err := got.timers.FireUpTo(math.MaxInt64, func(k string, at time.Time) error {
		if _, dup := fired[k]; dup {
			t.Fatalf("%s: timer of %s fired twice", what, k)
		}
		fired[k] = at.UnixMilli()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(fired, m.timers) {
		t.Fatalf("%s: timers %v, want %v", what, fired, m.timers)
	}
}

// TestIncrementalAgainstAModel runs random writes, deletes, timers,
// checkpoints (several in flight, completed or aborted in any order) and
// restores at another parallelism, and compares every completed
// checkpoint, restored, with a model of the state at its snapshot.
// -heap.seeds=N runs N seeds.
func TestIncrementalAgainstAModel(t *testing.T) {
	for seed := range *modelSeeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { runModel(t, uint64(seed)) })
	}
}

func runModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 86))
	keys := make([]string, 30+rng.IntN(200))
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	s := newStore()
	live := newModel()
	split := func(p int, hs []checkpoint.Handle) []*tables {
		subs := make([]*tables, p)
		for i := range subs {
			subs[i] = openInc(t, keygroup.ForSubtask(maxP, p, i), hs, s)
		}
		return subs
	}
	subs := split(1+rng.IntN(3), nil)
	owner := func(k string) *tables {
		g := keygroup.Of(hasher.Hash(k), maxP)
		for _, ts := range subs {
			if ts.b.groups.Contains(g) {
				ts.b.SetGroup(g)
				return ts
			}
		}
		panic("no subtask owns " + k)
	}
	type inFlight struct {
		id     checkpoint.ID
		m      *model
		asyncs []func() []checkpoint.Handle
	}
	var flying []*inFlight
	var completed []checkpoint.Handle
	completedModel := newModel()
	id := checkpoint.ID(0)
	for step := range 1500 {
		k := keys[rng.IntN(len(keys))]
		switch op := rng.IntN(100); {
		case op < 15:
			v := rng.IntN(1000)
			owner(k).counts.Put(k, v)
			live.counts[k] = v
		case op < 22:
			owner(k).counts.Delete(k)
			delete(live.counts, k)
		case op < 30:
			v := fmt.Sprint(step)
			owner(k).lists.Add(k, v)
			live.lists[k] = append(live.lists[k], v)
		case op < 33:
			vs := []string{fmt.Sprint("u", step)}
			owner(k).lists.Update(k, vs)
			live.lists[k] = vs
		case op < 37:
			owner(k).lists.Delete(k)
			delete(live.lists, k)
		case op < 47:
			uk := fmt.Sprint("uk", rng.IntN(4))
			owner(k).maps.Put(k, uk, step)
			if live.maps[k] == nil {
				live.maps[k] = map[string]int{}
			}
			live.maps[k][uk] = step
		case op < 53:
			uk := fmt.Sprint("uk", rng.IntN(4))
			owner(k).maps.Remove(k, uk)
			if delete(live.maps[k], uk); len(live.maps[k]) == 0 {
				delete(live.maps, k)
			}
		case op < 55:
			owner(k).maps.Delete(k)
			delete(live.maps, k)
		case op < 62:
			if _, has := live.timers[k]; !has { // one timer per key keeps the model simple
				at := int64(rng.IntN(1000))
				owner(k).timers.Register(k, time.UnixMilli(at))
				live.timers[k] = at
			}
		case op < 65:
			if at, has := live.timers[k]; has {
				owner(k).timers.Delete(k, time.UnixMilli(at))
				delete(live.timers, k)
			}
		case op < 67:
			limit := int64(rng.IntN(1000))
			for _, ts := range subs {
				if err := ts.timers.FireUpTo(limit, func(k string, at time.Time) error {
					if live.timers[k] != at.UnixMilli() {
						t.Fatalf("timer of %s at %d fired; the model has %d", k, at.UnixMilli(), live.timers[k])
					}
					delete(live.timers, k)
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
		case op < 68:
			for _, ts := range subs {
				ts.timers.Clear()
			}
			clear(live.timers)
		case op < 78: // a checkpoint; its asynchronous parts run later
			id++
			f := &inFlight{id: id, m: live.clone()}
			for i, ts := range subs {
				async, err := ts.b.Snapshot(id)
				if err != nil {
					t.Fatal(err)
				}
				f.asyncs = append(f.asyncs, func() []checkpoint.Handle { return finish(t, async, i, s) })
			}
			flying = append(flying, f)
		case op < 93 && len(flying) > 0: // complete or abort one in flight
			j := rng.IntN(len(flying))
			f := flying[j]
			var hs []checkpoint.Handle
			for _, a := range f.asyncs {
				hs = append(hs, a()...)
			}
			if rng.IntN(4) == 0 {
				for _, ts := range subs {
					ts.b.NotifyAborted(f.id)
				}
				flying = slices.Delete(flying, j, j+1)
				continue
			}
			// Completing it subsumes those taken before it.
			for _, ts := range subs {
				ts.b.NotifyComplete(f.id)
			}
			flying = slices.DeleteFunc(flying, func(o *inFlight) bool { return o.id <= f.id })
			completed, completedModel = hs, f.m
			check(t, fmt.Sprintf("step %d, checkpoint %d", step, f.id), completed, s, completedModel, keys)
			for _, ts := range subs {
				for name, cs := range ts.b.confirmed.tables {
					for g, c := range cs {
						if len(c) > maxLinks || (len(c) > 0 && !c[0].full) {
							t.Fatalf("checkpoint %d: state %s, key group %d: a chain of %d sections, first full: %v", f.id, name, g, len(c), c[0].full)
						}
					}
				}
			}
		case op < 95 && completed != nil: // a failure: restore, at any parallelism
			flying = nil
			subs = split(1+rng.IntN(3), completed)
			live = completedModel.clone()
		}
	}
}

// TestDeltasHoldOnlyTheChange: a checkpoint after a few writes to a large
// state writes a shared file of a few hundred bytes; deletions, a key deleted and written
// again, and a key deleted in a group nothing touches afterwards all
// restore as they were.
func TestDeltasHoldOnlyTheChange(t *testing.T) {
	all := keygroup.Range{First: 0, Last: maxP - 1}
	s := newStore()
	ts := openInc(t, all, nil, s)
	fill(ts, 5000, 1)
	take(t, ts.b, 1, 0, s)
	ts.b.NotifyComplete(1)
	full := s.written

	s.written = 0
	ts.counts.Put(at(ts.b, "k1"), -1)
	ts.counts.Delete(at(ts.b, "k2"))
	ts.lists.Delete(at(ts.b, "k3"))
	ts.lists.Add(at(ts.b, "k3"), "again") // deleted, then written again
	ts.maps.Remove(at(ts.b, "k4"), "u1")  // the last entry: the key goes
	ts.timers.Delete(at(ts.b, "k5"), time.UnixMilli(1005))
	hs := take(t, ts.b, 2, 0, s)
	ts.b.NotifyComplete(2)
	if s.written > full/500 {
		t.Fatalf("a checkpoint of 6 changes wrote %d bytes; the full one %d", s.written, full)
	}
	got := openInc(t, all, hs, s)
	want := func(k string, count int, hasCount bool, list []string, mapLen int) {
		t.Helper()
		at(got.b, k)
		if v, ok := got.counts.Get(k); v != count || ok != hasCount {
			t.Fatalf("%s: count %d %v", k, v, ok)
		}
		if l := got.lists.Get(k); !slices.Equal(l, list) {
			t.Fatalf("%s: list %v, want %v", k, l, list)
		}
		if n := len(maps.Collect(got.maps.All(k))); n != mapLen {
			t.Fatalf("%s: %d map entries, want %d", k, n, mapLen)
		}
	}
	want("k1", -1, true, []string{"r1"}, 1)
	want("k2", 0, false, []string{"r1"}, 1)
	want("k3", 3+1, true, []string{"again"}, 1)
	want("k4", 4+1, true, []string{"r1"}, 0)
	var fired []string
	got.timers.FireUpTo(1006, func(k string, _ time.Time) error { fired = append(fired, k); return nil })
	if fmt.Sprint(fired) != "[k0 k1 k2 k3 k4 k6]" {
		t.Fatalf("fired %v: k5's timer was deleted", fired)
	}

	// k2's group is not touched again: its chain, with the deletion, is
	// carried on, and a checkpoint of nothing writes no shared file.
	s.written = 0
	hs = take(t, ts.b, 3, 0, s)
	ts.b.NotifyComplete(3)
	got = openInc(t, all, hs, s)
	if _, ok := got.counts.Get(at(got.b, "k2")); ok {
		t.Fatal("k2's deletion was lost when its group did not change again")
	}
	if n := countKind(hs, KindData); n != 2 {
		t.Fatalf("checkpoint 3 references %d shared files, want those of 1 and 2", n)
	}
}

func countKind(hs []checkpoint.Handle, kind string) int {
	n := 0
	for _, h := range hs {
		if h.Kind == kind {
			n++
		}
	}
	return n
}

// TestChainsAreCompacted: with a tenth of the keys of every group
// changing at every checkpoint, chains stay within maxLinks sections,
// groups are rewritten whole at different checkpoints, and files no chain
// references drop out of the handles.
func TestChainsAreCompacted(t *testing.T) {
	all := keygroup.Range{First: 0, Last: maxP - 1}
	s := newStore()
	ts := openInc(t, all, nil, s)
	for i := range 2000 {
		ts.counts.Put(at(ts.b, fmt.Sprint("k", i)), 0)
	}
	var hs []checkpoint.Handle
	var fulls []int
	for id := checkpoint.ID(1); id <= 100; id++ {
		for i := int(id) % 10; i < 2000; i += 10 {
			k := at(ts.b, fmt.Sprint("k", i))
			ts.counts.Put(k, int(id))
		}
		hs = take(t, ts.b, id, 0, s)
		ts.b.NotifyComplete(id)
		n := 0
		for g, c := range ts.b.confirmed.tables["counts"] {
			if len(c) > maxLinks {
				t.Fatalf("checkpoint %d: key group %d has a chain of %d", id, g, len(c))
			}
			if len(c) == 1 {
				n++
			}
		}
		fulls = append(fulls, n)
	}
	if files := countKind(hs, KindData); files > 2*maxLinks || slices.ContainsFunc(hs, func(h checkpoint.Handle) bool { return h.File == "heap-1" }) {
		t.Fatalf("after 100 checkpoints, the last references %d shared files (%v): old ones did not drop out", files, hs)
	}
	rewritten := 0
	for _, n := range fulls[1:] {
		if n > maxP/2 {
			t.Fatalf("more than half the key groups were rewritten at once: groups rewritten per checkpoint %v", fulls)
		}
		rewritten += n
	}
	if rewritten < maxP {
		t.Fatalf("%d groups rewritten in 99 checkpoints: chains were not compacted (%v)", rewritten, fulls)
	}
	got := openInc(t, all, hs, s)
	for i, want := range map[int]int{7: 97, 10: 100, 1999: 99} {
		if v, _ := got.counts.Get(at(got.b, fmt.Sprint("k", i))); v != want {
			t.Fatalf("k%d = %d, want %d", i, v, want)
		}
	}
}

// TestAbortedAndConcurrentCheckpoints: a snapshot taken while another is
// in flight is relative to the newest completed one; an aborted
// checkpoint's file is never referenced again.
func TestAbortedAndConcurrentCheckpoints(t *testing.T) {
	all := keygroup.Range{First: 0, Last: maxP - 1}
	s := newStore()
	ts := openInc(t, all, nil, s)
	fill(ts, 100, 1)
	take(t, ts.b, 1, 0, s)
	ts.b.NotifyComplete(1)

	ts.counts.Put(at(ts.b, "k1"), 100)
	a2, _ := ts.b.Snapshot(2)
	ts.counts.Put(at(ts.b, "k2"), 200)
	a3, _ := ts.b.Snapshot(3)
	hs2 := finish(t, a2, 0, s)
	hs3 := finish(t, a3, 0, s)
	ts.b.NotifyAborted(2)
	ts.b.NotifyComplete(3)
	aborted := newFiles(hs2, hs3)
	for _, h := range hs3 {
		if h.Path == aborted {
			t.Fatal("checkpoint 3 references the file of aborted checkpoint 2")
		}
	}
	ts.counts.Put(at(ts.b, "k3"), 300)
	hs4 := take(t, ts.b, 4, 0, s)
	for _, h := range hs4 {
		if h.Path == aborted {
			t.Fatal("checkpoint 4 references the file of aborted checkpoint 2")
		}
	}
	got := openInc(t, all, hs4, s)
	for k, want := range map[string]int{"k1": 100, "k2": 200, "k3": 300, "k4": 5} {
		if v, _ := got.counts.Get(at(got.b, k)); v != want {
			t.Fatalf("%s = %d, want %d", k, v, want)
		}
	}
}

// newFiles is the path of the shared file of hs that earlier is not.
func newFiles(hs, earlier []checkpoint.Handle) string {
	for _, h := range hs {
		if h.Kind == KindData && !slices.ContainsFunc(earlier, func(e checkpoint.Handle) bool { return e.Path == h.Path }) {
			return h.Path
		}
	}
	return ""
}

// TestRescaleIncrementalChains: chains written by two subtasks restore
// into three, whose chains restore into one.
func TestRescaleIncrementalChains(t *testing.T) {
	s := newStore()
	restore := func(p int, hs []checkpoint.Handle, round int) []checkpoint.Handle {
		var out []checkpoint.Handle
		for i := range p {
			ts := openInc(t, keygroup.ForSubtask(maxP, p, i), hs, s)
			id := checkpoint.ID(10 * round)
			for c := range 3 { // a full checkpoint, then deltas
				for k := range 300 {
					key := fmt.Sprint("k", k)
					if g := keygroup.Of(hasher.Hash(key), maxP); ts.b.groups.Contains(g) && k%3 == c {
						ts.b.SetGroup(g)
						v, _ := ts.counts.Get(key)
						ts.counts.Put(key, v+1)
						if k%7 == 0 {
							ts.maps.Delete(key)
						}
					}
				}
				last := take(t, ts.b, id+checkpoint.ID(c), i, s)
				ts.b.NotifyComplete(id + checkpoint.ID(c))
				if c == 2 {
					out = append(out, last...)
				}
			}
		}
		return out
	}
	start := openInc(t, keygroup.Range{First: 0, Last: maxP - 1}, nil, s)
	fill(start, 300, 0)
	hs := take(t, start.b, 1, 0, s)
	hs = restore(2, hs, 1)
	hs = restore(3, hs, 2)
	hs = restore(1, hs, 3)
	got := openInc(t, keygroup.Range{First: 0, Last: maxP - 1}, hs, s)
	for k := range 300 {
		key := at(got.b, fmt.Sprint("k", k))
		if v, _ := got.counts.Get(key); v != k+3 {
			t.Fatalf("%s = %d, want %d", key, v, k+3)
		}
		if n := len(maps.Collect(got.maps.All(key))); n != 1 && k%7 != 0 || n != 0 && k%7 == 0 {
			t.Fatalf("%s: %d map entries", key, n)
		}
	}
}

// TestDamagedSharedFileIsAnError: a shared file whose checksum does not
// match its handle fails the restore, naming the file.
func TestDamagedSharedFileIsAnError(t *testing.T) {
	all := keygroup.Range{First: 0, Last: maxP - 1}
	s := newStore()
	ts := openInc(t, all, nil, s)
	fill(ts, 100, 1)
	hs := take(t, ts.b, 1, 0, s)
	i := slices.IndexFunc(hs, func(h checkpoint.Handle) bool { return h.Kind == KindData })
	d := s.files[hs[i].Path]
	d[len(d)/2] ^= 0xff
	err := NewIncremental(all).Restore(hs, s.read)
	if !errors.Is(err, checkpoint.ErrStateDamaged) || !strings.Contains(err.Error(), hs[i].Path) || !strings.Contains(err.Error(), "heap-1") {
		t.Fatalf("restore of a damaged shared file: %v", err)
	}
}

// TestUndeclaredStateIsCarriedOn: state restored from an incremental
// checkpoint and not declared is carried on by the following ones, full or
// incremental, and is there when it is declared again.
func TestUndeclaredStateIsCarriedOn(t *testing.T) {
	all := keygroup.Range{First: 0, Last: maxP - 1}
	s := newStore()
	ts := openInc(t, all, nil, s)
	fill(ts, 100, 1)
	take(t, ts.b, 1, 0, s)
	ts.b.NotifyComplete(1)
	ts.counts.Put(at(ts.b, "k1"), 7)
	ts.lists.Delete(at(ts.b, "k2"))
	hs := take(t, ts.b, 2, 0, s) // chains of a full section and a delta
	m, keys := newModel(), make([]string, 100)
	for i := range keys {
		k := fmt.Sprint("k", i)
		keys[i] = k
		m.counts[k], m.lists[k], m.maps[k], m.timers[k] = i+1, []string{"r1"}, map[string]int{"u1": 1}, int64(1000+i)
	}
	m.counts["k1"] = 7
	delete(m.lists, "k2")

	b := NewIncremental(all) // declares nothing
	if err := b.Restore(hs, s.read); err != nil {
		t.Fatal(err)
	}
	hs = take(t, b, 3, 0, s)
	b.NotifyComplete(3)
	hs = take(t, b, 4, 0, s)
	check(t, "incremental, undeclared", hs, s, m, keys)

	// A full checkpoint carries the chains too: a job restarted with
	// Config.Full that declares only some of its state, or one moved to
	// Pebble, whose heap backend declares only timers.
	for _, declare := range []bool{false, true} {
		full := New(all)
		if err := full.Restore(hs, s.read); err != nil {
			t.Fatal(err)
		}
		if declare {
			counts, err := NewValue(full, "counts", codec.For[string](), codec.For[int]())
			if err != nil {
				t.Fatal(err)
			}
			counts.Put(at(full, "k1"), 8)
			m.counts["k1"] = 8
		}
		for id := checkpoint.ID(5); id <= 6; id++ { // twice: carrying consumes nothing
			hs = take(t, full, id, 0, s)
			full.NotifyComplete(id)
		}
		check(t, fmt.Sprintf("full, counts declared %v", declare), hs, s, m, keys)
		again := New(all) // and restored into a full backend again
		if err := again.Restore(hs, s.read); err != nil {
			t.Fatal(err)
		}
		hs = take(t, again, 7, 0, s)
		check(t, fmt.Sprintf("full twice, counts declared %v", declare), hs, s, m, keys)
	}
}

// BenchmarkValueInsertDelete: the write path incremental snapshots track
// (a new key, a deletion), with a freeze every 10,000 operations.
func BenchmarkValueInsertDelete(b *testing.B) {
	for _, inc := range []bool{false, true} {
		b.Run(fmt.Sprint("incremental=", inc), func(b *testing.B) {
			be := New(keygroup.Range{First: 0, Last: maxP - 1})
			be.incremental = inc
			v, _ := NewValue(be, "c", codec.For[string](), codec.For[int]())
			keys := make([]string, 1000)
			groups := make([]int, len(keys))
			for i := range keys {
				keys[i] = fmt.Sprint("word", i)
				groups[i] = keygroup.Of(hasher.Hash(keys[i]), maxP)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				j := i % len(keys)
				be.SetGroup(groups[j])
				if i%2 == 0 {
					v.Put(keys[j], i)
				} else {
					v.Delete(keys[j])
				}
				if i%10000 == 0 {
					be.freeze()
				}
			}
		})
	}
}

// TestKeysWrittenStayBounded: a delta walks the keys written since its base
// (the newest completed checkpoint). When no checkpoint completes, a key
// written at every checkpoint is recorded once per epoch; the record is
// dropped when it outgrows a quarter of the group (and maxUntracked), and
// a delta since before the drop walks the group instead: here 100 keys of
// one group written once (dropped at once), then one of them at each of 298
// checkpoints that do not complete. The last delta must hold all 100, each
// once, with its newest value.
func TestKeysWrittenStayBounded(t *testing.T) {
	all := keygroup.Range{First: 0, Last: maxP - 1}
	var keys []string // of one key group
	for i := 0; len(keys) < 100; i++ {
		if k := fmt.Sprint("k", i); keygroup.Of(hasher.Hash(k), maxP) == 7 {
			keys = append(keys, k)
		}
	}
	s := newStore()
	ts := openInc(t, all, nil, s)
	ts.counts.Put(at(ts.b, keys[0]), 0)
	take(t, ts.b, 1, 0, s)
	ts.b.NotifyComplete(1)
	for i, k := range keys {
		ts.counts.Put(at(ts.b, k), 1000+i)
	}
	for id := checkpoint.ID(2); id < 300; id++ {
		ts.counts.Put(at(ts.b, keys[0]), int(id))
		take(t, ts.b, id, 0, s) // never completed
		if ws := ts.counts.written[7]; len(ws) > len(ts.counts.groups[7])/4+maxUntracked {
			t.Fatalf("checkpoint %d: %d writes recorded for %d keys", id, len(ws), len(ts.counts.groups[7]))
		}
	}
	s.written = 0
	hs := take(t, ts.b, 300, 0, s)
	ts.b.NotifyComplete(300)
	if s.written > 4<<10 {
		t.Fatalf("a delta of 100 keys wrote %d bytes", s.written)
	}
	got := openInc(t, all, hs, s)
	for i, k := range keys {
		want := 1000 + i
		if i == 0 {
			want = 299
		}
		if v, _ := got.counts.Get(at(got.b, k)); v != want {
			t.Fatalf("%s: %d after the restore, want %d", k, v, want)
		}
	}
}
