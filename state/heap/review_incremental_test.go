package heap

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
)

// An index whose CRC-32C is right but whose section offset and length add
// up past the largest int (each within the decoder's 1<<62 limit) must
// fail the restore with ErrCorrupt, as a section out of bounds does; the
// restore must not panic. The CRC is no defence here: it is not a MAC,
// and a buggy writer computes it over what it wrote.
func TestReviewIndexSectionOverflowIsAnError(t *testing.T) {
	all := keygroup.Range{First: 0, Last: maxP - 1}
	s := newStore()
	ts := openInc(t, all, nil, s)
	fill(ts, 10, 1)
	hs := take(t, ts.b, 1, 0, s)
	i := slices.IndexFunc(hs, func(h checkpoint.Handle) bool { return h.Kind == KindData })
	if i < 0 {
		t.Fatal("no shared file")
	}
	// A chain for key group 0 of state "counts" whose only link lies at
	// 1<<62 for 1<<62 bytes: off+n is 1<<63, negative as an int.
	sf := &sharedFile{h: hs[i]}
	tables := map[string][][]link{"counts": make([][]link, maxP)}
	tables["counts"][0] = []link{{file: sf, off: 1 << 62, n: 1 << 62, full: true}}
	index, _ := encodeIndex(0, maxP-1, tables)
	s.files["own/crafted"] = index
	crafted := []checkpoint.Handle{{Kind: state.KindKeyed, KeyGroups: all, Path: "own/crafted", SizeBytes: int64(len(index)), Operator: "op"}, hs[i]}

	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
				t.Fatalf("restore of a crafted index panicked (%v); want an error wrapping state.ErrCorrupt", p)
			}
		}()
		err = NewIncremental(all).Restore(crafted, s.read)
	}()
	if !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("restore of a crafted index: %v; want state.ErrCorrupt", err)
	}
}

// reviewTimer is a timer of the review model: several per key.
type reviewTimer struct {
	k  string
	at int64
}

// TestReviewIncrementalModelManyTimersAndReads runs a second random model
// against incremental snapshots, covering what TestIncrementalAgainstAModel
// does not: several timers per key (some at the same time for different
// keys), read-modify-write through Get then Put (Value's cached entry, its
// in-place write within an epoch), a key's map emptied by Remove and
// filled again in the same epoch, timers deleted and registered again, a
// restore into fresh backends that declare their states only after their
// first snapshot (restored state pending, then carried on), and every
// completed checkpoint restored and compared.
func TestReviewIncrementalModelManyTimersAndReads(t *testing.T) {
	for seed := range 30 {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { reviewModel(t, uint64(seed)) })
	}
}

type reviewState struct {
	counts map[string]int
	maps   map[string]map[string]int
	timers map[reviewTimer]bool
}

func (m *reviewState) clone() *reviewState {
	c := &reviewState{counts: maps.Clone(m.counts), maps: map[string]map[string]int{}, timers: maps.Clone(m.timers)}
	for k, mm := range m.maps {
		c.maps[k] = maps.Clone(mm)
	}
	return c
}

