package heap

import (
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
)

const maxP = 128

var hasher = codec.NewHasher(codec.For[string]())

func at(b *Backend, k string) string {
	b.SetGroup(keygroup.Of(hasher.Hash(k), maxP))
	return k
}

type tables struct {
	b      *Backend
	counts *Value[string, int]
	lists  *List[string, string]
	maps   *Map[string, string, int]
	timers *Timers[string]
}

func open(t *testing.T, r keygroup.Range, restore []checkpoint.Handle, blobs map[string][]byte) *tables {
	t.Helper()
	b := New(r)
	if restore != nil {
		if err := b.Restore(restore, func(h checkpoint.Handle) ([]byte, error) { return blobs[h.Path], nil }); err != nil {
			t.Fatal(err)
		}
	}
	return declare(t, b)
}

// declare registers a table of each kind in b.
func declare(t *testing.T, b *Backend) *tables {
	t.Helper()
	var ts tables
	var err error
	ts.b = b
	if ts.counts, err = NewValue(b, "counts", codec.For[string](), codec.For[int]()); err != nil {
		t.Fatal(err)
	}
	if ts.lists, err = NewList(b, "lists", codec.For[string](), codec.For[string]()); err != nil {
		t.Fatal(err)
	}
	if ts.maps, err = NewMap(b, "maps", codec.For[string](), codec.For[string](), codec.For[int]()); err != nil {
		t.Fatal(err)
	}
	if ts.timers, err = NewTimers(b, "_timers", codec.For[string]()); err != nil {
		t.Fatal(err)
	}
	return &ts
}

func fill(ts *tables, keys int, round int) {
	for i := range keys {
		k := at(ts.b, fmt.Sprint("k", i))
		ts.counts.Put(k, i+round)
		ts.lists.Add(k, fmt.Sprint("r", round))
		ts.maps.Put(k, fmt.Sprint("u", round), round)
		ts.timers.Register(k, time.UnixMilli(int64(1000+i)))
	}
}

func handleOf(r keygroup.Range, blob []byte, blobs map[string][]byte) checkpoint.Handle {
	path := fmt.Sprint("blob", len(blobs))
	blobs[path] = blob
	return checkpoint.Handle{Operator: "op", Parallelism: 1, Kind: state.KindKeyed, KeyGroups: r, Path: path}
}

// TestSnapshotIsIsolatedFromLaterWrites: the snapshot holds the state at
// freeze time although the task keeps writing while it is encoded (run with
// -race: the encoder runs on another goroutine).
func TestSnapshotIsIsolatedFromLaterWrites(t *testing.T) {
	all := keygroup.Range{First: 0, Last: maxP - 1}
	ts := open(t, all, nil, nil)
	fill(ts, 500, 1)
	encode := ts.b.freeze()
	var blob []byte
	var wg sync.WaitGroup
	wg.Go(func() { blob = encode() })
	fill(ts, 500, 2) // overwrite, append, put, while the encoder runs
	for i := range 500 {
		k := at(ts.b, fmt.Sprint("k", i))
		if i%2 == 0 {
			ts.counts.Delete(k)
			ts.maps.Delete(k)
		}
	}
	wg.Wait()

	blobs := map[string][]byte{}
	got := open(t, all, []checkpoint.Handle{handleOf(all, blob, blobs)}, blobs)
	for i := range 500 {
		k := at(got.b, fmt.Sprint("k", i))
		if v, ok := got.counts.Get(k); !ok || v != i+1 {
			t.Fatalf("%s: count %d %v, want %d", k, v, ok, i+1)
		}
		if l := got.lists.Get(k); len(l) != 1 || l[0] != "r1" {
			t.Fatalf("%s: list %v, want [r1]", k, l)
		}
		if m := maps.Collect(got.maps.All(k)); len(m) != 1 || m["u1"] != 1 {
			t.Fatalf("%s: map %v, want {u1:1}", k, m)
		}
	}
	// The live state has the second round.
	k := at(ts.b, "k1")
	if v, _ := ts.counts.Get(k); v != 3 {
		t.Fatalf("live count %d, want 3", v)
	}
	if l := ts.lists.Get(k); len(l) != 2 {
		t.Fatalf("live list %v", l)
	}
}

