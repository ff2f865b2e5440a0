package heap

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"
	"weak"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/arena"
	"github.com/weirstream/weir/internal/keygroup"
)

// The tables keep copies of their keys, never the records' strings they
// were given: a record's string may be cut from a chunk shared with other
// records, which a kept key would keep alive. Every way a table stores a
// key is tried, each on both sides of a snapshot (where an entry a
// snapshot shares is replaced, and a Go map would store the caller's key).
func TestTablesKeepCopiesOfKeys(t *testing.T) {
	ts := open(t, keygroup.Range{First: 0, Last: maxP - 1}, nil, nil)
	chunk := strings.Repeat("a record's text ", 64) + "word other"
	inChunk := func(s string) bool {
		p, start := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(unsafe.StringData(chunk)))
		return len(s) > 0 && p >= start && p < start+uintptr(len(chunk))
	}
	word := func() string { return at(ts.b, chunk[len(chunk)-10:len(chunk)-6]) } // "word", cut from the chunk
	other := chunk[len(chunk)-5:]
	for round := range 3 {
		ts.counts.Put(word(), round) // a blind write
		v, _ := ts.counts.Get(word())
		ts.counts.Put(word(), v+1) // a read-modify-write
		ts.lists.Add(word(), "x")
		ts.lists.Update(word(), []string{"y"})
		ts.maps.Put(word(), other, round)
		ts.timers.Register(word(), time.UnixMilli(int64(round)))
		encodeAll(t, ts.b)
	}
	g := keygroup.Of(hasher.Hash("word"), maxP)
	check := func(table, k string) {
		t.Helper()
		if k != "word" && k != "other" {
			t.Fatalf("%s holds key %q", table, k)
		}
		if inChunk(k) {
			t.Errorf("%s keeps the caller's string for key %q, not a copy", table, k)
		}
	}
	for k, e := range ts.counts.groups[g] {
		check("value map", k)
		check("value entry", e.key)
	}
	for k, e := range ts.lists.groups[g] {
		check("list map", k)
		check("list entry", e.key)
	}
	for k, in := range ts.maps.groups[g] {
		check("map map", k)
		check("map entry", in.key)
		for uk, e := range in.m {
			check("inner map", uk)
			check("inner entry", e.uk)
		}
	}
	for tm := range ts.timers.groups[g] {
		check("timers", tm.key)
	}
	if n := len(ts.timers.groups[g]); n != 3 {
		t.Errorf("%d timers, want 3", n)
	}
}

// Keys of a struct type get their strings copied too, exported fields or
// not, without going through a codec.
func TestStructKeysAreCopied(t *testing.T) {
	type key struct {
		Name  string
		n     int
		inner [1]struct{ s string }
	}
	chunk := "name and more text"
	k := key{Name: chunk[:4], n: 1}
	k.inner[0].s = chunk[5:8]
	own := ownerOf[key]()
	c := own.own(k)
	if c != k {
		t.Fatalf("copy %+v, want %+v", c, k)
	}
	if unsafe.StringData(c.Name) == unsafe.StringData(k.Name) || unsafe.StringData(c.inner[0].s) == unsafe.StringData(k.inner[0].s) {
		t.Fatalf("a struct key's strings were kept, not copied")
	}
	if ownerOf[int64]().clone != nil || ownerOf[struct{ A, B int }]().clone != nil {
		t.Fatal("a key without strings is copied")
	}
}

// rec is a record with strings, as a join or a window keeps.
type rec struct {
	Name string
	N    int
	Tags [2]string
}

// valueTables are tables whose values hold strings, one of each way a
// value is stored.
type valueTables struct {
	b       *Backend
	strs    *Value[string, string]
	recs    *Value[string, rec]
	list    *List[string, string]
	buffers *Map[string, int64, []rec] // as a join keeps rows per time
}

func declareValues(t *testing.T, b *Backend) *valueTables {
	t.Helper()
	vt := &valueTables{b: b}
	var err error
	if vt.strs, err = NewValue(b, "strs", codec.For[string](), codec.For[string]()); err != nil {
		t.Fatal(err)
	}
	if vt.recs, err = NewValue(b, "recs", codec.For[string](), codec.For[rec]()); err != nil {
		t.Fatal(err)
	}
	if vt.list, err = NewList(b, "list", codec.For[string](), codec.For[string]()); err != nil {
		t.Fatal(err)
	}
	if vt.buffers, err = NewMap(b, "buffers", codec.For[string](), codec.For[int64](), codec.For[[]rec]()); err != nil {
		t.Fatal(err)
	}
	return vt
}

