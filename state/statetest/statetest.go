// Package statetest is the conformance suite every state backend passes:
// the semantics of each kind of state, snapshot isolation, restore at
// another parallelism by key-group range, large values and many keys.
package statetest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/operator/operatortest"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/backend"
)

// maxP is the number of key groups the suite uses.
const maxP = 128

// Run runs the suite on the backend cfg configures.
func Run(t *testing.T, cfg backend.Config) {
	s := &suite{cfg: cfg}
	t.Run("values", s.values)
	t.Run("lists", s.lists)
	t.Run("maps", s.maps)
	t.Run("timers", s.timers)
	t.Run("snapshot isolation", s.isolation)
	t.Run("rescale", s.rescale)
	t.Run("large values and many keys", s.large)
	t.Run("state declared after restore", s.lateDeclaration)
	t.Run("restore of an owned checkpoint", s.ownedRestore)
}

type suite struct{ cfg backend.Config }

// tables is a backend with one table of each kind.
type tables struct {
	b      state.Backend
	values state.Value[string, int64]
	lists  state.List[string, string]
	maps   state.Map[string, string, int64]
	timers state.Timers[string]
	hasher *codec.Hasher[string]
	r      keygroup.Range
}

// open builds a backend for key groups r, restored from rs (nil: empty).
func (s *suite) open(t *testing.T, r keygroup.Range, rs *state.Restored) *tables {
	t.Helper()
	ts := s.openUnclosed(t, r, rs)
	t.Cleanup(func() { ts.b.Close() })
	return ts
}

// openUnclosed is open for a caller that closes the backend itself.
func (s *suite) openUnclosed(t *testing.T, r keygroup.Range, rs *state.Restored) *tables {
	t.Helper()
	b, err := backend.New(s.cfg, backend.Scope{Job: "statetest", Operator: "op/with slash", Subtask: r.First, KeyGroups: r}, rs)
	if err != nil {
		t.Fatal(err)
	}
	ts := &tables{b: b, hasher: codec.NewHasher(codec.For[string]()), r: r}
	kc := codec.For[string]()
	if ts.values, err = backend.NewValue(b, "values", kc, codec.For[int64]()); err != nil {
		t.Fatal(err)
	}
	if ts.lists, err = backend.NewList(b, "lists", kc, codec.For[string]()); err != nil {
		t.Fatal(err)
	}
	if ts.maps, err = backend.NewMap(b, "maps", kc, codec.For[string](), codec.For[int64]()); err != nil {
		t.Fatal(err)
	}
	if ts.timers, err = backend.NewTimers(b, "timers", kc); err != nil {
		t.Fatal(err)
	}
	return ts
}

var all = keygroup.Range{First: 0, Last: maxP - 1}

// group makes k's key group current; false when this backend does not
// own it.
func (ts *tables) group(k string) bool {
	g := keygroup.Of(ts.hasher.Hash(k), maxP)
	if !ts.r.Contains(g) {
		return false
	}
	ts.b.SetGroup(g)
	return true
}

// snapshot takes checkpoint id and writes it to w.
func snapshot(t *testing.T, b state.Backend, id checkpoint.ID, w *operatortest.MemWriter) []checkpoint.Handle {
	t.Helper()
	async, err := b.Snapshot(id)
	if err != nil {
		t.Fatal(err)
	}
	hs, err := async(w)
	if err != nil {
		t.Fatal(err)
	}
	for i := range hs {
		hs[i].Subtask, hs[i].Operator = hs[i].KeyGroups.First, "op" // as the operator's writer does
	}
	b.NotifyComplete(id)
	return hs
}

func (s *suite) values(t *testing.T) {
	ts := s.open(t, all, nil)
	for i := range 100 {
		k := fmt.Sprint("k", i)
		ts.group(k)
		if _, ok := ts.values.Get(k); ok {
			t.Fatalf("%s present before any Put", k)
		}
		ts.values.Put(k, int64(i))
		ts.values.Put(k, int64(i)*10)
	}
	for i := range 100 {
		k := fmt.Sprint("k", i)
		ts.group(k)
		if v, ok := ts.values.Get(k); !ok || v != int64(i)*10 {
			t.Fatalf("%s = %d %v, want %d", k, v, ok, i*10)
		}
		if i%2 == 0 {
			ts.values.Delete(k)
		}
	}
	for i := range 100 {
		k := fmt.Sprint("k", i)
		ts.group(k)
		if _, ok := ts.values.Get(k); ok != (i%2 == 1) {
			t.Fatalf("%s present %v after deleting the even keys", k, ok)
		}
	}
	// A key that is a prefix of another is a key of its own.
	ts.group("a")
	ts.values.Put("a", 1)
	ts.group("ab")
	if _, ok := ts.values.Get("ab"); ok {
		t.Fatal(`"ab" found after putting "a"`)
	}
}

