package heap

import (
	"strings"
	"testing"
	"time"
	"unsafe"

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
