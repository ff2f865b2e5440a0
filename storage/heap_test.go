package storage

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state/heap"
)

// heapJob is one subtask of operator "count" with incremental heap state,
// writing checkpoints to a storage, and the model of its state.
type heapJob struct {
	t      *testing.T
	b      *heap.Backend
	counts *heap.Value[string, int]
	model  map[string]int
	rng    *rand.Rand
}

var countKeys = keygroup.Range{First: 0, Last: 127}

func newHeapJob(t *testing.T, s Storage, restore []checkpoint.Handle, model map[string]int, seed uint64) *heapJob {
	t.Helper()
	b := heap.NewIncremental(countKeys)
	if restore != nil {
		// The storage is the job's own: new checkpoints may reference the
		// restored files.
		if err := b.RestoreOwned(restore, s.ReadState); err != nil {
			t.Fatal(err)
		}
	}
	counts, err := heap.NewValue(b, "counts", codec.For[string](), codec.For[int]())
	if err != nil {
		t.Fatal(err)
	}
	j := &heapJob{t: t, b: b, counts: counts, model: map[string]int{}, rng: rand.New(rand.NewPCG(seed, 23))}
	maps.Copy(j.model, model)
	for k, want := range model {
		j.at(k)
		if v, ok := counts.Get(k); !ok || v != want {
			t.Fatalf("restored %s = %d %v, want %d", k, v, ok, want)
		}
	}
	return j
}

var keyHasher = codec.NewHasher(codec.For[string]())

func (j *heapJob) at(k string) string {
	j.b.SetGroup(keygroup.Of(keyHasher.Hash(k), 128))
	return k
}

// change writes some keys, deletes others.
func (j *heapJob) change() {
	for range 50 {
		k := j.at(fmt.Sprint("k", j.rng.IntN(2000)))
		if j.rng.IntN(5) == 0 {
			j.counts.Delete(k)
			delete(j.model, k)
			continue
		}
		j.model[k]++
		j.counts.Put(k, j.model[k])
	}
}

type storeWriter struct {
	s  Storage
	id checkpoint.ID
}

func (w storeWriter) named(h checkpoint.Handle) checkpoint.Handle {
	h.Operator, h.Subtask, h.Parallelism = "count", 0, 1
	return h
}

func (w storeWriter) Write(h checkpoint.Handle, data []byte) (checkpoint.Handle, error) {
	return w.s.WriteState(w.id, w.named(h), data)
}

func (w storeWriter) WriteShared(h checkpoint.Handle, r io.Reader) (checkpoint.Handle, error) {
	return w.s.WriteShared(w.id, w.named(h), r)
}

// checkpoint takes checkpoint id and writes it; commit commits it.
func (j *heapJob) checkpoint(s Storage, id checkpoint.ID) ([]checkpoint.Handle, error) {
	if err := s.Reserve(id); err != nil {
		return nil, err
	}
	async, err := j.b.Snapshot(id)
	if err != nil {
		j.t.Fatal(err)
	}
	return async(storeWriter{s: s, id: id})
}

func commit(s Storage, id checkpoint.ID, hs []checkpoint.Handle) error {
	return s.Commit(&checkpoint.Metadata{Job: "job", ID: id, Triggered: t0, Operators: operators, Tasks: []checkpoint.TaskState{{Task: task, Handles: hs}}})
}

