package heap

// Found by an outside review of session 35's fixes.

import (
	"testing"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
)

type seenAcc struct {
	N    int
	seen map[string]bool // unexported: Binary/JSON drop it
}

// TestGetCopyKeepsUnexportedFields: a value state of *seenAcc, updated
// in place (the pattern the copy-on-write change is meant to make safe). The
// job never restores; after the first checkpoint, Get hands out a codec round
// trip of the value, which drops the unexported map: the state silently loses
// it (and the next `a.seen[x] = true` panics on a nil map).
func TestGetCopyKeepsUnexportedFields(t *testing.T) {
	b := New(keygroup.Range{First: 0, Last: maxP - 1})
	v, err := NewValue(b, "v", codec.For[string](), codec.For[*seenAcc]())
	if err != nil {
		t.Fatal(err)
	}
	k := at(b, "k")
	v.Put(k, &seenAcc{N: 1, seen: map[string]bool{"a": true}})
	_ = b.freeze() // a checkpoint is taken; the job goes on
	got, _ := v.Get(k)
	if got == nil || !got.seen["a"] {
		t.Fatalf("after a checkpoint (no restore) Get returned %+v: the unexported map was lost by the copy", got)
	}
}

// TestGetCopyKeepsInterfaceValues: Value[string, any] holding an int:
// after a checkpoint, Get returns float64 (JSON round trip), so the job's
// v.(int) panics although nothing was restored.
func TestGetCopyKeepsInterfaceValues(t *testing.T) {
	b := New(keygroup.Range{First: 0, Last: maxP - 1})
	v, err := NewValue(b, "v", codec.For[string](), codec.For[any]())
	if err != nil {
		t.Fatal(err)
	}
	k := at(b, "k")
	v.Put(k, 5)
	_ = b.freeze()
	got, _ := v.Get(k)
	if _, ok := got.(int); !ok {
		t.Fatalf("after a checkpoint (no restore) Get returned %T %v, want int 5", got, got)
	}
}
