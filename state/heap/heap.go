// Package heap is the heap state backend: keyed state in Go maps, one map
// per key group, with copy-on-write snapshots.
//
// A snapshot's synchronous part only marks every key group's map as shared
// (O(key groups)); the asynchronous part encodes the frozen maps while the
// task goes on. The first write to a shared key group clones that group's
// map, so the task pays for copying only the groups it changes while a
// snapshot is being written. Map and list values are cloned per key on their
// first change after a freeze.
//
// Tables keep copies of the strings of keys and values (see own.go): a
// record's strings may share a chunk with other records', which a kept
// string would keep alive. A value is copied when stored only where it
// differs from the value it replaces, so a read-modify-write that keeps a
// record's word copies nothing, and a value without strings costs nothing.
//
// NB: values are copied by assignment. A value holding references (pointers,
// slices, maps) must not be mutated after it was stored; store a new value.
// A slice stored is the table's: the strings of its elements may be
// replaced by equal copies. Strings behind pointers, maps and interfaces
// are kept as given.
//
// A Backend and its tables belong to one task goroutine; only the function
// returned by Snapshot may run elsewhere.
package heap

import (
	"cmp"
	"container/heap"
	"encoding/binary"
	"fmt"
	"iter"
	"maps"
	"slices"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
)

// Backend holds one subtask's keyed state.
type Backend struct {
	groups      keygroup.Range
	current     int    // index of the current key's group within groups
	epoch       uint64 // incremented by every freeze
	incremental bool
	tables      []table
	byName      map[string]table
	pending     map[string]map[int][]section // restored sections of tables not yet registered, per key group (index)

	// confirmed are the chains of the newest completed checkpoint (nil:
	// none since the start or the restore): an incremental snapshot
	// writes what changed since it. taken holds, per checkpoint taken and
	// not yet completed or aborted, its chains (filled by the
	// asynchronous part, read only after it returned).
	confirmed *chains
	taken     map[checkpoint.ID]*chains
}

type table interface {
	freeze() frozen
	// put decodes one entry of a snapshot into key group g (index).
	put(g int, src []byte) (used int, err error)
	// deleteEncoded decodes a key of a delta and deletes it from key
	// group g (index).
	deleteEncoded(g int, src []byte) (used int, err error)
}

// New returns an empty backend for key groups r whose snapshots are full:
// one keyed blob.
func New(r keygroup.Range) *Backend {
	return &Backend{groups: r, byName: map[string]table{}, pending: map[string]map[int][]section{}, taken: map[checkpoint.ID]*chains{}}
}

// NewIncremental returns an empty backend for key groups r whose
// snapshots write what changed since the newest completed checkpoint (see
// incremental.go).
func NewIncremental(r keygroup.Range) *Backend {
	b := New(r)
	b.incremental = true
	return b
}

// SetGroup makes key group g (absolute) current; every table access that
// follows is in it. A key group outside the backend's range is a routing
// bug and panics.
func (b *Backend) SetGroup(g int) {
	if !b.groups.Contains(g) {
		panic(fmt.Sprintf("heap: key group %d outside this subtask's range %v", g, b.groups))
	}
	b.current = g - b.groups.First
}

// Group is the current key group (absolute).
func (b *Backend) Group() int { return b.groups.First + b.current }

// Restore loads the keyed state of this backend's key groups from handles
// written by any parallelism, full or incremental. Tables registered later
// pick up their part. The first snapshot after it writes every key group
// whole: the restored checkpoint's files may be another job's, or a
// savepoint's (Flink's NO_CLAIM).
func (b *Backend) Restore(hs []checkpoint.Handle, read func(checkpoint.Handle) ([]byte, error)) error {
	return b.restore(hs, read, false)
}

// RestoreOwned is Restore of a checkpoint the job's checkpoint storage
// holds and counts the references of (not a savepoint): when one
// incremental snapshot of exactly this backend's key groups holds the
// state (a restore at the parallelism that took it), the next snapshot
// extends its chains, as if the backend had taken it, and writes only
// what changed since (Flink's CLAIM, on failover).
func (b *Backend) RestoreOwned(hs []checkpoint.Handle, read func(checkpoint.Handle) ([]byte, error)) error {
	return b.restore(hs, read, true)
}