// TestRestoreAtAnotherParallelism: state written by one subtask restores
// into two, each getting exactly its key groups, and back into one.
func TestRestoreAtAnotherParallelism(t *testing.T) {
	all := keygroup.Range{First: 0, Last: maxP - 1}
	ts := open(t, all, nil, nil)
	fill(ts, 300, 1)
	blobs := map[string][]byte{}
	one := []checkpoint.Handle{handleOf(all, encodeAll(t, ts.b), blobs)}

	var two []checkpoint.Handle
	total := 0
	for i := range 2 {
		r := keygroup.ForSubtask(maxP, 2, i)
		part := open(t, r, one, blobs)
		for k := range 300 {
			key := fmt.Sprint("k", k)
			g := keygroup.Of(hasher.Hash(key), maxP)
			if !r.Contains(g) {
				continue
			}
			part.b.SetGroup(g)
			if v, ok := part.counts.Get(key); !ok || v != k+1 {
				t.Fatalf("subtask %d: %s = %d %v", i, key, v, ok)
			}
			total++
		}
		two = append(two, handleOf(r, encodeAll(t, part.b), blobs))
	}
	if total != 300 {
		t.Fatalf("%d keys across two subtasks, want 300", total)
	}
	back := open(t, all, two, blobs)
	for k := range 300 {
		key := at(back.b, fmt.Sprint("k", k))
		if v, ok := back.counts.Get(key); !ok || v != k+1 {
			t.Fatalf("after scaling back: %s = %d %v", key, v, ok)
		}
	}
	// Timers survive too and fire in time order.
	var fired []string
	if err := back.timers.FireUpTo(1002, func(k string, _ time.Time) error {
		fired = append(fired, k)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(fired) != "[k0 k1 k2]" {
		t.Fatalf("fired %v, want [k0 k1 k2]", fired)
	}
	if next, ok := back.timers.Next(); !ok || next.UnixMilli() != 1003 {
		t.Fatalf("next timer %v %v", next, ok)
	}
}

func TestCorruptStateIsAnError(t *testing.T) {
	all := keygroup.Range{First: 0, Last: maxP - 1}
	ts := open(t, all, nil, nil)
	fill(ts, 10, 1)
	blob := encodeAll(t, ts.b)
	blob[len(blob)/2] ^= 0xff
	b := New(all)
	err := b.Restore([]checkpoint.Handle{{Kind: state.KindKeyed, KeyGroups: all}}, func(checkpoint.Handle) ([]byte, error) { return blob, nil })
	if !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("restore of a damaged blob: %v", err)
	}
}

func TestDeclaringStateTwiceIsAnError(t *testing.T) {
	b := New(keygroup.Range{First: 0, Last: 1})
	if _, err := NewValue(b, "x", codec.For[string](), codec.For[int]()); err != nil {
		t.Fatal(err)
	}
	if _, err := NewList(b, "x", codec.For[string](), codec.For[int]()); err == nil {
		t.Fatal("declared state x twice")
	}
}

// BenchmarkValueUpdate: a read-modify-write of a value per record, of an
// int and of a word's running count (a string the record brings, equal to
// the one stored).
func BenchmarkValueUpdate(b *testing.B) {
	type count struct {
		Word string
		N    int
	}
	keys := make([]string, 1000)
	words := make([]string, len(keys)) // the records' words: other strings, equal
	groups := make([]int, len(keys))
	for i := range keys {
		keys[i], words[i] = fmt.Sprint("word", i), fmt.Sprint("word", i)
		groups[i] = keygroup.Of(hasher.Hash(keys[i]), maxP)
	}
	b.Run("int", func(b *testing.B) {
		be := New(keygroup.Range{First: 0, Last: maxP - 1})
		v, _ := NewValue(be, "c", codec.For[string](), codec.For[int]())
		for i := range keys {
			be.SetGroup(groups[i])
			v.Put(words[i], 0) // another string than the lookups', as a record's word is
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			j := i % len(keys)
			be.SetGroup(groups[j])
			n, _ := v.Get(keys[j])
			v.Put(keys[j], n+1)
		}
	})
	b.Run("word count", func(b *testing.B) {
		be := New(keygroup.Range{First: 0, Last: maxP - 1})
		v, _ := NewValue(be, "c", codec.For[string](), codec.JSON[count]{})
		for i := range keys {
			be.SetGroup(groups[i])
			v.Put(keys[i], count{Word: keys[i]})
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			j := i % len(keys)
			be.SetGroup(groups[j])
			c, _ := v.Get(words[j])
			v.Put(words[j], count{Word: words[j], N: c.N + 1})
		}
	})
	b.Run("list of words", func(b *testing.B) { // as a window keeps its records
		be := New(keygroup.Range{First: 0, Last: maxP - 1})
		l, _ := NewList(be, "l", codec.For[string](), codec.For[string]())
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			j := i % len(keys)
			be.SetGroup(groups[j])
			if i%(64*len(keys)) < len(keys) {
				l.Delete(keys[j]) // the window fires
			}
			l.Add(keys[j], words[j])
		}
	})
}

// encodeAll freezes b and encodes it as one keyed blob.
func encodeAll(t *testing.T, b *Backend) []byte {
	t.Helper()
	return b.freeze()()
}
