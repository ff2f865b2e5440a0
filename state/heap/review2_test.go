package heap

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"testing"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/keygroup"
)

// The model test, with encoders forced to counts below, equal to and above
// the key groups (128 in one subtask, about 43-64 at parallelism 2-3).
func TestReview2ModelWithEncoderCounts(t *testing.T) {
	saved := encoders
	defer func() { encoders = saved }()
	for _, n := range []int{1, 3, 127, 129} { // fewer and more encoders than the 128 key groups
		encoders = n
		for seed := range 3 {
			t.Run(fmt.Sprint("encoders", n, "seed", seed), func(t *testing.T) { runModel(t, uint64(seed)) })
		}
	}
}

// checkFiles: every shared file's handle checksum is the file's, and every
// link of the index lies inside its file.
func checkFiles(t *testing.T, b *Backend, hs []checkpoint.Handle, s *store) {
	t.Helper()
	for _, h := range hs {
		if h.Kind != KindData {
			continue
		}
		d := s.files[h.Path]
		if got := crc32.Checksum(d, castagnoli); got != h.CRC32C || int64(len(d)) != h.SizeBytes {
			t.Fatalf("%s: crc %08x size %d, handle %08x %d", h.Path, got, len(d), h.CRC32C, h.SizeBytes)
		}
	}
}

// Key-group ranges of one group, and few groups, at several encoder
// counts; pending (restored, undeclared) tables; tables with no changes.
func TestReview2FewGroupsPendingUnchanged(t *testing.T) {
	saved := encoders
	defer func() { encoders = saved }()
	for _, n := range []int{1, 2, 4, 16} {
		for _, r := range []keygroup.Range{{First: 5, Last: 5}, {First: 0, Last: 2}, {First: 125, Last: 127}} {
			encoders = n
			t.Run(fmt.Sprint(n, r), func(t *testing.T) {
				s := newStore()
				ts := openInc(t, r, nil, s)
				var keys []string
				m := newModel()
				for i := 0; len(keys) < 20 && i < 100000; i++ {
					k := fmt.Sprint("k", i)
					g := keygroup.Of(hasher.Hash(k), maxP)
					if !r.Contains(g) {
						continue
					}
					keys = append(keys, k)
					ts.b.SetGroup(g)
					ts.counts.Put(k, i)
					ts.lists.Add(k, "a")
					m.counts[k], m.lists[k] = i, []string{"a"}
				}
				hs := take(t, ts.b, 1, 0, s)
				checkFiles(t, ts.b, hs, s)
				ts.b.NotifyComplete(1)
				hs = take(t, ts.b, 2, 0, s) // nothing changed
				checkFiles(t, ts.b, hs, s)
				ts.b.NotifyComplete(2)
				k := keys[len(keys)-1]
				at(ts.b, k)
				ts.counts.Put(k, -1)
				m.counts[k] = -1
				hs = take(t, ts.b, 3, 0, s) // one delta
				checkFiles(t, ts.b, hs, s)
				ts.b.NotifyComplete(3)
				// Restored into a backend that declares nothing: pending
				// chains copied serially at the end of the file.
				b := NewIncremental(r)
				if err := b.Restore(hs, s.read); err != nil {
					t.Fatal(err)
				}
				hs = take(t, b, 4, 0, s)
				checkFiles(t, b, hs, s)
				b.NotifyComplete(4)
				// Declared again: one table changes, others stay pending.
				got := openInc(t, r, hs, s)
				at(got.b, keys[0])
				got.counts.Put(keys[0], 99)
				m.counts[keys[0]] = 99
				hs = take(t, got.b, 5, 0, s)
				checkFiles(t, got.b, hs, s)
				final := openInc(t, r, hs, s)
				for _, k := range keys {
					at(final.b, k)
					if v, _ := final.counts.Get(k); v != m.counts[k] {
						t.Fatalf("%s = %d, want %d", k, v, m.counts[k])
					}
					if l := final.lists.Get(k); len(l) != 1 {
						t.Fatalf("%s: list %v", k, l)
					}
				}
			})
		}
	}
}

type failingStore struct {
	*store
	after int // bytes read before the failure
}