func (b *Backend) restore(hs []checkpoint.Handle, read func(checkpoint.Handle) ([]byte, error), owned bool) error {
	b.confirmed = nil
	var keyed []checkpoint.Handle
	for _, h := range hs {
		if h.Kind == state.KindKeyed && h.KeyGroups.Intersect(b.groups).Len() > 0 {
			keyed = append(keyed, h)
		}
	}
	// NB: restored entries are of epoch 0 (put), and so are the groups'
	// last writes: a base of epoch 0 takes them for unchanged.
	claim := owned && b.incremental && b.epoch == 0 && len(keyed) == 1 && keyed[0].KeyGroups == b.groups
	for _, h := range keyed {
		blob, err := read(h)
		if err != nil {
			return err
		}
		if isIndex(blob) {
			var restored *chains
			if claim {
				restored = &chains{tables: map[string][][]link{}}
			}
			if err = b.restoreChains(h, blob, hs, read, restored); err == nil && restored != nil {
				b.confirmed, b.epoch = restored, 1
			}
		} else {
			err = state.DecodeKeyed(blob, b.groups, func(name string, g int, entries []byte) error {
				_, err := b.apply(name, g, section{full: true, data: entries})
				return err
			})
		}
		if err != nil {
			return fmt.Errorf("keyed state of %s subtask %d: %w", h.Operator, h.Subtask, err)
		}
	}
	return nil
}

// apply applies one restored section of table name in key group g
// (absolute), or keeps it until the table is registered; it says the keys
// the section holds, -1 if it cannot tell yet (see link.keys).
func (b *Backend) apply(name string, g int, s section) (int, error) {
	i := g - b.groups.First
	if t, ok := b.byName[name]; ok {
		return applySection(t, i, s)
	}
	if b.pending[name] == nil {
		b.pending[name] = map[int][]section{}
	}
	s.data = slices.Clone(s.data) // not the whole file it was read from
	b.pending[name][i] = append(b.pending[name][i], s)
	return sectionKeys(s), nil
}

// Snapshot freezes every table and returns the asynchronous part, which
// encodes the frozen state (while the tables change) and writes it: as
// one keyed blob, or incrementally.
//
// A full snapshot carries restored state this run does not declare as it
// was restored. State restored from an incremental checkpoint is a chain
// (a full section and deltas) that a full snapshot cannot fold into one
// section: without the state's codecs it cannot tell where a key or an
// entry ends. Such a snapshot is written in the incremental format with
// no base instead (see incremental.go): every key group of every declared
// state in full, and the undeclared chains copied, so it holds all of the
// state and references no earlier checkpoint's file.
func (b *Backend) Snapshot(id checkpoint.ID) (state.Async, error) {
	if b.incremental || b.pendingChains() {
		return b.snapshotIncremental(id), nil
	}
	encode := b.freeze()
	r := b.groups
	return func(w state.Writer) ([]checkpoint.Handle, error) {
		h, err := w.Write(checkpoint.Handle{Kind: state.KindKeyed, KeyGroups: r}, encode())
		return []checkpoint.Handle{h}, err
	}, nil
}

// pendingChains says whether state restored and not declared holds more
// than a full section in some key group.
func (b *Backend) pendingChains() bool {
	for _, groups := range b.pending {
		for _, ss := range groups {
			if len(ss) != 1 || !ss[0].full {
				return true
			}
		}
	}
	return false
}

// freeze freezes every table and returns the encoder of the frozen state
// as one keyed blob; the encoder may run on another goroutine while the
// tables change. State restored and not declared must be full sections
// (see pendingChains).
func (b *Backend) freeze() func() []byte {
	b.epoch++
	sections := make([]state.KeyedSection, 0, len(b.tables)+len(b.pending))
	first := b.groups.First
	for _, n := range slices.Sorted(maps.Keys(b.byName)) {
		f := b.byName[n].freeze()
		sections = append(sections, state.KeyedSection{Name: n, Append: func(dst []byte, g int) []byte { return f.appendFull(dst, g-first) }})
	}
	// Restored state of tables this run never registered is carried on, so
	// a job that stops using a state for a while does not lose it.
	for name, groups := range b.pending {
		frozen := maps.Clone(groups)
		sections = append(sections, state.KeyedSection{Name: name, Append: func(dst []byte, g int) []byte {
			if ss, ok := frozen[g-first]; ok {
				return append(dst, ss[0].data...)
			}
			return codec.AppendLen(dst, 0)
		}})
	}
	r := b.groups
	return func() []byte { return state.EncodeKeyed(r, sections) }
}

// NotifyComplete makes checkpoint id's chains those the next snapshots
// extend.
func (b *Backend) NotifyComplete(id checkpoint.ID) {
	if c, ok := b.taken[id]; ok {
		b.confirmed = c
	}
	for c := range b.taken {
		if c <= id {
			delete(b.taken, c)
		}
	}
}

