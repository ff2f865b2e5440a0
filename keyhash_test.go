package weir

import (
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state"
)

// hashBackend records what the keyed operator tells a backend that takes
// key hashes (state.KeyHashes); the rest of state.Backend is not called.
type hashBackend struct {
	state.Backend
	groups []int
	hashes []uint64
}

func (b *hashBackend) SetGroup(g int) { b.groups = append(b.groups, g); b.hashes = append(b.hashes, 0) }

type keyHashBackend struct{ hashBackend }

func (b *keyHashBackend) SetKeyHash(g int, h uint64) {
	b.groups = append(b.groups, g)
	b.hashes = append(b.hashes, h)
}

// keyedOver is a keyed operator's machinery over backend b, the whole key
// group range its own, as open makes it.
func keyedOver(b state.Backend) *keyed[string, int] {
	k := &keyed[string, int]{c: &chain{group: -1}, hasher: codec.NewHasher(codec.For[string]())}
	k.kctx = KeyedContext[string]{backend: b, c: k.c,
		op: &operator.Context{UID: "count", MaxParallelism: 128, KeyGroups: keygroup.Range{First: 0, Last: 127}}}
	k.hashes, _ = b.(state.KeyHashes)
	return k
}

func TestSetKeyGivesTheKeysHashToABackendThatTakesIt(t *testing.T) {
	b := &keyHashBackend{}
	k := keyedOver(b)
	words := strings.Fields("the cat sat on the mat")
	for _, w := range words {
		k.c.group = keygroup.Of(xxhash.Sum64String(w), 128) // as the sender carried it
		if !k.setKey(w) {
			t.Fatalf("setKey(%q) failed: %v", w, k.c.err)
		}
	}
	for i, w := range words {
		h := xxhash.Sum64String(w)
		if g := keygroup.Of(h, 128); b.groups[i] != g || b.hashes[i] != h {
			t.Errorf("word %q: the backend got group %d, hash %#x; want %d, %#x (the routing hash)", w, b.groups[i], b.hashes[i], g, h)
		}
	}

	// A backend that does not take hashes hears the group only.
	plain := &hashBackend{}
	k = keyedOver(plain)
	k.c.group = keygroup.Of(xxhash.Sum64String("cat"), 128)
	if !k.setKey("cat") || plain.groups[0] != k.c.group || plain.hashes[0] != 0 {
		t.Fatalf("plain backend: group %v, hashes %v; want group %d through SetGroup", plain.groups, plain.hashes, k.c.group)
	}
}

// With a backend that takes hashes every key is hashed, so a record whose
// carried key group is not its key's is caught at once, not at the 64th.
func TestSetKeyWithKeyHashesChecksEveryCarriedGroup(t *testing.T) {
	k := keyedOver(&keyHashBackend{})
	g := keygroup.Of(xxhash.Sum64String("cat"), 128)
	k.c.group = (g + 1) % 128
	if k.setKey("cat") {
		t.Fatal("setKey took a key whose carried key group is not its own")
	}
	if k.c.err == nil || !strings.Contains(k.c.err.Error(), "the key selector must return the same key") {
		t.Fatalf("the chain failed with %v; want the key selector's error", k.c.err)
	}
}