func (s *suite) lists(t *testing.T) {
	ts := s.open(t, all, nil)
	ts.group("k")
	for i := range 50 {
		ts.lists.Add("k", fmt.Sprint(i))
	}
	want := make([]string, 50)
	for i := range want {
		want[i] = fmt.Sprint(i)
	}
	if got := ts.lists.Get("k"); !slices.Equal(got, want) {
		t.Fatalf("list %v, want 0..49 in order", got)
	}
	var streamed []string
	for v := range ts.lists.All("k") {
		if streamed = append(streamed, v); len(streamed) == 10 {
			break
		}
	}
	if !slices.Equal(streamed, want[:10]) {
		t.Fatalf("first 10 streamed %v", streamed)
	}
	ts.lists.Update("k", []string{"x", "y"})
	if got := ts.lists.Get("k"); !slices.Equal(got, []string{"x", "y"}) {
		t.Fatalf("after Update: %v", got)
	}
	ts.lists.Add("k", "z")
	ts.group("k2")
	ts.lists.Add("k2", "other")
	ts.group("k")
	if got := ts.lists.Get("k"); !slices.Equal(got, []string{"x", "y", "z"}) {
		t.Fatalf("after Add: %v (another key's list must not mix in)", got)
	}
	ts.lists.Update("k", nil)
	if got := ts.lists.Get("k"); len(got) != 0 {
		t.Fatalf("after Update(nil): %v", got)
	}
	ts.lists.Add("k", "again")
	ts.lists.Delete("k")
	if got := slices.Collect(ts.lists.All("k")); len(got) != 0 {
		t.Fatalf("after Delete: %v", got)
	}
}

func (s *suite) maps(t *testing.T) {
	ts := s.open(t, all, nil)
	ts.group("k")
	for i := range 20 {
		ts.maps.Put("k", fmt.Sprint("u", i), int64(i))
	}
	ts.maps.Put("k", "u3", 33)
	if v, ok := ts.maps.Get("k", "u3"); !ok || v != 33 {
		t.Fatalf("u3 = %d %v", v, ok)
	}
	// Removing while iterating is allowed.
	for uk, v := range ts.maps.All("k") {
		if v%2 == 1 {
			ts.maps.Remove("k", uk)
		}
	}
	got := maps.Collect(ts.maps.All("k"))
	if len(got) != 10 || got["u4"] != 4 || got["u3"] != 0 {
		t.Fatalf("after removing odd values: %v", got)
	}
	ts.group("k2")
	if n := len(maps.Collect(ts.maps.All("k2"))); n != 0 {
		t.Fatalf("another key's map has %d entries", n)
	}
	ts.group("k")
	ts.maps.Delete("k")
	if _, ok := ts.maps.Get("k", "u4"); ok {
		t.Fatal("an entry outlived Delete")
	}
	// Entries a backend may hold in two places (Pebble: its database and
	// its write-back cache), overridden, removed and added to: enough
	// writes to other keys come in between to push a cache out.
	ts.group("m")
	for i := range 10 {
		ts.maps.Put("m", fmt.Sprint("u", i), int64(i))
	}
	for i := range 20000 {
		k := fmt.Sprint("other", i%100)
		ts.group(k)
		ts.maps.Put(k, fmt.Sprint("x", i), int64(i))
	}
	ts.group("m")
	ts.maps.Put("m", "u1", 100)
	ts.maps.Remove("m", "u2")
	ts.maps.Put("m", "new", 7)
	want := map[string]int64{"u0": 0, "u1": 100, "u3": 3, "u4": 4, "u5": 5, "u6": 6, "u7": 7, "u8": 8, "u9": 9, "new": 7}
	for uk, v := range ts.maps.All("m") {
		if want[uk] != v {
			t.Fatalf("m's entry %s = %d, want %d", uk, v, want[uk])
		}
		delete(want, uk)
		ts.maps.Remove("m", uk) // writes while iterating
	}
	if len(want) != 0 {
		t.Fatalf("m's entries %v missing", want)
	}
	if n := len(maps.Collect(ts.maps.All("m"))); n != 0 {
		t.Fatalf("%d entries of m left after removing all", n)
	}
}