func (b *Backend) NotifyAborted(id checkpoint.ID) { delete(b.taken, id) }
func (b *Backend) Close() error                   { return nil }

func (b *Backend) register(name string, t table) error {
	if _, dup := b.byName[name]; dup {
		return fmt.Errorf("state %q is declared twice", name)
	}
	b.byName[name] = t
	b.tables = append(b.tables, t)
	// A chain taken over (RestoreOwned) and not extended yet is these
	// sections, in order: applying them counts its deltas' keys, which the
	// restore could not (without them a restored chain that only grew,
	// deltas many times its full section, would be rewritten whole at the
	// first checkpoint after a failover).
	var claimed [][]link
	if b.confirmed != nil && len(b.taken) == 0 {
		claimed = b.confirmed.tables[name]
	}
	for g, ss := range b.pending[name] {
		for j, s := range ss {
			keys, err := applySection(t, g, s)
			if err != nil {
				return fmt.Errorf("restore state %q, key group %d: %w", name, b.groups.First+g, err)
			}
			if g < len(claimed) && j < len(claimed[g]) && claimed[g][j].keys < 0 {
				claimed[g][j].keys = keys
			}
		}
	}
	delete(b.pending, name)
	return nil
}

// entryCodec is how a table encodes its entries and keys, and which of its
// entries changed.
type entryCodec[K comparable, E any] struct {
	appendEntry func(dst []byte, k K, e E) []byte
	appendKey   func(dst []byte, k K) []byte
	decodeKey   func(src []byte) (K, int, error)
	// epochOf is the epoch an entry was last written in.
	epochOf func(E) uint64
	// keyOf is the table's own copy of key k of entry e (see owner).
	keyOf func(k K, e E) K
}

// cow is the copy-on-write bookkeeping of one table: a map per key group and
// whether a snapshot still reads it; and, for incremental snapshots, what
// changed when.
type cow[K comparable, E any] struct {
	b        *Backend
	groups   []map[K]E
	shared   []bool
	modified []uint64 // per group: the epoch of its latest write
	cleared  []uint64 // per group: the epoch of its latest Clear (0: none)
	// deleted holds per group, if incremental, the keys deleted since the
	// newest completed checkpoint (at least), with the epoch of their
	// deletion; nil when none.
	deleted []map[K]uint64
	// written holds per group, if incremental, the keys written since the
	// newest completed checkpoint (at least), in order, a key once per
	// epoch it was written in; nil when none. A delta walks these, not the
	// group, unless they were dropped since its base: untracked is per
	// group the newest epoch whose writes are not all recorded (0: none).
	// Records are dropped when they outgrow a quarter of the group (and
	// maxUntracked); for a group that changes that much a delta walks it.
	written   [][]wrote[K]
	untracked []uint64
	ec        entryCodec[K, E]
}

// maxUntracked is the fewest written keys a group records before it drops
// them for outgrowing a quarter of the group.
const maxUntracked = 64

// wrote records that key's entry was made in epoch.
type wrote[K comparable] struct {
	key   K
	epoch uint64
}

func newCow[K comparable, E any](b *Backend, ec entryCodec[K, E]) cow[K, E] {
	n := b.groups.Len()
	c := cow[K, E]{b: b, groups: make([]map[K]E, n), shared: make([]bool, n),
		modified: make([]uint64, n), cleared: make([]uint64, n), deleted: make([]map[K]uint64, n), written: make([][]wrote[K], n), untracked: make([]uint64, n), ec: ec}
	for i := range c.groups {
		c.groups[i] = map[K]E{}
	}
	return c
}

// read is the current group's map, for reading only.
func (c *cow[K, E]) read() map[K]E { return c.groups[c.b.current] }

// write is the current group's map, cloned first if a snapshot reads it.
func (c *cow[K, E]) write() map[K]E {
	g := c.b.current
	if c.shared[g] {
		c.groups[g] = maps.Clone(c.groups[g])
		c.shared[g] = false
		if len(c.deleted[g]) > 0 {
			c.deleted[g] = pruned(c.deleted[g], c.b.confirmedEpoch())
		}
		if len(c.written[g]) > 0 {
			c.written[g] = c.prunedWrites(g)
		}
	}
	c.modified[g] = c.b.epoch
	return c.groups[g]
}