func reviewCheck(t *testing.T, what string, got *tables, m *reviewState, keys []string) {
	t.Helper()
	for _, k := range keys {
		at(got.b, k)
		v, ok := got.counts.Get(k)
		if want, wok := m.counts[k]; ok != wok || v != want {
			t.Fatalf("%s: value %s = %d %v, want %d %v", what, k, v, ok, want, wok)
		}
		if mm, want := maps.Collect(got.maps.All(k)), m.maps[k]; !maps.Equal(mm, want) && (len(mm) != 0 || len(want) != 0) {
			t.Fatalf("%s: map %s = %v, want %v", what, k, mm, want)
		}
	}
	fired := map[reviewTimer]bool{}
	if err := got.timers.FireUpTo(math.MaxInt64, func(k string, at time.Time) error {
		tm := reviewTimer{k, at.UnixMilli()}
		if fired[tm] {
			t.Fatalf("%s: timer %v fired twice", what, tm)
		}
		fired[tm] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(fired, m.timers) {
		t.Fatalf("%s: timers %v, want %v", what, fired, m.timers)
	}
}

func reviewModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 23))
	keys := make([]string, 20+rng.IntN(60))
	for i := range keys {
		keys[i] = fmt.Sprint("key", i)
	}
	all := keygroup.Range{First: 0, Last: maxP - 1}
	s := newStore()
	// Subtasks; each declares its states after its first snapshot when
	// restored (lazy), so the restored state is pending until then.
	type sub struct {
		b  *Backend
		ts *tables
	}
	var subs []*sub
	start := func(p int, hs []checkpoint.Handle, lazy bool) {
		subs = nil
		for i := range p {
			b := NewIncremental(keygroup.ForSubtask(maxP, p, i))
			if hs != nil {
				if err := b.Restore(hs, s.read); err != nil {
					t.Fatal(err)
				}
			}
			sb := &sub{b: b}
			if !lazy {
				sb.ts = declare(t, b)
			}
			subs = append(subs, sb)
		}
	}
	start(1, nil, false)
	owner := func(k string) *tables {
		g := keygroup.Of(hasher.Hash(k), maxP)
		for _, sb := range subs {
			if sb.b.groups.Contains(g) {
				if sb.ts == nil {
					sb.ts = declare(t, sb.b)
				}
				sb.b.SetGroup(g)
				return sb.ts
			}
		}
		panic("no subtask owns " + k)
	}
	live := &reviewState{counts: map[string]int{}, maps: map[string]map[string]int{}, timers: map[reviewTimer]bool{}}
	type inFlight struct {
		id     checkpoint.ID
		m      *reviewState
		asyncs []func() []checkpoint.Handle
	}
	var flying []*inFlight
	var completed []checkpoint.Handle
	var completedModel *reviewState
	id := checkpoint.ID(0)
	for step := range 1200 {
		k := keys[rng.IntN(len(keys))]
		switch op := rng.IntN(100); {
		case op < 20: // read-modify-write, sometimes twice in an epoch
			ts := owner(k)
			for range 1 + rng.IntN(2) {
				v, _ := ts.counts.Get(k)
				ts.counts.Put(k, v+1)
				live.counts[k]++
			}
		case op < 25:
			ts := owner(k)
			ts.counts.Get(k) // the cached entry is then deleted
			ts.counts.Delete(k)
			delete(live.counts, k)
		case op < 35:
			uk := fmt.Sprint("u", rng.IntN(3))
			owner(k).maps.Put(k, uk, step)
			if live.maps[k] == nil {
				live.maps[k] = map[string]int{}
			}
			live.maps[k][uk] = step
		case op < 40: // empty the key's map, then maybe fill it again at once
			ts := owner(k)
			for uk := range live.maps[k] {
				ts.maps.Remove(k, uk)
			}
			delete(live.maps, k)
			if rng.IntN(2) == 0 {
				ts.maps.Put(k, "again", step)
				live.maps[k] = map[string]int{"again": step}
			}
		case op < 52: // a timer: times collide across keys
			tm := reviewTimer{k, int64(rng.IntN(50))}
			owner(k).timers.Register(k, time.UnixMilli(tm.at))
			live.timers[tm] = true
		case op < 58: // delete one of the key's timers, maybe register it again
			var mine []reviewTimer
			for tm := range live.timers {
				if tm.k == k {
					mine = append(mine, tm)
				}
			}
			if len(mine) == 0 {
				continue
			}
			slices.SortFunc(mine, func(a, b reviewTimer) int { return int(a.at - b.at) })
			tm := mine[rng.IntN(len(mine))]
			ts := owner(k)
			ts.timers.Delete(k, time.UnixMilli(tm.at))
			delete(live.timers, tm)
			if rng.IntN(3) == 0 {
				ts.timers.Register(k, time.UnixMilli(tm.at))
				live.timers[tm] = true
			}
		case op < 62:
			limit := int64(rng.IntN(50))
			for _, sb := range subs {
				if sb.ts == nil {
					sb.ts = declare(t, sb.b)
				}
				if err := sb.ts.timers.FireUpTo(limit, func(k string, at time.Time) error {
					tm := reviewTimer{k, at.UnixMilli()}
					if !live.timers[tm] {
						t.Fatalf("step %d: timer %v fired; the model does not have it", step, tm)
					}
					delete(live.timers, tm)
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
		case op < 76:
			id++
			f := &inFlight{id: id, m: live.clone()}
			for i, sb := range subs {
				async, err := sb.b.Snapshot(id)
				if err != nil {
					t.Fatal(err)
				}
				f.asyncs = append(f.asyncs, func() []checkpoint.Handle { return finish(t, async, i, s) })
			}
			flying = append(flying, f)
		case op < 93 && len(flying) > 0:
			j := rng.IntN(len(flying))
			f := flying[j]
			var hs []checkpoint.Handle
			for _, a := range f.asyncs {
				hs = append(hs, a()...)
			}
			if rng.IntN(5) == 0 {
				for _, sb := range subs {
					sb.b.NotifyAborted(f.id)
				}
				flying = slices.Delete(flying, j, j+1)
				continue
			}
			for _, sb := range subs {
				sb.b.NotifyComplete(f.id)
			}
			flying = slices.DeleteFunc(flying, func(o *inFlight) bool { return o.id <= f.id })
			completed, completedModel = hs, f.m
			got := NewIncremental(all)
			if err := got.Restore(completed, s.read); err != nil {
				t.Fatalf("step %d: restore checkpoint %d: %v", step, f.id, err)
			}
			reviewCheck(t, fmt.Sprintf("seed %d step %d checkpoint %d", seed, step, f.id), declare(t, got), completedModel, keys)
		case op < 97 && completed != nil:
			flying = nil
			start(1+rng.IntN(3), completed, rng.IntN(2) == 0)
			live = completedModel.clone()
		}
	}
}

// TestReviewFormatSwitches: state goes full (the pre-incremental format,
// as a34a5ab wrote it) → incremental (with deletions and re-insertions
// across checkpoints) → full again → incremental, restored at each step,
// and reads as a model of it says.
func TestReviewFormatSwitches(t *testing.T) {
	all := keygroup.Range{First: 0, Last: maxP - 1}
	s := newStore()
	m := &reviewState{counts: map[string]int{}, maps: map[string]map[string]int{}, timers: map[reviewTimer]bool{}}
	keys := make([]string, 300)
	for i := range keys {
		keys[i] = fmt.Sprint("key", i)
	}
	round := 0
	mutate := func(ts *tables) {
		round++
		for i, k := range keys {
			at(ts.b, k)
			switch (i + round) % 5 {
			case 0:
				ts.counts.Delete(k)
				delete(m.counts, k)
			case 1:
				ts.counts.Put(k, round*1000+i)
				m.counts[k] = round*1000 + i
			case 2:
				ts.maps.Put(k, fmt.Sprint("r", round), i)
				if m.maps[k] == nil {
					m.maps[k] = map[string]int{}
				}
				m.maps[k][fmt.Sprint("r", round)] = i
			case 3:
				ts.maps.Delete(k)
				delete(m.maps, k)
				ts.timers.Register(k, time.UnixMilli(int64(round)))
				m.timers[reviewTimer{k, int64(round)}] = true
			}
		}
	}
	restoreInto := func(b *Backend, hs []checkpoint.Handle) *tables {
		if hs != nil {
			if err := b.Restore(hs, s.read); err != nil {
				t.Fatal(err)
			}
		}
		return declare(t, b)
	}
	ts := restoreInto(New(all), nil)
	mutate(ts)
	hs := take(t, ts.b, 1, 0, s) // full
	for step, full := range []bool{false, false, true, false} {
		if full {
			ts = restoreInto(New(all), hs)
		} else {
			ts = restoreInto(NewIncremental(all), hs)
		}
		for c := range 3 {
			mutate(ts)
			id := checkpoint.ID(10*(step+1) + c)
			hs = take(t, ts.b, id, 0, s)
			ts.b.NotifyComplete(id)
		}
		got := restoreInto(NewIncremental(all), hs)
		reviewCheck(t, fmt.Sprintf("step %d (full %v)", step, full), got, m.clone(), keys)
	}
}

// TestReviewLateAsyncOfASubsumedCheckpoint: checkpoint 2's asynchronous
// part runs only after checkpoint 3 (taken after it) completed, as a slow
// writer pool may run it; nothing later references 2's file, and the
// state restores as written.
func TestReviewLateAsyncOfASubsumedCheckpoint(t *testing.T) {
	all := keygroup.Range{First: 0, Last: maxP - 1}
	s := newStore()
	ts := openInc(t, all, nil, s)
	fill(ts, 200, 1)
	take(t, ts.b, 1, 0, s)
	ts.b.NotifyComplete(1)
	ts.counts.Put(at(ts.b, "k1"), 11)
	a2, err := ts.b.Snapshot(2)
	if err != nil {
		t.Fatal(err)
	}
	ts.counts.Delete(at(ts.b, "k2"))
	hs3 := take(t, ts.b, 3, 0, s)
	ts.b.NotifyComplete(3)
	hs2 := finish(t, a2, 0, s) // late
	ts.b.NotifyAborted(2)
	ts.counts.Put(at(ts.b, "k3"), 33)
	hs4 := take(t, ts.b, 4, 0, s)
	late := newFiles(hs2, hs3)
	for _, h := range hs4 {
		if late != "" && h.Path == late {
			t.Fatal("checkpoint 4 references the file of subsumed checkpoint 2")
		}
	}
	got := openInc(t, all, hs4, s)
	for k, want := range map[string]int{"k1": 11, "k3": 33, "k4": 5} {
		if v, _ := got.counts.Get(at(got.b, k)); v != want {
			t.Fatalf("%s = %d, want %d", k, v, want)
		}
	}
	if _, ok := got.counts.Get(at(got.b, "k2")); ok {
		t.Fatal("k2, deleted before checkpoint 3, is back")
	}
}
