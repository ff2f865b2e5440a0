package pebble

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/operator/operatortest"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/heap"
)

// heapCheckpoint writes a checkpoint of an incremental heap backend whose
// keys key-0..key-299 have value state v ("v" and the key), list state l
// (a, b) and map state m (x → the key).
func heapCheckpoint(t *testing.T, w *operatortest.MemWriter) []checkpoint.Handle {
	t.Helper()
	s := codec.For[string]()
	b := heap.NewIncremental(all)
	v, err := heap.NewValue(b, "v", s, s)
	if err != nil {
		t.Fatal(err)
	}
	l, err := heap.NewList(b, "l", s, s)
	if err != nil {
		t.Fatal(err)
	}
	m, err := heap.NewMap(b, "m", s, s, s)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		b.SetGroup(i % 128)
		k := fmt.Sprint("key-", i)
		v.Put(k, "v"+k)
		l.Add(k, "a")
		l.Add(k, "b")
		m.Put(k, "x", k)
	}
	async, err := b.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	hs, err := async(w)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

// TestHeapStateMigrates: a heap checkpoint's value, list and map state
// restored here is in the tables that declare it; a checkpoint holds it
// once, in the database: a restore of that checkpoint reads what changed
// since, not the heap checkpoint's values again.
func TestHeapStateMigrates(t *testing.T) {
	w := &counting{MemWriter: &operatortest.MemWriter{}}
	s := codec.For[string]()
	hs := heapCheckpoint(t, w.MemWriter)
	b, v := open(t, t.TempDir(), true, hs, w.MemWriter)
	l, err := NewList(b, "l", s, s)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMap(b, "m", s, s, s)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		b.SetGroup(i % 128)
		k := fmt.Sprint("key-", i)
		if got, ok := v.Get(k); got != "v"+k || !ok {
			t.Fatalf("%s: value %q %v, want %q", k, got, ok, "v"+k)
		}
		if got := l.Get(k); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("%s: list %q, want [a b]", k, got)
		}
		if got := maps.Collect(m.All(k)); !maps.Equal(got, map[string]string{"x": k}) {
			t.Fatalf("%s: map %v, want x:%s", k, got, k)
		}
		v.Put(k, "w"+k)
		l.Add(k, "c")
		m.Put(k, "y", k)
	}
	if b.timers.Restored("v") || b.timers.Restored("l") || b.timers.Restored("m") {
		t.Fatal("migrated state still waits on the heap")
	}
	b2, v2 := open(t, t.TempDir(), true, take(t, b, 2, w), w.MemWriter)
	l2, err := NewList(b2, "l", s, s)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := NewMap(b2, "m", s, s, s)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		b2.SetGroup(i % 128)
		k := fmt.Sprint("key-", i)
		if got, ok := v2.Get(k); got != "w"+k || !ok {
			t.Fatalf("restored again, %s: value %q %v, want %q", k, got, ok, "w"+k)
		}
		if got := l2.Get(k); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("restored again, %s: list %q, want [a b c]", k, got)
		}
		if got := maps.Collect(m2.All(k)); !maps.Equal(got, map[string]string{"x": k, "y": k}) {
			t.Fatalf("restored again, %s: map %v, want x:%s y:%s", k, got, k, k)
		}
	}
}

var errRefused = errors.New("refused")

// refusing is a string codec that decodes nothing.
type refusing struct{ codec.Codec[string] }

func (refusing) Decode([]byte) (string, int, error) { return "", 0, errRefused }

// TestHeapStateThatDoesNotDecode: a heap state the declaring table's
// codecs cannot decode fails the declaration, naming the state.
func TestHeapStateThatDoesNotDecode(t *testing.T) {
	w := &operatortest.MemWriter{}
	b, err := New(Options{Dir: t.TempDir(), MemTableBytes: 1 << 20}, Scope{Job: "j", Operator: "op", KeyGroups: all}, &state.Restored{Handles: heapCheckpoint(t, w), Reader: w})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, err = NewValue(b, "v", codec.For[string](), refusing{codec.For[string]()})
	if !errors.Is(err, errRefused) || !strings.Contains(err.Error(), `state "v" of a heap backend's checkpoint`) {
		t.Fatalf("declaring state v with a codec that refuses its values: %v", err)
	}
}

// TestHeapStateDoesNotOverwriteTables: a checkpoint that holds both a
// Pebble table and heap state of its name (a version before migration
// checkpointed a restored heap state it did not read beside the table it
// wrote) restores the table as it was; the heap state is not migrated
// over it.
func TestHeapStateDoesNotOverwriteTables(t *testing.T) {
	w := &counting{MemWriter: &operatortest.MemWriter{}}
	b, v := open(t, t.TempDir(), true, nil, nil)
	b.SetGroup(0)
	v.Put("key-0", "pebble")
	hs := append(take(t, b, 1, w), heapCheckpoint(t, w.MemWriter)...)
	b2, v2 := open(t, t.TempDir(), true, hs, w.MemWriter)
	b2.SetGroup(0)
	if got, ok := v2.Get("key-0"); got != "pebble" || !ok {
		t.Fatalf("key-0: %q %v, want the table's value", got, ok)
	}
	if !b2.timers.Restored("v") {
		t.Fatal("the heap state was dropped, not carried on")
	}
}