// delete removes k from the current group, copying the group first only if
// k is there.
func (c *cow[K, E]) delete(k K) {
	if e, ok := c.read()[k]; ok {
		delete(c.write(), k)
		if c.b.incremental {
			c.noteDeleted(c.ec.keyOf(k, e))
		}
	}
}

// noteDeleted records the deletion of k (the table's own copy) from the
// current group, which write made private.
func (c *cow[K, E]) noteDeleted(k K) {
	g := c.b.current
	if c.deleted[g] == nil {
		c.deleted[g] = map[K]uint64{}
	}
	c.deleted[g][k] = c.b.epoch
}

// noteWritten records that k (the table's own copy) was written in the
// current group, which write made private, in this epoch: every write of
// an entry of this epoch calls it once, when it makes the entry.
func (c *cow[K, E]) noteWritten(k K) {
	g := c.b.current
	if !c.b.incremental || c.untracked[g] == c.b.epoch {
		return
	}
	ws := append(c.written[g], wrote[K]{key: k, epoch: c.b.epoch})
	if len(ws) > len(c.groups[g])/4+maxUntracked {
		ws, c.untracked[g] = nil, c.b.epoch
	}
	c.written[g] = ws
}

// prunedWrites is group g's written keys without those a delta never
// needs again: of the newest completed checkpoint's epoch and before, a
// prefix (records are appended in epoch order). NB: not a copy. A snapshot
// reads its record only up to the length it froze, and records are only
// appended, beyond it.
func (c *cow[K, E]) prunedWrites(g int) []wrote[K] {
	ws := c.written[g]
	cut, _ := slices.BinarySearchFunc(ws, c.b.confirmedEpoch()+1, func(w wrote[K], epoch uint64) int { return cmp.Compare(w.epoch, epoch) })
	if cut == len(ws) {
		return nil
	}
	return ws[cut:]
}

// clear empties group g (index), which a snapshot may still read.
func (c *cow[K, E]) clear(g int) {
	c.groups[g], c.shared[g], c.deleted[g], c.written[g] = map[K]E{}, false, nil, nil
	c.modified[g], c.cleared[g] = c.b.epoch, c.b.epoch
}

func (c *cow[K, E]) freeze() frozen {
	f := &frozenCow[K, E]{ec: &c.ec, groups: slices.Clone(c.groups), deleted: slices.Clone(c.deleted), written: slices.Clone(c.written), untracked: slices.Clone(c.untracked),
		modified: slices.Clone(c.modified), cleared: slices.Clone(c.cleared)}
	for i := range c.shared {
		c.shared[i] = true
	}
	return f
}

func (c *cow[K, E]) deleteEncoded(g int, src []byte) (int, error) {
	k, n, err := c.ec.decodeKey(src)
	if err == nil {
		delete(c.groups[g], k)
	}
	return n, err
}

func restoreEntries(entries []byte, decode func([]byte) (int, error)) error {
	n, k, err := codec.ReadLen(entries)
	if err != nil {
		return err
	}
	entries = entries[k:]
	for range n {
		used, err := decode(entries)
		if err != nil {
			return err
		}
		entries = entries[used:]
	}
	if len(entries) != 0 {
		return fmt.Errorf("%d bytes after the last entry", len(entries))
	}
	return nil
}

// keyAndLen decodes an entry's key and the count of elements that follow it
// (a list's values, a map's entries).
func keyAndLen[K any](kc codec.Codec[K], src []byte) (k K, n, used int, err error) {
	k, used, err = kc.Decode(src)
	if err != nil {
		return k, 0, 0, err
	}
	n, k2, err := codec.ReadLen(src[used:])
	return k, n, used + k2, err
}

// Value is keyed state holding one value per key. A Put of the key the
// last Get found writes in place, so a read-modify-write costs one map
// lookup; an entry a snapshot may still read (of an earlier epoch) is
// replaced instead.
type Value[K comparable, V any] struct {
	cow[K, *valueEntry[K, V]]
	keys owner[K]
	vals values[V]
	kc   codec.Codec[K]
	vc   codec.Codec[V]
	// copyV copies a value a snapshot may still read before Get gives it
	// out (codec.Copier); nil for values nothing can change in place.
	copyV func(V) V
	// storing holds a value being stored while its strings are owned (in
	// the table's memory: a local would escape, an allocation a call);
	// zero between calls.
	storing V
	// lastKey's entry is last, as the latest Get found it (nil: none).
	// lastKey is the caller's string, compared cheaply with the next
	// Put's (often the same string).
	// lastGroup is the key group it was found in: keys equal under ==
	// may encode apart, into other groups (floats 0 and -0).
	lastKey   K
	last      *valueEntry[K, V]
	lastGroup int
}