// store stores s (and copies) as key k's value in every way a table
// stores one.
func (vt *valueTables) store(k, s string, round int) {
	at(vt.b, k)
	vt.strs.Put(k, s) // a blind write
	v, _ := vt.strs.Get(k)
	vt.strs.Put(k, v) // a read-modify-write
	vt.recs.Put(k, rec{Name: s, N: round, Tags: [2]string{s, "t"}})
	vt.list.Add(k, s)
	if round%3 == 2 {
		vt.list.Update(k, []string{s, vt.list.Get(k)[0]})
	}
	prev, _ := vt.buffers.Get(k, int64(round%2))
	vt.buffers.Put(k, int64(round%2), append(prev, rec{Name: s, Tags: [2]string{"", s}}))
}

// strings returns every string the tables hold in k's key group.
func (vt *valueTables) strings(k string) []string {
	g := keygroup.Of(hasher.Hash(k), maxP) - vt.b.groups.First
	var out []string
	for _, e := range vt.strs.groups[g] {
		out = append(out, e.v)
	}
	for _, e := range vt.recs.groups[g] {
		out = append(out, e.v.Name, e.v.Tags[0], e.v.Tags[1])
	}
	for _, e := range vt.list.groups[g] {
		out = append(out, e.vs...)
	}
	for _, in := range vt.buffers.groups[g] {
		for _, e := range in.m {
			for _, r := range e.v {
				out = append(out, r.Name, r.Tags[0], r.Tags[1])
			}
		}
	}
	return out
}

// The tables keep copies of the strings in their values too, not the
// caller's: a record's string may be cut from a chunk shared with other
// records (a batch off the network, a file source's block), which a kept
// value would keep alive. Every way a table stores a value is tried, on
// both sides of a snapshot.
func TestTablesKeepCopiesOfValues(t *testing.T) {
	vt := declareValues(t, New(keygroup.Range{First: 0, Last: maxP - 1}))
	chunk := strings.Repeat("a record's text ", 64) + "value"
	inChunk := func(s string) bool {
		p, start := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(unsafe.StringData(chunk)))
		return p >= start && p < start+uintptr(len(chunk))
	}
	for round := range 6 {
		vt.store("k", chunk[len(chunk)-5:], round)
		vt.store("k", chunk[len(chunk)-5:len(chunk)-5], round) // empty, and still in the chunk
		if round%2 == 1 {
			vt.b.freeze()
		}
	}
	got := vt.strings("k")
	if len(got) == 0 {
		t.Fatal("no values stored")
	}
	for _, s := range got {
		if s != "value" && s != "" && s != "t" {
			t.Fatalf("a table holds %q", s)
		}
		if inChunk(s) {
			t.Errorf("a table keeps the caller's string %q, not a copy", s)
		}
	}
}

// Strings cut from shared chunks and kept as values do not keep their
// chunks alive: batches are cut (as the network path cuts them), one
// string of each is kept in every kind of table, the batches are dropped,
// and after a collection no chunk is left.
func TestKeptValuesDoNotPinChunks(t *testing.T) {
	vt := declareValues(t, NewIncremental(keygroup.Range{First: 0, Last: maxP - 1}))
	const batches = 200
	chunks := make([]weak.Pointer[byte], batches)
	func() {
		for i := range batches {
			var src []byte
			for j := range 400 {
				src = fmt.Appendf(src, "b%04d-w%03d", i, j) // 10 bytes each
			}
			var cuts arena.Cuts
			cuts.Reset(src)
			words := make([]string, 400)
			for j := range words {
				words[j] = cuts.Cut(src[j*10:], 10)
			}
			chunks[i] = weak.Make(unsafe.StringData(words[0]))
			vt.store(fmt.Sprint("k", i), words[i%400], i)
		}
	}()
	runtime.GC()
	runtime.GC()
	pinned := 0
	for _, c := range chunks {
		if c.Value() != nil {
			pinned++
		}
	}
	if pinned > 0 {
		t.Fatalf("%d of %d chunks are kept alive by values the tables hold", pinned, batches)
	}
	for i := range batches { // and the values are there
		k := at(vt.b, fmt.Sprint("k", i))
		if v, _ := vt.strs.Get(k); v != fmt.Sprintf("b%04d-w%03d", i, i%400) {
			t.Fatalf("%s = %q", k, v)
		}
	}
}

