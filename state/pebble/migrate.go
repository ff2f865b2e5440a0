package pebble

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/state/heap"
)

// A checkpoint of the heap backend restored here is migrated: its keyed
// state lands in the heap backend that keeps the timers (as state no table
// declared), and a table declared with a state's name moves that state
// into the database. The heap backend decodes it with the table's codecs
// (full sections and incremental chains alike), the table writes every
// entry, and the heap backend lets it go, so snapshots hold it once, in
// this backend's format. A state no table declares stays on the heap and
// is carried on by every snapshot, as on the heap backend.
//
// Only a table new to the database migrates. A database that already has
// the table wrote it after the state was restored on the heap (by a
// version before migration, which left the heap state unread): its data
// is newer, and the heap state stays carried on, unread.
//
// NB: while a state migrates, the subtask's part of it is decoded on the
// heap whole, once.

func migrateValue[K comparable, V any](t *Value[K, V], name string) error {
	if !t.fromHeap {
		return nil
	}
	h, err := heap.NewValue(t.b.timers, name, t.kc, t.vc)
	return t.migrate(name, err, func(w *batchWriter) error {
		return h.Each(func(g int, k K, v V) error {
			t.val = t.vc.Append(t.val[:0], v)
			return w.set(prefixAt(&t.table, g, t.kc, k), t.val)
		})
	})
}

func migrateList[K comparable, V any](t *List[K, V], name string) error {
	if !t.fromHeap {
		return nil
	}
	h, err := heap.NewList(t.b.timers, name, t.kc, t.vc)
	return t.migrate(name, err, func(w *batchWriter) error {
		return h.Each(func(g int, k K, vs []V) error {
			t.val = t.val[:0]
			for _, v := range vs {
				t.val = t.appendElem(t.val, v)
			}
			return w.set(prefixAt(&t.table, g, t.kc, k), t.val)
		})
	})
}

// migrateListKeys rewrites list table name of a database written before
// lists took one key each: a list was an element per key, the list's key
// followed by a sequence number (8 bytes, big-endian, in the order of the
// appends), the element's bytes the value. Each such run of keys becomes
// one key whose value is the elements, length-prefixed, in that order.
// With merged (the table's kind is kindOldList: a rescale merged databases
// of both formats), a key that is a whole list already stays. A key of
// another shape, or an element that does not decode, is state of another
// kind (a database before kinds were recorded does not say which).
func migrateListKeys[K comparable, V any](l *List[K, V], name string, merged bool) error {
	t := &l.table
	w := newBatchWriter(t.b.db)
	var list, elems []byte // the list being gathered, and its elements
	end := func() error {
		if list == nil {
			return nil
		}
		err := w.set(list, elems)
		list, elems = nil, elems[:0]
		return err
	}
	notList := func(why string) error {
		return fmt.Errorf("pebble state backend: state %q in the checkpoint is not list state (%s): was it value or map state? declare it as it was, or under another name: %w", name, why, checkpoint.ErrMismatch)
	}
	// One iterator over the subtask's key groups, seeking past the other
	// tables' keys and the empty groups: the cost is the table's keys, not
	// the key groups (32,768 at most).
	kg := t.b.scope.KeyGroups
	it, err := t.b.db.NewIter(&pebble.IterOptions{LowerBound: groupKey(kg.First), UpperBound: groupKey(kg.Last + 1)})
	if err != nil {
		return err
	}
	defer it.Close()
	at := func(g int) []byte { return binary.BigEndian.AppendUint16(groupKey(g), t.id) }
	for ok := it.SeekGE(at(kg.First)); ok; {
		k := it.Key()
		g, id := int(binary.BigEndian.Uint16(k)), binary.BigEndian.Uint16(k[2:])
		switch {
		case id < t.id:
			ok = it.SeekGE(at(g))
			continue
		case id > t.id:
			if err := end(); err != nil {
				return err
			}
			ok = g < kg.Last && it.SeekGE(at(g+1))
			continue
		}
		n, width := binary.Uvarint(k[4:])
		if width <= 0 || uint64(len(k)-4-width) < n {
			return notList(fmt.Sprintf("a key of %d bytes that is no list's", len(k)))
		}
		head := 4 + width + int(n) // the list's key
		switch after := len(k) - head; {
		case after == 0 && merged:
			ok = it.Next()
			continue // one list already
		case after != 8:
			return notList(fmt.Sprintf("a key with %d bytes after the state's key, where a list's element had 8", after))
		}
		v := it.Value()
		if _, _, err := l.vc.Decode(v); err != nil {
			return notList(fmt.Sprintf("an element that does not decode: %v", err))
		}
		if list != nil && !bytes.Equal(list, k[:head]) {
			if err := end(); err != nil {
				return err
			}
		}
		if list == nil {
			list = slices.Clone(k[:head])
		}
		elems = append(binary.AppendUvarint(elems, uint64(len(v))), v...)
		if err := w.delete(k); err != nil {
			return err
		}
		ok = it.Next()
	}
	if err := it.Error(); err != nil {
		return err
	}
	if err := end(); err != nil {
		return err
	}
	if err := w.commit(); err != nil {
		return fmt.Errorf("pebble state backend: rewrite list state %q as a key per list: %w", name, err)
	}
	return nil
}

func migrateMap[K, UK comparable, V any](t *Map[K, UK, V], name string) error {
	if !t.fromHeap {
		return nil
	}
	h, err := heap.NewMap(t.b.timers, name, t.kc, t.ukc, t.vc)
	return t.migrate(name, err, func(w *batchWriter) error {
		return h.Each(func(g int, k K, uk UK, v V) error {
			t.val = t.vc.Append(t.val[:0], v)
			return w.set(t.entryAt(g, k, uk), t.val)
		})
	})
}

// migrate writes state name, which the heap backend decoded (or failed to,
// with declared), into the database with write, and releases it from the
// heap backend.
func (t *table) migrate(name string, declared error, write func(*batchWriter) error) error {
	defer t.b.timers.Release(name)
	err := declared
	if err == nil {
		w := newBatchWriter(t.b.db)
		if err = write(w); err == nil {
			err = w.commit()
		}
	}
	if err != nil {
		return fmt.Errorf("pebble state backend: move state %q of a heap backend's checkpoint into Pebble: %w", name, err)
	}
	return nil
}

// batchWriter writes keys to a database in batches of a few MiB.
type batchWriter struct {
	db    *pebble.DB
	batch *pebble.Batch
}

func newBatchWriter(db *pebble.DB) *batchWriter { return &batchWriter{db: db, batch: db.NewBatch()} }

func (w *batchWriter) set(key, value []byte) error { return w.next(w.batch.Set(key, value, nil)) }

func (w *batchWriter) delete(key []byte) error { return w.next(w.batch.Delete(key, nil)) }

// next commits the batch once it holds a few MiB.
func (w *batchWriter) next(err error) error {
	if err != nil {
		return err
	}
	if w.batch.Len() <= 4<<20 {
		return nil
	}
	if err := w.batch.Commit(pebble.NoSync); err != nil {
		return err
	}
	w.batch = w.db.NewBatch()
	return nil
}

func (w *batchWriter) commit() error { return w.batch.Commit(pebble.NoSync) }