type valueEntry[K comparable, V any] struct {
	v     V
	epoch uint64 // the backend epoch it was written in; older ones are shared
	key   K      // the table's own copy of the key (see owner)
}

// NewValue registers value state name.
func NewValue[K comparable, V any](b *Backend, name string, kc codec.Codec[K], vc codec.Codec[V]) (*Value[K, V], error) {
	t := &Value[K, V]{keys: ownerOf[K](), vals: valuesOf[V](), kc: kc, vc: vc, copyV: codec.Copier(vc)}
	t.cow = newCow(b, entryCodec[K, *valueEntry[K, V]]{
		appendEntry: func(dst []byte, k K, e *valueEntry[K, V]) []byte { return vc.Append(kc.Append(dst, k), e.v) },
		appendKey:   kc.Append,
		decodeKey:   kc.Decode,
		epochOf:     func(e *valueEntry[K, V]) uint64 { return e.epoch },
		keyOf:       func(_ K, e *valueEntry[K, V]) K { return e.key },
	})
	return t, b.register(name, t)
}

func (t *Value[K, V]) Get(k K) (V, bool) {
	e, ok := t.read()[k]
	if ok && t.copyV != nil && e.epoch != t.b.epoch {
		// The caller may change what it gets in place: a copy of its own.
		old := e
		e = &valueEntry[K, V]{key: old.key, v: t.copyV(old.v), epoch: t.b.epoch}
		t.write()[e.key] = e
		t.noteWritten(e.key)
	}
	t.lastKey, t.last, t.lastGroup = k, e, t.b.current
	if !ok {
		var zero V
		return zero, false
	}
	return e.v, true
}

func (t *Value[K, V]) Put(k K, v V) {
	e := t.last
	if e == nil || t.lastKey != k || t.lastGroup != t.b.current {
		e = t.read()[k]
	}
	switch {
	case e == nil:
		e = &valueEntry[K, V]{key: t.keys.own(k), v: v, epoch: t.b.epoch}
		t.vals.own(&e.v, nil)
		t.write()[e.key] = e
		t.noteWritten(e.key)
	case e.epoch == t.b.epoch && t.vals.walk == nil:
		e.v = v
	case e.epoch == t.b.epoch:
		t.storing = v
		t.vals.own(&t.storing, &e.v)
		e.v = t.storing
		var zero V
		t.storing = zero
	default:
		old := e
		e = &valueEntry[K, V]{key: e.key, v: v, epoch: t.b.epoch}
		t.vals.own(&e.v, &old.v)
		t.write()[e.key] = e
		t.noteWritten(e.key)
	}
	t.lastKey, t.last, t.lastGroup = k, e, t.b.current
}

func (t *Value[K, V]) Delete(k K) {
	t.last = nil
	t.delete(k)
}

// put stores a restored entry as of epoch 0, which no snapshot after the
// restore takes for a change.
func (t *Value[K, V]) put(g int, src []byte) (int, error) {
	t.last = nil
	k, n1, err := t.kc.Decode(src)
	if err != nil {
		return 0, err
	}
	v, n2, err := t.vc.Decode(src[n1:])
	if err != nil {
		return 0, err
	}
	t.groups[g][k] = &valueEntry[K, V]{key: k, v: v}
	return n1 + n2, nil
}

func (t *Value[K, V]) deleteEncoded(g int, src []byte) (int, error) {
	t.last = nil
	return t.cow.deleteEncoded(g, src)
}

// List is keyed state holding a list per key.
type List[K comparable, V any] struct {
	cow[K, *listEntry[K, V]]
	keys owner[K]
	vals values[V]   // of an element Add appends
	all  values[[]V] // of a list Update stores
	kc   codec.Codec[K]
	vc   codec.Codec[V]
}

type listEntry[K comparable, V any] struct {
	key   K // the table's own copy of the key (see owner)
	vs    []V
	epoch uint64 // the backend epoch it was written in; older ones are shared
}