func (f failingStore) WriteShared(h checkpoint.Handle, r io.Reader) (checkpoint.Handle, error) {
	io.CopyN(io.Discard, r, int64(f.after))
	return h, errors.New("storage failed midway")
}

// A snapshot whose shared write fails midway: an error, the next snapshot
// (after NotifyAborted) restores everything.
func TestReview2FailedWriteMidway(t *testing.T) {
	all := keygroup.Range{First: 0, Last: maxP - 1}
	s := newStore()
	ts := openInc(t, all, nil, s)
	fill(ts, 300, 1)
	take(t, ts.b, 1, 0, s)
	ts.b.NotifyComplete(1)
	fill(ts, 300, 2)
	a, _ := ts.b.Snapshot(2)
	if _, err := a(failingStore{s, 100}); err == nil {
		t.Fatal("no error")
	}
	ts.b.NotifyAborted(2)
	hs := take(t, ts.b, 3, 0, s)
	checkFiles(t, ts.b, hs, s)
	got := openInc(t, all, hs, s)
	for i := range 300 {
		k := at(got.b, fmt.Sprint("k", i))
		if v, _ := got.counts.Get(k); v != i+2 {
			t.Fatalf("%s = %d", k, v)
		}
	}
}

// Race: the encoders run while the task writes, deletes and clears
// (go test -race).
func TestReview2EncodersRaceTheTask(t *testing.T) {
	saved := encoders
	defer func() { encoders = saved }()
	encoders = 8
	all := keygroup.Range{First: 0, Last: maxP - 1}
	s := newStore()
	ts := openInc(t, all, nil, s)
	fill(ts, 500, 1)
	take(t, ts.b, 1, 0, s)
	ts.b.NotifyComplete(1)
	for round := 2; round < 6; round++ {
		for i := range 200 {
			k := at(ts.b, fmt.Sprint("k", i))
			ts.counts.Delete(k)
			ts.lists.Add(k, "x")
		}
		a, _ := ts.b.Snapshot(checkpoint.ID(round))
		var wg sync.WaitGroup
		var hs []checkpoint.Handle
		var err error
		wg.Go(func() { hs, err = a(s) })
		fill(ts, 500, round)
		for i := range 100 {
			k := at(ts.b, fmt.Sprint("k", i))
			ts.maps.Delete(k)
			ts.counts.Delete(k)
		}
		ts.timers.Clear()
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		checkFiles(t, ts.b, hs, s)
		ts.b.NotifyComplete(checkpoint.ID(round))
	}
}

// scribbling is checkpoint storage that clears what it is given once it
// has copied it, as a file system that damages writes may.
type scribbling struct{ *store }

type scribbler struct{ buf []byte }

func (s *scribbler) Write(p []byte) (int, error) {
	s.buf = append(s.buf, p...)
	clear(p)
	return len(p), nil
}

func (s scribbling) WriteShared(h checkpoint.Handle, r io.Reader) (checkpoint.Handle, error) {
	var w scribbler
	if _, err := io.Copy(&w, r); err != nil {
		return h, err
	}
	return s.store.WriteShared(h, bytes.NewReader(w.buf))
}

// A writer that changes the bytes it is given changes only that
// snapshot's buffers: the next snapshot's file still begins with its magic
// (the package's array was handed out once, and CI's damaging file system
// cleared it for every later snapshot of the process).
func TestSnapshotsSurviveAWriterThatChangesItsInput(t *testing.T) {
	s := newStore()
	all := keygroup.Range{First: 0, Last: maxP - 1}
	tb := openInc(t, all, nil, s)
	var hs []checkpoint.Handle
	for id := range checkpoint.ID(3) {
		tb.counts.Put(at(tb.b, fmt.Sprint("k", id)), int(id))
		async, err := tb.b.Snapshot(id + 1)
		if err != nil {
			t.Fatal(err)
		}
		if hs, err = async(scribbling{s}); err != nil {
			t.Fatal(err)
		}
		tb.b.NotifyComplete(id + 1)
	}
	got := openInc(t, all, hs, s)
	for id := range 3 {
		k := fmt.Sprint("k", id)
		if v, ok := got.counts.Get(at(got.b, k)); !ok || v != id {
			t.Fatalf("%s = %d, %v after the restore", k, v, ok)
		}
	}
}