// TestHeapSharedFilesAreThoseReferenced: incremental heap checkpoints,
// some aborted, some taken while another is in flight, three retained:
// after every checkpoint the shared files on storage are exactly those
// the retained checkpoints reference, and the newest restores.
func TestHeapSharedFilesAreThoseReferenced(t *testing.T) {
	for name, open := range storages(t) {
		t.Run(name, func(t *testing.T) {
			s, shared := open()
			if _, err := s.Scan(); err != nil {
				t.Fatal(err)
			}
			j := newHeapJob(t, s, nil, nil, 1)
			var retained []checkpoint.ID
			var latest []checkpoint.Handle
			latestModel := map[string]int{}
			complete := func(id checkpoint.ID, hs []checkpoint.Handle, model map[string]int) {
				if err := commit(s, id, hs); err != nil {
					t.Fatal(err)
				}
				j.b.NotifyComplete(id)
				latest, latestModel = hs, model
				if retained = append(retained, id); len(retained) > 3 {
					if err := s.Discard(retained[0]); err != nil {
						t.Fatal(err)
					}
					retained = retained[1:]
				}
			}
			for id := checkpoint.ID(1); id <= 40; id++ {
				j.change()
				hs, err := j.checkpoint(s, id)
				if err != nil {
					t.Fatal(err)
				}
				model := maps.Clone(j.model)
				switch {
				case id%5 == 0: // aborted
					if err := s.Discard(id); err != nil {
						t.Fatal(err)
					}
					j.b.NotifyAborted(id)
				case id%7 == 0: // the next one is taken while this one is in flight
					j.change()
					id++
					hs2, err := j.checkpoint(s, id)
					if err != nil {
						t.Fatal(err)
					}
					complete(id-1, hs, model)
					complete(id, hs2, maps.Clone(j.model))
				default:
					complete(id, hs, model)
				}
				if got, want := shared(), referenced(t, s); !slices.Equal(got, want) {
					t.Fatalf("after checkpoint %d: shared files %v, referenced %v", id, got, want)
				}
			}
			newHeapJob(t, s, latest, latestModel, 2)
		})
	}
}

// TestHeapSharedFilesAfterACrash: a crash at every write of an
// incremental heap checkpoint, from its first shared file to its commit:
// after the restart (Scan, RemoveOrphans) the shared files are exactly
// those the completed checkpoints reference, the newest completed one
// restores, and the job checkpoints on.
func TestHeapSharedFilesAfterACrash(t *testing.T) {
	for crashAt := int32(0); ; crashAt++ {
		mem := vfs.NewCrashableMem()
		var n int32
		armed := false
		inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
			if armed && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
				if n++; n > crashAt {
					return errorfs.ErrInjected
				}
			}
			return nil
		})
		d, err := NewDir(errorfs.Wrap(mem, inj), "/ckpt", "job", 0)
		if err != nil {
			t.Fatal(err)
		}
		d.Scan()
		j := newHeapJob(t, d, nil, nil, 3)
		var latestModel map[string]int
		for id := checkpoint.ID(1); id <= 4; id++ {
			j.change()
			hs, err := j.checkpoint(d, id)
			if err != nil {
				t.Fatal(err)
			}
			if err := commit(d, id, hs); err != nil {
				t.Fatal(err)
			}
			j.b.NotifyComplete(id)
			latestModel = maps.Clone(j.model)
		}
		j.change()
		armed = true
		hs, err := j.checkpoint(d, 5)
		if err == nil {
			err = commit(d, 5, hs)
		}
		if err == nil {
			latestModel = maps.Clone(j.model)
		}

		after, _ := NewDir(mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0, RNG: rand.New(rand.NewPCG(uint64(crashAt), 5))}), "/ckpt", "job", 0)
		scan, serr := after.Scan()
		if serr != nil {
			t.Fatal(serr)
		}
		if err := after.RemoveOrphans(); err != nil {
			t.Fatal(err)
		}
		if got, want := dirShared(t, after), referenced(t, after); !slices.Equal(got, want) {
			t.Fatalf("crash at write %d of checkpoint 5: shared files %v, referenced %v", crashAt, got, want)
		}
		newest := scan.Completed[len(scan.Completed)-1]
		if err == nil && newest.ID != 5 || err != nil && newest.ID != 4 {
			t.Fatalf("crash at write %d (checkpoint 5: %v): the newest completed checkpoint is %d", crashAt, err, newest.ID)
		}
		restored := newHeapJob(t, after, newest.Tasks[0].Handles, latestModel, 4)
		for id := newest.ID + 1; id <= newest.ID+3; id++ {
			restored.change()
			hs, err := restored.checkpoint(after, id)
			if err != nil {
				t.Fatal(err)
			}
			if id == newest.ID+1 && !slices.ContainsFunc(hs, func(h checkpoint.Handle) bool { return sharedPaths(newest.Tasks[0].Handles)[h.Path] }) {
				t.Fatalf("crash at write %d: the first checkpoint after the restore of %d references none of its files", crashAt, newest.ID)
			}
			if err := commit(after, id, hs); err != nil {
				t.Fatal(err)
			}
			restored.b.NotifyComplete(id)
			if err := after.Discard(id - 3); err != nil {
				t.Fatal(err)
			}
			if got, want := dirShared(t, after), referenced(t, after); !slices.Equal(got, want) {
				t.Fatalf("crash at write %d, then checkpoint %d: shared files %v, referenced %v", crashAt, id, got, want)
			}
		}
		if err == nil {
			t.Logf("checkpoint 5 takes %d writes; crashed after each", crashAt)
			return
		}
	}
}