// NewList registers list state name.
func NewList[K comparable, V any](b *Backend, name string, kc codec.Codec[K], vc codec.Codec[V]) (*List[K, V], error) {
	t := &List[K, V]{keys: ownerOf[K](), vals: valuesOf[V](), all: valuesOf[[]V](), kc: kc, vc: vc}
	t.cow = newCow(b, entryCodec[K, *listEntry[K, V]]{
		appendEntry: func(dst []byte, k K, e *listEntry[K, V]) []byte {
			dst = codec.AppendLen(kc.Append(dst, k), len(e.vs))
			for _, v := range e.vs {
				dst = vc.Append(dst, v)
			}
			return dst
		},
		appendKey: kc.Append,
		decodeKey: kc.Decode,
		epochOf:   func(e *listEntry[K, V]) uint64 { return e.epoch },
		keyOf:     func(_ K, e *listEntry[K, V]) K { return e.key },
	})
	return t, b.register(name, t)
}

// Get returns k's list; the caller must not modify it.
func (t *List[K, V]) Get(k K) []V {
	if e := t.read()[k]; e != nil {
		return e.vs
	}
	return nil
}

// All streams k's list.
func (t *List[K, V]) All(k K) iter.Seq[V] { return slices.Values(t.Get(k)) }

// Add appends v to k's list. NB: append may write into spare capacity of an
// array a frozen snapshot shares, but only beyond the frozen length, which
// the snapshot never reads.
func (t *List[K, V]) Add(k K, v V) {
	m := t.write()
	e := m[k]
	switch {
	case e == nil:
		k = t.keys.own(k)
		e = &listEntry[K, V]{key: k, vs: []V{v}, epoch: t.b.epoch}
		m[k] = e
		t.noteWritten(k)
	case e.epoch == t.b.epoch:
		e.vs = append(e.vs, v)
	default:
		e = &listEntry[K, V]{key: e.key, vs: append(e.vs, v), epoch: t.b.epoch}
		m[e.key] = e
		t.noteWritten(e.key)
	}
	t.vals.own(&e.vs[len(e.vs)-1], nil)
}

// Update replaces k's list.
func (t *List[K, V]) Update(k K, vs []V) {
	if len(vs) == 0 {
		t.Delete(k)
		return
	}
	m := t.write()
	e := &listEntry[K, V]{key: k, vs: slices.Clip(slices.Clone(vs)), epoch: t.b.epoch}
	old := m[k]
	if old != nil {
		e.key = old.key
		if t.all.walk != nil {
			// A list trimmed of its oldest elements (a join's rows past
			// their time to live) lines up with the old list's tail.
			prev := old.vs[max(0, len(old.vs)-len(e.vs)):]
			t.all.own(&e.vs, &prev)
		}
	} else {
		e.key = t.keys.own(k)
		t.all.own(&e.vs, nil)
	}
	m[e.key] = e
	if old == nil || old.epoch != t.b.epoch {
		t.noteWritten(e.key)
	}
}

func (t *List[K, V]) Delete(k K) { t.delete(k) }

func (t *List[K, V]) put(g int, src []byte) (int, error) {
	k, n, used, err := keyAndLen(t.kc, src)
	if err != nil {
		return 0, err
	}
	vs := make([]V, 0, min(n, len(src)))
	for range n {
		v, k3, err := t.vc.Decode(src[used:])
		if err != nil {
			return 0, err
		}
		vs = append(vs, v)
		used += k3
	}
	t.groups[g][k] = &listEntry[K, V]{key: k, vs: vs}
	return used, nil
}

// Map is keyed state holding a map per key.
type Map[K, UK comparable, V any] struct {
	cow[K, *inner[K, UK, V]]
	keys     owner[K]
	userKeys owner[UK]
	vals     values[V]
	kc       codec.Codec[K]
	ukc      codec.Codec[UK]
	vc       codec.Codec[V]
	// copyV is Value.copyV: a key's inner map copied for a write copies
	// its values too.
	copyV func(V) V
	// storing and replaced hold a value being stored and the one it
	// replaces while its strings are owned (see Value.storing); zero
	// between calls.
	storing, replaced V
}

type inner[K, UK comparable, V any] struct {
	key   K // the table's own copy of the key (see owner)
	m     map[UK]mapEntry[UK, V]
	epoch uint64 // the backend epoch it was created in; older ones are shared
}

type mapEntry[UK comparable, V any] struct {
	uk UK // the table's own copy of the user key
	v  V
}

