package hashtab

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestAgainstMap runs random operations on a Table and on a Go map (the
// model) and compares them after each: with a good hash, and with hashes
// that collide on purpose (few distinct hashes, so that runs of keys
// share slots and Delete must shift them back).
func TestAgainstMap(t *testing.T) {
	for _, h := range []struct {
		name string
		hash func(int) uint64
	}{
		{"xxhash", func(k int) uint64 { return xxhash.Sum64String(fmt.Sprint(k)) }},
		{"identity", func(k int) uint64 { return uint64(k) }},
		{"eight hashes", func(k int) uint64 { return uint64(k % 8) }},
		{"one hash", func(int) uint64 { return 42 }},
	} {
		for seed := range uint64(20) {
			t.Run(fmt.Sprintf("%s/seed=%d", h.name, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 1))
				keys := 1 + rng.IntN(300)
				var tab Table[int, int]
				model := map[int]int{}
				for op := range 3000 {
					k := rng.IntN(keys)
					switch r := rng.IntN(10); {
					case r < 4:
						tab.Put(h.hash(k), k, op)
						model[k] = op
					case r < 7:
						_, want := model[k]
						delete(model, k)
						if got := tab.Delete(h.hash(k), k); got != want {
							t.Fatalf("op %d: Delete(%d) = %v, the model had it: %v", op, k, got, want)
						}
					default:
						v, ok := tab.Get(h.hash(k), k)
						if mv, mok := model[k]; v != mv || ok != mok {
							t.Fatalf("op %d: Get(%d) = %d, %v; the model has %d, %v", op, k, v, ok, mv, mok)
						}
					}
					if tab.Len() != len(model) {
						t.Fatalf("op %d: Len() = %d, the model has %d", op, tab.Len(), len(model))
					}
				}
				if got := maps.Collect(tab.All()); !maps.Equal(got, model) {
					t.Fatalf("All() = %v, the model has %v", got, model)
				}
				for k, v := range model { // every key is still found where probes look
					if got, ok := tab.Get(h.hash(k), k); !ok || got != v {
						t.Fatalf("Get(%d) = %d, %v at the end; the model has %d", k, got, ok, v)
					}
				}
			})
		}
	}
}

func TestZeroValueAndStrings(t *testing.T) {
	var tab Table[string, int64]
	if _, ok := tab.Get(1, "a"); ok || tab.Len() != 0 || tab.Delete(1, "a") {
		t.Fatal("the zero Table is not empty")
	}
	for n := range 1000 {
		w := fmt.Sprint("word", n)
		tab.Put(xxhash.Sum64String(w), w, int64(n))
	}
	for n := range 1000 {
		w := fmt.Sprint("word", n)
		if v, ok := tab.Get(xxhash.Sum64String(w), w); !ok || v != int64(n) {
			t.Fatalf("Get(%q) = %d, %v; want %d", w, v, ok, n)
		}
	}
	n := 0
	for range tab.All() {
		n++
		break // All stops when told
	}
	if n != 1 {
		t.Fatalf("All went on after yield returned false: %d", n)
	}
}

func TestNoAllocationOnLookupAndUpdate(t *testing.T) {
	var tab Table[string, int64]
	h := xxhash.Sum64String("word")
	tab.Put(h, "word", 1)
	if a := testing.AllocsPerRun(100, func() {
		v, _ := tab.Get(h, "word")
		tab.Put(h, "word", v+1)
	}); a != 0 {
		t.Fatalf("%.1f allocations per lookup and update of a key present", a)
	}
}