// TestHeapStaleBaseIsNeverCommitted: the sequence two late completion
// notices in a row make, one checkpoint at a time, retention 1. Key a
// changes in checkpoints 1 to 3. The notice that 3 completed comes after
// the backend took 4, which it built on 2; then 4 completes, 3 is
// discarded and the file 3 wrote goes at once: 4 does not reference it,
// and nothing is in flight. The notice of 4 comes late too: the backend
// builds 5 on 3, whose chain of a's key group ends in that file. Storage
// must refuse to commit 5, and 4 must restore. (With one late notice,
// n+1 built on n-1 makes the choices n made from n-1 and references no
// file n dropped.)
func TestHeapStaleBaseIsNeverCommitted(t *testing.T) {
	for name, open := range storages(t) {
		t.Run(name, func(t *testing.T) {
			s, _ := open()
			s.Scan()
			j := newHeapJob(t, s, nil, nil, 5)
			take := func(id checkpoint.ID) []checkpoint.Handle {
				if id <= 3 {
					j.model["a"] = int(id)
					j.counts.Put(j.at("a"), int(id))
				}
				hs, err := j.checkpoint(s, id)
				if err != nil {
					t.Fatal(err)
				}
				return hs
			}
			complete := func(id checkpoint.ID, hs []checkpoint.Handle) {
				if err := commit(s, id, hs); err != nil {
					t.Fatal(err)
				}
				if id > 1 {
					if err := s.Discard(id - 1); err != nil {
						t.Fatal(err)
					}
				}
			}
			for id := checkpoint.ID(1); id <= 2; id++ {
				complete(id, take(id))
				j.b.NotifyComplete(id)
			}
			three := take(3)
			complete(3, three)
			four := take(4) // built on 2: the notice of 3 is late
			model := maps.Clone(j.model)
			j.b.NotifyComplete(3)
			complete(4, four)
			var f3 string
			for _, h := range three {
				if h.File == "heap-3" {
					f3 = h.Path
				}
			}
			if f3 == "" || sharedPaths(four)[f3] {
				t.Fatalf("checkpoint 3 wrote %q, which 4 must not reference: %v", f3, four)
			}
			five := take(5) // built on 3: the notice of 4 is late
			err := commit(s, 5, five)
			if !errors.Is(err, ErrSharedGone) || !strings.Contains(err.Error(), "heap-3") {
				t.Fatalf("checkpoint 5, built on 3, which 4 subsumed: commit: %v, want ErrSharedGone naming heap-3", err)
			}
			newHeapJob(t, s, four, model, 6)
		})
	}
}

func sharedPaths(hs []checkpoint.Handle) map[string]bool {
	out := map[string]bool{}
	for _, h := range hs {
		if IsShared(h) {
			out[h.Path] = true
		}
	}
	return out
}