// Storing a value whose strings equal those of the value it replaces
// copies nothing: a running count that keeps its record's word costs no
// allocation a record, and keeps the string it has, on either side of a
// snapshot.
func TestEqualStringsAreNotCopiedAgain(t *testing.T) {
	vt := declareValues(t, New(keygroup.Range{First: 0, Last: maxP - 1}))
	stored, word := strings.Clone("word"), strings.Clone("word") // equal, apart
	k := at(vt.b, "k")
	vt.recs.Put(k, rec{Name: stored})
	rmw := func() {
		r, _ := vt.recs.Get(k)
		vt.recs.Put(k, rec{Name: word, N: r.N + 1, Tags: r.Tags})
	}
	if allocs := testing.AllocsPerRun(100, rmw); allocs != 0 {
		t.Fatalf("%.2f allocations a read-modify-write, want none", allocs)
	}
	r, _ := vt.recs.Get(k)
	own := unsafe.StringData(r.Name)
	if own == unsafe.StringData(stored) || own == unsafe.StringData(word) {
		t.Fatal("the table keeps a caller's string")
	}
	vt.b.freeze()
	rmw() // replaces the entry the snapshot shares
	if r, _ := vt.recs.Get(k); unsafe.StringData(r.Name) != own || r.N != 102 {
		t.Fatalf("after a freeze the table holds %+v, not its own string and count 102", r)
	}
}

// A table does not write its copies into a caller's array: the array may
// be another's as well (a record handed to two operators reads it on, a
// frozen value being snapshotted was sliced from it), so that would be a
// data race. Found by review: a value re-sliced from the one it replaces.
func TestSlicesOfValuesAreNotWrittenInPlace(t *testing.T) {
	type tagged struct{ Tags []string }
	vals := valuesOf[tagged]()
	chunk := "abc"
	callers := []string{chunk[0:1], chunk[1:2], chunk[2:3]}
	stored := tagged{Tags: callers}
	vals.own(&stored, nil) // a first store
	for i, s := range callers {
		if unsafe.StringData(s) != unsafe.StringData(chunk[i:]) {
			t.Fatalf("the table wrote into the caller's array at %d", i)
		}
	}
	frozen := slices.Clone(stored.Tags)   // what a snapshot reads
	next := tagged{Tags: stored.Tags[1:]} // re-sliced from the value it replaces
	vals.own(&next, &stored)
	for i, s := range stored.Tags {
		if unsafe.StringData(s) != unsafe.StringData(frozen[i]) {
			t.Fatalf("the table wrote into the replaced value's array at %d", i)
		}
	}
	if !slices.Equal(next.Tags, []string{"b", "c"}) || !slices.Equal(stored.Tags, []string{"a", "b", "c"}) {
		t.Fatalf("stored %v and %v", next.Tags, stored.Tags)
	}
}

// A value type within itself (through a slice) is walked whole, and a
// value without strings has no walker.
func TestRecursiveValuesAreOwned(t *testing.T) {
	type tree struct {
		Name string
		Kids []tree
	}
	chunk := "root leaf"
	v := tree{Name: chunk[:4], Kids: []tree{{Name: chunk[5:]}, {Kids: []tree{{Name: chunk[5:]}}}}}
	vals := valuesOf[tree]()
	vals.own(&v, nil)
	for _, s := range []string{v.Name, v.Kids[0].Name, v.Kids[1].Kids[0].Name} {
		if p := uintptr(unsafe.Pointer(unsafe.StringData(s))); p >= uintptr(unsafe.Pointer(unsafe.StringData(chunk))) && p < uintptr(unsafe.Pointer(unsafe.StringData(chunk)))+uintptr(len(chunk)) {
			t.Fatalf("%q is still the caller's", s)
		}
	}
	if v.Name != "root" || v.Kids[0].Name != "leaf" || v.Kids[1].Kids[0].Name != "leaf" {
		t.Fatalf("owned value %+v", v)
	}
	if valuesOf[[]struct{ A, B int64 }]().walk != nil || valuesOf[*string]().walk != nil {
		t.Fatal("a value without strings by value has a walker")
	}
}
