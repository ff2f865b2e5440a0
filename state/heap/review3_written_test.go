package heap

// Review of d086bc0 (design note 100): deltas walk the keys written.
// Tests that try to make a restore return lost, stale or wrong state.

import (
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/internal/racetest"
)

var stressSeeds = flag.Int("heap.stressseeds", 30, "seeds TestReview3WrittenStress runs per mode")

// lockedStore serializes a store between concurrent asynchronous parts
// and the test's restores.
type lockedStore struct {
	mu sync.Mutex
	s  *store
}

func (l *lockedStore) Write(h checkpoint.Handle, data []byte) (checkpoint.Handle, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.Write(h, data)
}

func (l *lockedStore) WriteShared(h checkpoint.Handle, r io.Reader) (checkpoint.Handle, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.WriteShared(h, r)
}

func (l *lockedStore) read(h checkpoint.Handle) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s.read(h)
}

func openOwned(t *testing.T, r keygroup.Range, hs []checkpoint.Handle, read func(checkpoint.Handle) ([]byte, error), owned bool) *tables {
	t.Helper()
	b := NewIncremental(r)
	if hs != nil {
		restore := b.Restore
		if owned {
			restore = b.RestoreOwned
		}
		if err := restore(hs, read); err != nil {
			t.Fatal(err)
		}
	}
	return declare(t, b)
}

func checkWith(t *testing.T, what string, hs []checkpoint.Handle, read func(checkpoint.Handle) ([]byte, error), m *model, keys []string) {
	t.Helper()
	holds(t, what, openOwned(t, keygroup.Range{First: 0, Last: maxP - 1}, hs, read, false), m, keys)
}

// keysIn returns n keys of the key groups gs.
func keysIn(n int, gs ...int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := fmt.Sprint("k", i)
		if slices.Contains(gs, keygroup.Of(hasher.Hash(k), maxP)) {
			keys = append(keys, k)
		}
	}
	return keys
}

// TestReview3WrittenStress is the model test with what it leaves out:
// keys in few key groups (so that groups hold hundreds of keys and the
// record of keys written is dropped, untracked, now and then), bursts of
// writes of one key in one epoch (delete then put, map emptied and
// refilled, list updated twice, timers fired and re-registered by the
// callback), Clear then registers, asynchronous parts run on other
// goroutines while the task writes (-race), completions never delivered,
// NotifyComplete of an older id after a newer one, and restores with
// RestoreOwned (claim: epoch 1 and deltas on the restored chains).
func TestReview3WrittenStress(t *testing.T) {
	racetest.Skip(t)
	for _, mode := range []string{"hot", "spread", "fewkeys"} {
		for seed := range *stressSeeds {
			t.Run(fmt.Sprint(mode, seed), func(t *testing.T) { runStress(t, mode, uint64(seed)) })
		}
	}
}