func (s *suite) timers(t *testing.T) {
	ts := s.open(t, all, nil)
	for i, k := range []string{"c", "a", "b", "d"} {
		ts.group(k)
		ts.timers.Register(k, time.UnixMilli(int64(100+10*i)))
	}
	ts.group("d")
	ts.timers.Delete("d", time.UnixMilli(130))
	ts.group("a")
	ts.timers.Register("a", time.UnixMilli(110)) // again: one timer
	if next, ok := ts.timers.Next(); !ok || next.UnixMilli() != 100 {
		t.Fatalf("next %v %v", next, ok)
	}
	var fired []string
	err := ts.timers.FireUpTo(125, func(k string, at time.Time) error {
		// The key's group is current: state of the key is reachable.
		ts.values.Put(k, at.UnixMilli())
		fired = append(fired, fmt.Sprint(k, "@", at.UnixMilli()))
		if k == "c" {
			ts.timers.Register("e", time.UnixMilli(105)) // due: fires now
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"c@100", "e@105", "a@110", "b@120"}; !slices.Equal(fired, want) {
		t.Fatalf("fired %v, want %v", fired, want)
	}
	for _, k := range []string{"a", "b"} {
		ts.group(k)
		if v, ok := ts.values.Get(k); !ok || v == 0 {
			t.Fatalf("state written in %s's timer is not in its key group", k)
		}
	}
	if _, ok := ts.timers.Next(); ok {
		t.Fatal("a timer is left")
	}
	ts.timers.Register("x", time.UnixMilli(1))
	ts.timers.Clear()
	if _, ok := ts.timers.Next(); ok {
		t.Fatal("Clear left a timer")
	}
}

// isolation: what the task writes after the synchronous part of a
// snapshot is not in it, however long the asynchronous part waits.
func (s *suite) isolation(t *testing.T) {
	ts := s.open(t, all, nil)
	put := func(k string, v int64) {
		ts.group(k)
		ts.values.Put(k, v)
		ts.lists.Add(k, fmt.Sprint(v))
		ts.maps.Put(k, "u", v)
	}
	for i := range 200 {
		put(fmt.Sprint("k", i), 1)
	}
	ts.group("k0")
	ts.timers.Register("k0", time.UnixMilli(500))
	ts.group("k7")
	ts.values.Get("k7") // a read just before the snapshot...
	async, err := ts.b.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	ts.values.Put("k7", 99) // ...and a write of the same key just after
	for i := range 200 {
		// Read-modify-writes, twice, then plain writes.
		k := fmt.Sprint("k", i)
		ts.group(k)
		for range 2 {
			v, _ := ts.values.Get(k)
			ts.values.Put(k, v+10)
		}
		if v, _ := ts.values.Get(k); (k == "k7" && v != 119) || (k != "k7" && v != 21) {
			t.Fatalf("%s after two read-modify-writes: %d", k, v)
		}
		put(k, 2)
		if i%3 == 0 {
			ts.group(fmt.Sprint("k", i))
			ts.values.Delete(fmt.Sprint("k", i))
			ts.lists.Delete(fmt.Sprint("k", i))
		}
	}
	put("new", 2)
	ts.group("k1")
	ts.timers.Register("k1", time.UnixMilli(600))
	w := &operatortest.MemWriter{}
	hs, err := async(w)
	if err != nil {
		t.Fatal(err)
	}
	back := s.open(t, all, &state.Restored{Handles: hs, Reader: w})
	for i := range 200 {
		k := fmt.Sprint("k", i)
		back.group(k)
		if v, ok := back.values.Get(k); !ok || v != 1 {
			t.Fatalf("restored %s = %d %v, want 1", k, v, ok)
		}
		if l := back.lists.Get(k); !slices.Equal(l, []string{"1"}) {
			t.Fatalf("restored list of %s = %v, want [1]", k, l)
		}
		if v, _ := back.maps.Get(k, "u"); v != 1 {
			t.Fatalf("restored map of %s = %d, want 1", k, v)
		}
	}
	back.group("new")
	if _, ok := back.values.Get("new"); ok {
		t.Fatal("a key written after the snapshot is in it")
	}
	if next, ok := back.timers.Next(); !ok || next.UnixMilli() != 500 {
		t.Fatalf("restored timers: next %v %v, want only 500", next, ok)
	}
	// The restored backend writes on from there.
	back.group("k5")
	back.lists.Add("k5", "after")
	if l := back.lists.Get("k5"); !slices.Equal(l, []string{"1", "after"}) {
		t.Fatalf("a restored list appended to: %v", l)
	}
}

// rescale: state written by one subtask restores into two by key-group
// range, and those two's back into one, with every key once.
func (s *suite) rescale(t *testing.T) {
	w := &operatortest.MemWriter{}
	one := s.open(t, all, nil)
	const n = 1000
	for i := range n {
		k := fmt.Sprint("key-", i)
		one.group(k)
		one.values.Put(k, int64(i))
		one.lists.Add(k, k)
		if i%10 == 0 {
			one.timers.Register(k, time.UnixMilli(int64(i)))
		}
	}
	hs := snapshot(t, one.b, 1, w)
	halves := []keygroup.Range{keygroup.ForSubtask(maxP, 2, 0), keygroup.ForSubtask(maxP, 2, 1)}
	var two []checkpoint.Handle
	seen := 0
	for h, r := range halves {
		// Owned, but of other key groups: restored whole all the same.
		part := s.open(t, r, &state.Restored{Handles: hs, Reader: w, Owned: true})
		for i := range n {
			k := fmt.Sprint("key-", i)
			if !part.group(k) {
				continue
			}
			seen++
			if v, ok := part.values.Get(k); !ok || v != int64(i) {
				t.Fatalf("half %d: %s = %d %v", h, k, v, ok)
			}
			part.values.Put(k, int64(i)+1) // each half changes its keys
		}
		fired := 0
		part.timers.FireUpTo(n, func(k string, _ time.Time) error {
			if !part.r.Contains(keygroup.Of(part.hasher.Hash(k), maxP)) {
				t.Errorf("half %d fired %s, a timer of another key group", h, k)
			}
			fired++
			return nil
		})
		if fired == 0 {
			t.Errorf("half %d restored no timer", h)
		}
		two = append(two, snapshot(t, part.b, 2, w)...)
	}
	if seen != n {
		t.Fatalf("the halves hold %d keys of %d", seen, n)
	}
	whole := s.open(t, all, &state.Restored{Handles: two, Reader: w})
	for i := range n {
		k := fmt.Sprint("key-", i)
		whole.group(k)
		if v, ok := whole.values.Get(k); !ok || v != int64(i)+1 {
			t.Fatalf("merged: %s = %d %v, want %d", k, v, ok, i+1)
		}
		if l := whole.lists.Get(k); !slices.Equal(l, []string{k}) {
			t.Fatalf("merged: list of %s = %v", k, l)
		}
	}
}

func (s *suite) large(t *testing.T) {
	ts := s.open(t, all, nil)
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	ts.group("big")
	ts.lists.Add("big", big)
	const keys = 100_000
	for i := range keys {
		k := fmt.Sprint("many-", i)
		ts.group(k)
		ts.values.Put(k, int64(i))
	}
	w := &operatortest.MemWriter{}
	hs := snapshot(t, ts.b, 1, w)
	back := s.open(t, all, &state.Restored{Handles: hs, Reader: w})
	back.group("big")
	if l := back.lists.Get("big"); len(l) != 1 || l[0] != big {
		t.Fatal("a 1 MiB value did not survive a snapshot")
	}
	for i := 0; i < keys; i += 997 {
		k := fmt.Sprint("many-", i)
		back.group(k)
		if v, ok := back.values.Get(k); !ok || v != int64(i) {
			t.Fatalf("%s = %d %v", k, v, ok)
		}
	}
}

// lateDeclaration: state restored before its table is declared (the
// function declares it later, or another operator's version does) is
// there once declared.
func (s *suite) lateDeclaration(t *testing.T) {
	ts := s.open(t, all, nil)
	ts.group("k")
	ts.values.Put("k", 7)
	w := &operatortest.MemWriter{}
	hs := snapshot(t, ts.b, 1, w)
	b, err := backend.New(s.cfg, backend.Scope{Job: "statetest", Operator: "op", KeyGroups: all}, &state.Restored{Handles: hs, Reader: w})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	other, err := backend.NewValue(b, "other", codec.For[string](), codec.For[int64]())
	if err != nil {
		t.Fatal(err)
	}
	ts.group("k")
	b.SetGroup(keygroup.Of(ts.hasher.Hash("k"), maxP))
	other.Put("k", 1)
	values, err := backend.NewValue(b, "values", codec.For[string](), codec.For[int64]())
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := values.Get("k"); !ok || v != 7 {
		t.Fatalf("values declared second: %d %v, want 7", v, ok)
	}
}

// ownedRestore: a backend restored at the same key groups from a
// checkpoint the job owns (state.Restored.Owned) writes on from it; its
// next snapshot holds the restored state and the changes. With
// incremental checkpoints that snapshot writes little more than the
// changes, where one after a restore that is not owned writes the state
// again.
func (s *suite) ownedRestore(t *testing.T) {
	w := &operatortest.MemWriter{}
	ts := s.open(t, all, nil)
	const n = 1000
	model := map[string]string{}
	for i := range n {
		k := fmt.Sprint("key-", i)
		ts.group(k)
		model[k] = strings.Repeat(k, 20)
		ts.lists.Add(k, model[k])
		ts.values.Put(k, int64(i))
		if i%10 == 0 {
			ts.timers.Register(k, time.UnixMilli(int64(i)))
		}
	}
	hs := snapshot(t, ts.b, 1, w)
	total := sizeOf(hs, nil)
	for _, owned := range []bool{true, false} {
		back := s.open(t, all, &state.Restored{Handles: hs, Reader: w, Owned: owned})
		for i := range 10 {
			k := fmt.Sprint("key-", i*97)
			back.group(k)
			back.lists.Delete(k)
			model[k] = "changed " + k
			back.lists.Add(k, model[k])
		}
		back.group("key-3")
		back.values.Delete("key-3")
		next := snapshot(t, back.b, 2, w)
		written := sizeOf(next, hs)
		t.Logf("owned %v: the first snapshot after the restore wrote %d bytes of %d", owned, written, sizeOf(next, nil))
		if !s.cfg.Full && owned && written*4 > total {
			t.Errorf("the first snapshot after an owned restore wrote %d bytes, the whole state is %d: it should reuse the restored files", written, total)
		}
		if !s.cfg.Full && !owned && written*2 < total {
			t.Errorf("the first snapshot after a restore that is not owned wrote %d bytes of %d: it should write the state again", written, total)
		}
		again := s.open(t, all, &state.Restored{Handles: next, Reader: w})
		for i := range n {
			k := fmt.Sprint("key-", i)
			again.group(k)
			if l := again.lists.Get(k); !slices.Equal(l, []string{model[k]}) {
				t.Fatalf("owned %v: list of %s = %v, want [%s]", owned, k, l, model[k])
			}
			if v, ok := again.values.Get(k); ok != (k != "key-3") || ok && v != int64(i) {
				t.Fatalf("owned %v: %s = %d %v", owned, k, v, ok)
			}
		}
		fired := 0
		again.timers.FireUpTo(n, func(string, time.Time) error { fired++; return nil })
		if fired != n/10 {
			t.Fatalf("owned %v: %d timers restored, want %d", owned, fired, n/10)
		}
		for i := range 10 {
			model[fmt.Sprint("key-", i*97)] = strings.Repeat(fmt.Sprint("key-", i*97), 20)
		}
	}
}

// sizeOf sums the sizes of the handles of hs that are not in old (by
// path): what a snapshot wrote.
func sizeOf(hs, old []checkpoint.Handle) int64 {
	var n int64
	for _, h := range hs {
		if h.Path == "" || !slices.ContainsFunc(old, func(o checkpoint.Handle) bool { return o.Path == h.Path }) {
			n += h.SizeBytes
		}
	}
	return n
}