// NewMap registers map state name.
func NewMap[K, UK comparable, V any](b *Backend, name string, kc codec.Codec[K], ukc codec.Codec[UK], vc codec.Codec[V]) (*Map[K, UK, V], error) {
	t := &Map[K, UK, V]{keys: ownerOf[K](), userKeys: ownerOf[UK](), vals: valuesOf[V](), kc: kc, ukc: ukc, vc: vc, copyV: codec.Copier(vc)}
	t.cow = newCow(b, entryCodec[K, *inner[K, UK, V]]{
		appendEntry: func(dst []byte, k K, in *inner[K, UK, V]) []byte {
			dst = codec.AppendLen(kc.Append(dst, k), len(in.m))
			for uk, e := range in.m {
				dst = vc.Append(ukc.Append(dst, uk), e.v)
			}
			return dst
		},
		appendKey: kc.Append,
		decodeKey: kc.Decode,
		epochOf:   func(in *inner[K, UK, V]) uint64 { return in.epoch },
		keyOf:     func(_ K, in *inner[K, UK, V]) K { return in.key },
	})
	return t, b.register(name, t)
}

func (t *Map[K, UK, V]) Get(k K, uk UK) (V, bool) {
	in := t.read()[k]
	if in == nil {
		var v V
		return v, false
	}
	e, ok := in.m[uk]
	if ok && t.copyV != nil && in.epoch != t.b.epoch {
		// The caller may change what it gets in place: copies of its own.
		e = t.writable(k).m[uk]
	}
	return e.v, ok
}

// All streams k's entries; entries may be removed meanwhile (a removal
// copies the map first if a snapshot or this iteration may read it).
func (t *Map[K, UK, V]) All(k K) iter.Seq2[UK, V] {
	in := t.read()[k]
	if in != nil && t.copyV != nil && in.epoch != t.b.epoch {
		in = t.writable(k) // as Get
	}
	return func(yield func(UK, V) bool) {
		if in == nil {
			return
		}
		for uk, e := range in.m {
			if !yield(uk, e.v) {
				return
			}
		}
	}
}

func (t *Map[K, UK, V]) Put(k K, uk UK, v V) {
	in := t.writable(k)
	if t.userKeys.clone == nil && t.vals.walk == nil {
		in.m[uk] = mapEntry[UK, V]{uk: uk, v: v}
		return
	}
	e, ok := in.m[uk]
	if t.userKeys.clone != nil { // keep the copy already there, or copy
		if ok {
			uk = e.uk
		} else {
			uk = t.userKeys.clone(uk)
		}
	}
	if t.vals.walk != nil {
		t.storing, t.replaced = v, e.v
		if ok {
			t.vals.own(&t.storing, &t.replaced)
		} else {
			t.vals.own(&t.storing, nil)
		}
		var zero V
		v, t.storing, t.replaced = t.storing, zero, zero
	}
	in.m[uk] = mapEntry[UK, V]{uk: uk, v: v}
}

func (t *Map[K, UK, V]) Remove(k K, uk UK) {
	in := t.read()[k]
	if in == nil {
		return
	}
	if _, ok := in.m[uk]; !ok {
		return
	}
	w := t.writable(k)
	delete(w.m, uk)
	if len(w.m) == 0 {
		t.delete(k)
	}
}

func (t *Map[K, UK, V]) Delete(k K) { t.delete(k) }

// writable returns k's inner map, cloned if a snapshot may read it.
func (t *Map[K, UK, V]) writable(k K) *inner[K, UK, V] {
	m := t.write()
	in := m[k]
	switch {
	case in == nil:
		in = &inner[K, UK, V]{key: t.keys.own(k), m: map[UK]mapEntry[UK, V]{}, epoch: t.b.epoch}
		m[in.key] = in
		t.noteWritten(in.key)
	case in.epoch != t.b.epoch:
		in = &inner[K, UK, V]{key: in.key, m: maps.Clone(in.m), epoch: t.b.epoch}
		if t.copyV != nil {
			for uk, e := range in.m {
				in.m[uk] = mapEntry[UK, V]{uk: e.uk, v: t.copyV(e.v)}
			}
		}
		m[in.key] = in
		t.noteWritten(in.key)
	}
	return in
}

func (t *Map[K, UK, V]) put(g int, src []byte) (int, error) {
	k, n, used, err := keyAndLen(t.kc, src)
	if err != nil {
		return 0, err
	}
	in := &inner[K, UK, V]{key: k, m: make(map[UK]mapEntry[UK, V], min(n, len(src)))}
	for range n {
		uk, a, err := t.ukc.Decode(src[used:])
		if err != nil {
			return 0, err
		}
		v, b, err := t.vc.Decode(src[used+a:])
		if err != nil {
			return 0, err
		}
		in.m[uk] = mapEntry[UK, V]{uk: uk, v: v}
		used += a + b
	}
	t.groups[g][k] = in
	return used, nil
}