func runStress(t *testing.T, mode string, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 100))
	var keys []string
	switch mode {
	case "hot": // two key groups of some hundred keys
		keys = keysIn(150+rng.IntN(400), 7, 100)
	case "fewkeys":
		keys = keysIn(5+rng.IntN(20), 7)
	default:
		keys = make([]string, 30+rng.IntN(300))
		for i := range keys {
			keys[i] = fmt.Sprint("k", i)
		}
	}
	ls := &lockedStore{s: newStore()}
	live := newModel()
	ckptRate := 2 + rng.IntN(12)
	completeRate := 2 + rng.IntN(10)
	var subs []*tables
	split := func(p int, hs []checkpoint.Handle) {
		subs = make([]*tables, p)
		for i := range subs {
			subs[i] = openOwned(t, keygroup.ForSubtask(maxP, p, i), hs, ls.read, true)
		}
	}
	split(1+rng.IntN(2), nil)
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
	type result struct {
		hs  []checkpoint.Handle
		err error
	}
	type inFlight struct {
		id    checkpoint.ID
		m     *model
		async []chan result
	}
	var flying []*inFlight
	var completed []checkpoint.Handle
	completedModel := newModel()
	var lastCompleted checkpoint.ID
	id := checkpoint.ID(0)
	wait := func(f *inFlight) ([]checkpoint.Handle, error) {
		var hs []checkpoint.Handle
		for i, c := range f.async {
			r := <-c
			if r.err != nil {
				return nil, r.err
			}
			for j := range r.hs {
				r.hs[j].Operator, r.hs[j].Subtask = "op", i
			}
			hs = append(hs, r.hs...)
		}
		return hs, nil
	}
	drain := func() {
		for _, f := range flying {
			wait(f)
		}
		flying = nil
	}
	defer drain()
	put := func(k string, v int) { owner(k).counts.Put(k, v); live.counts[k] = v }
	for step := range 4000 {
		k := keys[rng.IntN(len(keys))]
		switch op := rng.IntN(100 + ckptRate + completeRate + 2); {
		case op < 12:
			put(k, rng.IntN(1000))
		case op < 15: // Get then Put (the t.last cache)
			ts := owner(k)
			v, _ := ts.counts.Get(k)
			ts.counts.Put(k, v+1)
			live.counts[k] = v + 1
		case op < 20:
			owner(k).counts.Delete(k)
			delete(live.counts, k)
		case op < 23: // deleted then written again in the epoch, several times
			for range 1 + rng.IntN(4) {
				owner(k).counts.Delete(k)
				put(k, step)
			}
		case op < 30:
			v := fmt.Sprint(step)
			owner(k).lists.Add(k, v)
			live.lists[k] = append(live.lists[k], v)
		case op < 34:
			for range 1 + rng.IntN(3) {
				vs := []string{fmt.Sprint("u", step, rng.IntN(9))}
				owner(k).lists.Update(k, vs)
				live.lists[k] = vs
			}
		case op < 36: // Update to empty, then maybe Add
			owner(k).lists.Update(k, nil)
			delete(live.lists, k)
			if rng.IntN(2) == 0 {
				owner(k).lists.Add(k, "again")
				live.lists[k] = []string{"again"}
			}
		case op < 38:
			owner(k).lists.Delete(k)
			delete(live.lists, k)
		case op < 46:
			uk := fmt.Sprint("uk", rng.IntN(3))
			owner(k).maps.Put(k, uk, step)
			if live.maps[k] == nil {
				live.maps[k] = map[string]int{}
			}
			live.maps[k][uk] = step
		case op < 51:
			uk := fmt.Sprint("uk", rng.IntN(3))
			owner(k).maps.Remove(k, uk)
			if delete(live.maps[k], uk); len(live.maps[k]) == 0 {
				delete(live.maps, k)
			}
		case op < 53: // map emptied by Remove, then refilled
			for uk := range live.maps[k] {
				owner(k).maps.Remove(k, uk)
			}
			delete(live.maps, k)
			owner(k).maps.Put(k, "uk9", step)
			live.maps[k] = map[string]int{"uk9": step}
		case op < 54:
			owner(k).maps.Delete(k)
			delete(live.maps, k)
		case op < 61:
			if _, has := live.timers[k]; !has {
				at := int64(rng.IntN(1000))
				owner(k).timers.Register(k, time.UnixMilli(at))
				live.timers[k] = at
			}
		case op < 63:
			if at, has := live.timers[k]; has {
				owner(k).timers.Delete(k, time.UnixMilli(at))
				delete(live.timers, k)
			}
		case op < 66: // fire; the callback re-registers some, later
			limit := int64(rng.IntN(1000))
			for _, ts := range subs {
				if err := ts.timers.FireUpTo(limit, func(k string, at time.Time) error {
					if live.timers[k] != at.UnixMilli() {
						t.Fatalf("timer of %s at %d fired; the model has %d", k, at.UnixMilli(), live.timers[k])
					}
					delete(live.timers, k)
					if rng.IntN(2) == 0 {
						next := limit + 1 + int64(rng.IntN(50))
						ts.timers.Register(k, time.UnixMilli(next))
						live.timers[k] = next
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
		case op < 67: // Clear, then timers again in the same epoch
			for _, ts := range subs {
				ts.timers.Clear()
			}
			clear(live.timers)
			for range rng.IntN(5) {
				k := keys[rng.IntN(len(keys))]
				if _, has := live.timers[k]; !has {
					at := int64(rng.IntN(1000))
					owner(k).timers.Register(k, time.UnixMilli(at))
					live.timers[k] = at
				}
			}
		case op < 70: // a burst of distinct keys (drops the record of a group)
			for range rng.IntN(200) {
				put(keys[rng.IntN(len(keys))], step)
			}
		case op < 100:
			// nothing
		case op < 100+ckptRate: // a checkpoint; its asynchronous parts start now
			id++
			f := &inFlight{id: id, m: live.clone()}
			for _, ts := range subs {
				async, err := ts.b.Snapshot(id)
				if err != nil {
					t.Fatal(err)
				}
				c := make(chan result, 1)
				go func() {
					hs, err := async(ls)
					c <- result{hs, err}
				}()
				f.async = append(f.async, c)
			}
			flying = append(flying, f)
		case op < 100+ckptRate+completeRate && len(flying) > 0:
			j := rng.IntN(len(flying))
			f := flying[j]
			hs, err := wait(f)
			if err != nil {
				t.Fatal(err)
			}
			switch rng.IntN(6) {
			case 0:
				for _, ts := range subs {
					ts.b.NotifyAborted(f.id)
				}
				flying = slices.Delete(flying, j, j+1)
				continue
			case 1: // the completion never arrives
				flying = slices.Delete(flying, j, j+1)
				continue
			}
			for _, ts := range subs {
				ts.b.NotifyComplete(f.id)
			}
			flying = slices.DeleteFunc(flying, func(o *inFlight) bool {
				if o.id < f.id {
					wait(o)
				}
				return o.id <= f.id
			})
			if f.id > lastCompleted {
				lastCompleted = f.id
				completed, completedModel = hs, f.m
				checkWith(t, fmt.Sprintf("%s step %d, checkpoint %d", mode, step, f.id), completed, ls.read, completedModel, keys)
			}
			if rng.IntN(3) == 0 && lastCompleted > 1 { // an older id, late
				for _, ts := range subs {
					ts.b.NotifyComplete(lastCompleted - 1)
				}
			}
		case completed != nil: // a failure: restore, at any parallelism, owned
			drain()
			split(1+rng.IntN(2), completed)
			live = completedModel.clone()
		}
	}
}
