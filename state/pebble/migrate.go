package pebble

import (
	"encoding/binary"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

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
			for _, v := range vs {
				key := binary.BigEndian.AppendUint64(prefixAt(&t.table, g, t.kc, k), t.b.seq)
				t.b.seq++
				t.val = t.vc.Append(t.val[:0], v)
				if err := w.set(key, t.val); err != nil {
					return err
				}
			}
			return nil
		})
	})
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

func (w *batchWriter) set(key, value []byte) error {
	if err := w.batch.Set(key, value, nil); err != nil {
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
