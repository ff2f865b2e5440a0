package heap

import (
	"fmt"
	"sync"
	"testing"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/keygroup"
)

// chainKeys is the keys chain c holds, and whether they are all known.
func chainKeys(c []link) (int, bool) {
	n := 0
	for _, l := range c {
		if l.keys < 0 {
			return 0, false
		}
		n += l.keys
	}
	return n, true
}

// TestGrowingStateWritesOnlyTheChange: state that only grows (new keys at
// every checkpoint, as q3's does) is never rewritten whole before its
// chains' bound: every checkpoint writes about what it added, not what
// the state holds (design note 105).
func TestGrowingStateWritesOnlyTheChange(t *testing.T) {
	all := keygroup.Range{First: 0, Last: maxP - 1}
	s := newStore()
	ts := openInc(t, all, nil, s)
	const perCheckpoint = 2000
	var first int
	var hs []checkpoint.Handle
	// Fewer checkpoints than the shortest bound (maxLinks/2+1 sections).
	for id := checkpoint.ID(1); id <= maxLinks/2; id++ {
		for i := range perCheckpoint {
			ts.counts.Put(at(ts.b, fmt.Sprint("k", int(id)*perCheckpoint+i)), int(id))
		}
		s.written = 0
		hs = take(t, ts.b, id, 0, s)
		ts.b.NotifyComplete(id)
		if id == 1 {
			first = s.written
		} else if s.written > first*3/2 {
			t.Fatalf("checkpoint %d added %d keys as the first did and wrote %d bytes, the first %d: groups were rewritten whole", id, perCheckpoint, s.written, first)
		}
		for g, c := range ts.b.confirmed.tables["counts"] {
			if len(c) > 0 && len(c) != int(id) {
				t.Fatalf("checkpoint %d: key group %d has a chain of %d sections, want %d: it was rewritten", id, g, len(c), id)
			}
			if keys, ok := chainKeys(c); !ok || keys != len(ts.counts.groups[g]) {
				t.Fatalf("checkpoint %d: key group %d's chain holds %d keys (known: %v), the group %d", id, g, keys, ok, len(ts.counts.groups[g]))
			}
		}
	}
	got := openInc(t, all, hs, s)
	for _, i := range []int{perCheckpoint, 5*perCheckpoint + 7, maxLinks/2*perCheckpoint + perCheckpoint - 1} {
		if v, ok := got.counts.Get(at(got.b, fmt.Sprint("k", i))); !ok || v != i/perCheckpoint {
			t.Fatalf("k%d = %d %v, want %d", i, v, ok, i/perCheckpoint)
		}
	}
}

// TestOverwrittenKeysBoundWhatAChainHolds: with every key overwritten at
// every checkpoint, a chain never holds more than 2.75 times the keys of
// its group and one delta, and chains are rewritten; a rewrite costs a
// checkpoint what a delta does (every key), so that every group is
// rewritten at the same checkpoint here costs nothing.
func TestOverwrittenKeysBoundWhatAChainHolds(t *testing.T) {
	all := keygroup.Range{First: 0, Last: maxP - 1}
	s := newStore()
	ts := openInc(t, all, nil, s)
	const keys = 4000
	rewritten, first := 0, 0
	var hs []checkpoint.Handle
	for id := checkpoint.ID(1); id <= 40; id++ {
		s.written = 0
		for i := range keys {
			ts.counts.Put(at(ts.b, fmt.Sprint("k", i)), int(id))
		}
		// A few deletions, which a chain holds too.
		ts.counts.Delete(at(ts.b, fmt.Sprint("k", int(id)*37%keys)))
		hs = take(t, ts.b, id, 0, s)
		ts.b.NotifyComplete(id)
		if id == 1 {
			first = s.written
		} else if s.written > first*3/2 {
			t.Fatalf("checkpoint %d wrote %d bytes, the first (every key) %d", id, s.written, first)
		}
		for g, c := range ts.b.confirmed.tables["counts"] {
			live := len(ts.counts.groups[g])
			held, ok := chainKeys(c)
			if !ok {
				t.Fatalf("checkpoint %d: key group %d: a chain this backend wrote holds keys not known", id, g)
			}
			if delta := c[len(c)-1].keys; len(c) > 1 && held-delta > live*11/4 {
				t.Fatalf("checkpoint %d: key group %d holds %d keys, its chain %d before its last delta (of %d): more than 2.75 times", id, g, live, held-delta, delta)
			}
			if id > 1 && len(c) == 1 {
				rewritten++
			}
		}
	}
	if rewritten < maxP {
		t.Fatalf("%d groups rewritten in 39 checkpoints: chains were not compacted", rewritten)
	}
	got := openInc(t, all, hs, s)
	if v, _ := got.counts.Get(at(got.b, "k5")); v != 40 {
		t.Fatalf("k5 = %d, want 40", v)
	}
}

