// Package hashtab is a hash table whose callers hash the keys.
//
// A keyed operator has hashed its record's key already, to route the record
// to its key group (codec.Hasher); a Go map hashes it again, with its own
// hash, at every lookup. Table takes the caller's hash with the key, so a
// key is hashed once per record: a lookup is a multiply, a probe and one
// comparison of the key. Design note 88 says where it is to be used.
package hashtab

import (
	"iter"
	"math/bits"
)

// Table maps keys to values by open addressing with linear probing. Every
// call that takes a key takes its hash too, which must be a function of the
// key alone (the same key, the same hash, every time); any 64-bit hash
// will do, including a weak one such as an integer key itself, as the
// table mixes it. The zero value is an empty table ready to use. A Table
// is not safe for concurrent use.
type Table[K comparable, V any] struct {
	slots []slot[K, V]
	// shift is 64 - log2(len(slots)): a key's first slot is the top bits
	// of its mixed hash.
	shift uint
	n     int
}

type slot[K comparable, V any] struct {
	// tag is the key's hash with its lowest bit set; 0 marks an empty
	// slot.
	tag uint64
	key K
	v   V
}

// minSlots is the size of a table's first array of slots.
const minSlots = 8

// Len is the number of keys in t.
func (t *Table[K, V]) Len() int { return t.n }

// Get returns k's value, and whether k is in t.
func (t *Table[K, V]) Get(hash uint64, k K) (V, bool) {
	if i, ok := t.find(hash, k); ok {
		return t.slots[i].v, true
	}
	var zero V
	return zero, false
}

// Put sets k's value to v.
func (t *Table[K, V]) Put(hash uint64, k K, v V) {
	if i, ok := t.find(hash, k); ok {
		t.slots[i].v = v
		return
	}
	if (t.n+1)*4 > len(t.slots)*3 { // at most three quarters full: probes stay short
		t.grow()
	}
	tag := hash | 1
	mask := len(t.slots) - 1
	for i := t.home(tag); ; i = (i + 1) & mask {
		if t.slots[i].tag == 0 {
			t.slots[i] = slot[K, V]{tag: tag, key: k, v: v}
			t.n++
			return
		}
	}
}

// Delete removes k; it reports whether k was there.
func (t *Table[K, V]) Delete(hash uint64, k K) bool {
	i, ok := t.find(hash, k)
	if !ok {
		return false
	}
	// Backward-shift deletion: move up every later key of the run whose
	// first slot is at or before the hole, so that no probe for a key
	// stops at the hole before reaching it (no tombstones).
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].tag != 0; j = (j + 1) & mask {
		if home := t.home(t.slots[j].tag); (j-home)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = slot[K, V]{} // the zero key and value: they may hold pointers
	t.n--
	return true
}

// All yields every key and value, in no particular order. t must not be
// changed during the iteration.
func (t *Table[K, V]) All() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		for i := range t.slots {
			if s := &t.slots[i]; s.tag != 0 && !yield(s.key, s.v) {
				return
			}
		}
	}
}

// find returns k's slot, or false.
func (t *Table[K, V]) find(hash uint64, k K) (int, bool) {
	if t.n == 0 {
		return 0, false
	}
	tag := hash | 1
	mask := len(t.slots) - 1
	for i := t.home(tag); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.tag == tag && s.key == k {
			return i, true
		}
		if s.tag == 0 {
			return 0, false
		}
	}
}

// home is the first slot a key with tag may take: Fibonacci hashing (the
// top bits of the tag times 2^64/φ), so that keys whose hashes differ only
// in high or only in low bits spread alike.
func (t *Table[K, V]) home(tag uint64) int {
	return int((tag * 0x9e3779b97f4a7c15) >> t.shift)
}

func (t *Table[K, V]) grow() {
	old := t.slots
	size := max(minSlots, 2*len(old))
	t.slots = make([]slot[K, V], size)
	t.shift = uint(64 - bits.TrailingZeros(uint(size)))
	mask := size - 1
	for _, s := range old {
		if s.tag == 0 {
			continue
		}
		i := t.home(s.tag)
		for t.slots[i].tag != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}