// Timers are processing-time timers per key; they are keyed state too and
// are checkpointed with it.
type Timers[K comparable] struct {
	cow[timer[K], uint64] // a timer's epoch
	keys                  owner[K]
	kc                    codec.Codec[K]
	queue                 timerQueue[K]
}

type timer[K comparable] struct {
	atMillis int64
	key      K
}

type queued[K comparable] struct {
	timer[K]
	group int // index within the backend's range
}

type timerQueue[K comparable] []queued[K]

func (q timerQueue[K]) Len() int           { return len(q) }
func (q timerQueue[K]) Less(i, j int) bool { return q[i].atMillis < q[j].atMillis }
func (q timerQueue[K]) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *timerQueue[K]) Push(x any)        { *q = append(*q, x.(queued[K])) }
func (q *timerQueue[K]) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// NewTimers registers a timer table named name.
func NewTimers[K comparable](b *Backend, name string, kc codec.Codec[K]) (*Timers[K], error) {
	t := &Timers[K]{keys: ownerOf[K](), kc: kc}
	appendKey := func(dst []byte, tm timer[K]) []byte { return kc.Append(binary.AppendVarint(dst, tm.atMillis), tm.key) }
	t.cow = newCow(b, entryCodec[timer[K], uint64]{
		appendEntry: func(dst []byte, tm timer[K], _ uint64) []byte { return appendKey(dst, tm) },
		appendKey:   appendKey,
		decodeKey:   t.decodeTimer,
		epochOf:     func(epoch uint64) uint64 { return epoch },
		keyOf:       func(tm timer[K], _ uint64) timer[K] { tm.key = t.keys.own(tm.key); return tm },
	})
	return t, b.register(name, t)
}

// Register sets a timer for key k at time at (millisecond precision); a
// second timer for the same key and time is one timer.
func (t *Timers[K]) Register(k K, at time.Time) {
	tm := timer[K]{atMillis: at.UnixMilli(), key: k}
	if _, ok := t.read()[tm]; ok {
		return
	}
	tm.key = t.keys.own(k)
	t.write()[tm] = t.b.epoch
	t.noteWritten(tm)
	heap.Push(&t.queue, queued[K]{timer: tm, group: t.b.current})
}

// Delete removes key k's timer at time at, if any.
func (t *Timers[K]) Delete(k K, at time.Time) {
	t.delete(timer[K]{atMillis: at.UnixMilli(), key: k}) // its queue entry is dropped when it surfaces
}

// Clear removes every timer.
func (t *Timers[K]) Clear() {
	for g := range t.groups {
		if len(t.groups[g]) > 0 {
			t.clear(g) // a snapshot may still read the old map
		}
	}
	t.queue = nil
}

// Next is the earliest timer.
func (t *Timers[K]) Next() (time.Time, bool) {
	for len(t.queue) > 0 {
		q := t.queue[0]
		if _, live := t.groups[q.group][q.timer]; live {
			return time.UnixMilli(q.atMillis), true
		}
		heap.Pop(&t.queue)
	}
	return time.Time{}, false
}

// FireUpTo removes every timer at or before limit (milliseconds since the
// Unix epoch), earliest first, and calls fire for each with its key's
// group current. A timer registered by fire at or before limit fires too.
func (t *Timers[K]) FireUpTo(limit int64, fire func(k K, at time.Time) error) error {
	for len(t.queue) > 0 && t.queue[0].atMillis <= limit {
		q := heap.Pop(&t.queue).(queued[K])
		if _, live := t.groups[q.group][q.timer]; !live {
			continue
		}
		t.b.current = q.group
		delete(t.write(), q.timer)
		if t.b.incremental {
			t.noteDeleted(q.timer)
		}
		if err := fire(q.key, time.UnixMilli(q.atMillis)); err != nil {
			return err
		}
	}
	return nil
}

func (t *Timers[K]) decodeTimer(src []byte) (timer[K], int, error) {
	at, n1 := binary.Varint(src)
	if n1 <= 0 {
		return timer[K]{}, 0, codec.ErrShort
	}
	k, n2, err := t.kc.Decode(src[n1:])
	return timer[K]{atMillis: at, key: k}, n1 + n2, err
}

// put restores a timer; a queued timer a later delta deletes is dropped
// when it surfaces, as after Delete.
func (t *Timers[K]) put(g int, src []byte) (int, error) {
	tm, n, err := t.decodeTimer(src)
	if err != nil {
		return 0, err
	}
	t.groups[g][tm] = 0
	heap.Push(&t.queue, queued[K]{timer: tm, group: g})
	return n, nil
}