// TestRestoredChainsKnowTheirKeys: a backend that takes over a
// checkpoint's chains (RestoreOwned, a failover) counts their deltas' keys
// as it applies them when the states are declared, so the counts are
// those the backend that wrote them kept, and the keys rule goes on; the
// chains are not rewritten whole at the first checkpoint for want of
// them (the outside review: a state that only grew was, every group of
// it, when the restore left them unknown).
func TestRestoredChainsKnowTheirKeys(t *testing.T) {
	all := keygroup.Range{First: 0, Last: maxP - 1}
	s := newStore()
	ts := openInc(t, all, nil, s)
	write := func(ts *tables, id checkpoint.ID) []checkpoint.Handle {
		for i := range 1000 { // every key overwritten, and 1000 new ones
			ts.counts.Put(at(ts.b, fmt.Sprint("k", i)), int(id))
			ts.counts.Put(at(ts.b, fmt.Sprint("n", id, "-", i)), int(id))
		}
		ts.counts.Delete(at(ts.b, fmt.Sprint("n", id-1, "-", 7)))
		hs := take(t, ts.b, id, 0, s)
		ts.b.NotifyComplete(id)
		return hs
	}
	var hs []checkpoint.Handle
	for id := checkpoint.ID(1); id <= 2; id++ {
		hs = write(ts, id)
	}
	want := ts.b.confirmed.tables["counts"]
	b := NewIncremental(all)
	if err := b.RestoreOwned(hs, s.read); err != nil {
		t.Fatal(err)
	}
	ts = declare(t, b)
	deltas := 0
	for g, c := range b.confirmed.tables["counts"] {
		if len(c) != len(want[g]) {
			t.Fatalf("key group %d: a chain of %d sections restored, %d written", g, len(c), len(want[g]))
		}
		for i, l := range c {
			if l.keys != want[g][i].keys {
				t.Fatalf("key group %d section %d (full %v): %d keys restored, %d written", g, i, l.full, l.keys, want[g][i].keys)
			}
			if !l.full {
				deltas++
			}
		}
	}
	if deltas == 0 {
		t.Fatal("no restored chain holds a delta: the test does not test what it says")
	}
	for id := checkpoint.ID(3); id <= 12; id++ {
		hs = write(ts, id)
		for g, c := range b.confirmed.tables["counts"] {
			held, ok := chainKeys(c)
			if live := len(ts.counts.groups[g]); !ok || len(c) > 1 && held-c[len(c)-1].keys > live*11/4 {
				t.Fatalf("checkpoint %d: key group %d holds %d keys, its chain %d (known: %v)", id, g, live, held, ok)
			}
		}
	}
	got := openInc(t, all, hs, s)
	if v, _ := got.counts.Get(at(got.b, "k9")); v != 12 {
		t.Fatalf("k9 = %d, want 12", v)
	}
}

// TestSnapshotsSpanChunks: a snapshot's part larger than a chunk, and a
// section larger than one, land where their links say, while other
// backends' snapshots take and give back chunks at the same time.
func TestSnapshotsSpanChunks(t *testing.T) {
	all := keygroup.Range{First: 0, Last: maxP - 1}
	const keys = 120000
	big := make([]string, chunkBytes/8) // one list entry of more than a chunk
	for i := range big {
		big[i] = fmt.Sprint("e", i)
	}
	var wg sync.WaitGroup
	for b := range 3 {
		wg.Go(func() {
			s := newStore()
			ts := openInc(t, all, nil, s)
			var hs []checkpoint.Handle
			for id := checkpoint.ID(1); id <= 3; id++ {
				for i := int(id) % 2; i < keys; i += 2 {
					ts.counts.Put(at(ts.b, fmt.Sprint("k", i)), i*int(id)+b)
				}
				k := at(ts.b, "big")
				for _, e := range big[:len(big)*int(id)/3] {
					ts.lists.Add(k, e)
				}
				hs = take(t, ts.b, id, 0, s)
				ts.b.NotifyComplete(id)
			}
			got := openInc(t, all, hs, s)
			for i := range keys {
				want := i*(3-(3+i)%2) + b // odd keys last written at 3, even at 2
				if v, _ := got.counts.Get(at(got.b, fmt.Sprint("k", i))); v != want {
					t.Errorf("backend %d: k%d = %d, want %d", b, i, v, want)
					return
				}
			}
			if l := got.lists.Get(at(got.b, "big")); len(l) != len(big)/3+len(big)*2/3+len(big) {
				t.Errorf("backend %d: the big list holds %d elements, want %d", b, len(l), len(big)/3+len(big)*2/3+len(big))
			}
		})
	}
	wg.Wait()
}
