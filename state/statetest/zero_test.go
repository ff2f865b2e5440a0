package statetest

import (
	"math"
	"testing"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/operator/operatortest"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/backend"
)

// TestZeroAndNegativeZeroAreOneKey: float64 keys 0 and -0 are one key
// under Go's ==, and now under the key codec too: one key group, one
// value, on every backend and across a restore. Before, they encoded
// apart: the heap's Put wrote 0's value into -0's entry of another key
// group, and Pebble's cache merged the two, losing a write. Found by an
// outside review, session 36.
func TestZeroAndNegativeZeroAreOneKey(t *testing.T) {
	kc := codec.ForKey[float64]()
	h := codec.NewHasher(kc)
	neg, pos := math.Copysign(0, -1), 0.0
	g := keygroup.Of(h.Hash(pos), maxP)
	if gn := keygroup.Of(h.Hash(neg), maxP); gn != g {
		t.Fatalf("-0 is in key group %d, 0 in %d", gn, g)
	}
	for name, cfg := range map[string]backend.Config{
		"heap":      {Kind: backend.Heap},
		"heap-full": {Kind: backend.Heap, Full: true},
		"pebble":    {Kind: backend.Pebble, Dir: t.TempDir()},
	} {
		open := func(rs *state.Restored) (state.Backend, state.Value[float64, int64]) {
			b, err := backend.New(cfg, backend.Scope{Job: "zero", Operator: "op", KeyGroups: all}, rs)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			v, err := backend.NewValue(b, "v", kc, codec.For[int64]())
			if err != nil {
				t.Fatal(err)
			}
			b.SetGroup(g)
			return b, v
		}
		b, v := open(nil)
		v.Put(neg, 5)
		v.Put(pos, 1)
		check := func(when string) {
			for _, k := range []float64{neg, pos} {
				if got, ok := v.Get(k); !ok || got != 1 {
					t.Errorf("%s, %s: key %v holds %d (found %v), want 1, the latest write of the one key", name, when, k, got, ok)
				}
			}
		}
		check("before a restore")
		w := &operatortest.MemWriter{}
		hs := snapshot(t, b, 1, w)
		_, v = open(&state.Restored{Handles: hs, Reader: w})
		check("after a restore")
	}
	if got, _, _ := codec.For[float64]().Decode(codec.For[float64]().Append(nil, neg)); !math.Signbit(got) {
		t.Errorf("a float64 value -0 came back as %v: values keep their sign", got)
	}
}

// TestHeapPutOfAnEqualKeyInAnotherGroup: keys equal under == may still
// encode apart, into two key groups, under a key codec a job gives (here
// Binary, which writes a float's bits; the default key codecs write 0 and
// -0 alike since session 37); the heap's Put of the key its last Get found
// wrote into the entry of the other group. Pebble's write-back cache,
// keyed by the Go key, still merges such keys (design note 131).
func TestHeapPutOfAnEqualKeyInAnotherGroup(t *testing.T) {
	type point struct{ X float64 }
	kc := codec.Codec[point](codec.Binary[point]{})
	h := codec.NewHasher(kc)
	neg, pos := point{math.Copysign(0, -1)}, point{0}
	gn, gp := keygroup.Of(h.Hash(neg), maxP), keygroup.Of(h.Hash(pos), maxP)
	if gn == gp {
		t.Fatalf("both in key group %d: the test needs keys in two", gn)
	}
	b, err := backend.New(backend.Config{Kind: backend.Heap}, backend.Scope{Job: "zero", Operator: "op", KeyGroups: all}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	v, err := backend.NewValue(b, "v", kc, codec.For[int64]())
	if err != nil {
		t.Fatal(err)
	}
	b.SetGroup(gn)
	v.Get(neg)
	v.Put(neg, 5)
	b.SetGroup(gp)
	v.Put(pos, 1)
	b.SetGroup(gn)
	if got, ok := v.Get(neg); !ok || got != 5 {
		t.Errorf("-0's group: %d (found %v), want 5", got, ok)
	}
	b.SetGroup(gp)
	if got, ok := v.Get(pos); !ok || got != 1 {
		t.Errorf("0's group: %d (found %v), want 1", got, ok)
	}
}
