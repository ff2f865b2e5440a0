package local_test

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/local"
	"github.com/weirstream/weir/storage"
)

var (
	modelSeeds = flag.Int("local.seeds", 80, "seeds TestLocalCopyAgainstAModel runs")
	modelFirst = flag.Int("local.first", 1, "the first seed TestLocalCopyAgainstAModel runs")
)

// piece is one piece of a checkpoint, with the bytes it holds.
type piece struct {
	h    checkpoint.Handle
	data []byte
}

// flight is a checkpoint of the running attempt not yet settled for the
// task: taken (its writer made), then written.
type flight struct {
	id      checkpoint.ID
	w       state.Writer
	remote  *failable
	base    []piece // the shared pieces of the checkpoint it builds on
	written bool
	failed  bool // a write to checkpoint storage failed: it cannot complete
	pieces  []piece
}

// failable is checkpoint storage whose next shared write fails half-way
// when fail is set.
type failable struct {
	writerOf
	fail bool
}

func (f *failable) WriteShared(h checkpoint.Handle, r io.Reader) (checkpoint.Handle, error) {
	if f.fail {
		f.fail = false
		io.CopyN(io.Discard, r, 3)
		return h, io.ErrUnexpectedEOF
	}
	return f.writerOf.WriteShared(h, r)
}

// modelRun drives one task's local copy through a seeded sequence of
// attempts, checkpoints, completions, aborts, restores and damage, beside
// a model of what its directory holds.
type modelRun struct {
	t    *testing.T
	rng  *rand.Rand
	r    *remote
	dir  string // the store's directory
	tmp  string // where "backend" files live
	s    *local.Store
	lt   *local.Task
	next checkpoint.ID
	// done are the checkpoints completed (at the coordinator), newest
	// last; building is the one the attempt builds on.
	done     []checkpoint.ID
	pieces   map[checkpoint.ID][]piece
	building checkpoint.ID
	flights  []*flight
	// late are checkpoints settled for the task (aborted, or subsumed by
	// a newer completion) before their writes ended or their notices came.
	late []*flight
	// The model of the task: what it keeps, what each unsettled
	// checkpoint holds and builds on, the newest it completed, and the
	// files of its directory (present) of which intact are unchanged.
	kept      map[string]bool
	pending   map[checkpoint.ID]map[string]bool
	bases     map[checkpoint.ID]map[string]bool
	completed checkpoint.ID
	aborted   map[checkpoint.ID]bool
	present   map[string]bool
	intact    map[string]bool
	// marker is the checkpoint the task's completion marker names (0:
	// none), which placement reads.
	marker  checkpoint.ID
	history []string
}

func (m *modelRun) logf(format string, args ...any) {
	m.history = append(m.history, fmt.Sprintf(format, args...))
}

// violation is a difference from the model, which runModel returns.
type violation struct{ err error }

func (m *modelRun) fatalf(format string, args ...any) {
	panic(violation{fmt.Errorf("%s\nafter:\n  %s", fmt.Sprintf(format, args...), strings.Join(m.history, "\n  "))})
}

func (m *modelRun) newAttempt() {
	m.lt = m.s.Task("job", "v", 0)
	m.kept, m.pending, m.bases = map[string]bool{}, map[checkpoint.ID]map[string]bool{}, map[checkpoint.ID]map[string]bool{}
	m.completed, m.aborted, m.flights, m.late = 0, map[checkpoint.ID]bool{}, nil, nil
}

func (m *modelRun) settled(id checkpoint.ID) bool { return id <= m.completed || m.aborted[id] }

// sweep is the model of the task's sweep.
func (m *modelRun) sweep() {
	holds := func(p string) bool {
		if m.kept[p] {
			return true
		}
		for _, ps := range m.pending {
			if ps[p] {
				return true
			}
		}
		for _, ps := range m.bases {
			if ps[p] {
				return true
			}
		}
		return false
	}
	for p := range m.present {
		if !holds(p) {
			delete(m.present, p)
			delete(m.intact, p)
		}
	}
}

func (m *modelRun) bytes() []byte {
	b := make([]byte, 1+m.rng.IntN(40))
	for i := range b {
		b[i] = byte('a' + m.rng.IntN(26))
	}
	return b
}

// take makes the writer of a new checkpoint (the snapshot's synchronous
// part).
func (m *modelRun) take() {
	id := m.next
	m.next++
	if err := m.r.Reserve(id); err != nil {
		m.t.Fatal(err)
	}
	f := &flight{id: id, remote: &failable{writerOf: m.r.writer(id)}}
	f.w = m.lt.Writer(id, f.remote)
	if m.building != 0 {
		for _, p := range m.pieces[m.building] {
			if storage.IsShared(p.h) {
				f.base = append(f.base, p)
			}
		}
	}
	base := map[string]bool{}
	for p := range m.kept {
		if storage.IsShared(checkpoint.Handle{Path: p}) {
			base[p] = true
		}
	}
	m.bases[id] = base
	m.flights = append(m.flights, f)
	m.logf("take %d (builds on %d)", id, m.building)
}

// write is a checkpoint's asynchronous part: new pieces, and shared pieces
// of the checkpoint it builds on reused.
func (m *modelRun) write(f *flight) {
	place := func(p piece) {
		if !m.settled(f.id) {
			m.present[p.h.Path], m.intact[p.h.Path] = true, true
			m.pendingOf(f.id)[p.h.Path] = true
		}
		f.pieces = append(f.pieces, p)
	}
	for i := range m.rng.IntN(3) {
		data := m.bytes()
		h, err := f.w.Write(checkpoint.Handle{Operator: fmt.Sprint("op", i), Kind: "keyed"}, data)
		if err != nil {
			m.t.Fatal(err)
		}
		place(piece{h, data})
	}
	for i := range m.rng.IntN(3) {
		data := m.bytes()
		f.remote.fail = m.rng.IntN(10) == 0
		var r io.Reader = bytes.NewReader(data)
		if m.rng.IntN(2) == 0 { // an immutable file, linked
			path := filepath.Join(m.tmp, fmt.Sprintf("up-%d-%d", f.id, i))
			if err := os.WriteFile(path, data, 0o644); err != nil {
				m.t.Fatal(err)
			}
			r = immutable{bytes.NewReader(data), path}
		}
		h, err := f.w.WriteShared(checkpoint.Handle{Operator: "op", Kind: "data", File: fmt.Sprint(i, ".sst")}, r)
		if err != nil {
			// The snapshot fails (the task declines): it says nothing of
			// what it wrote, and is aborted later.
			f.written, f.failed = true, true
			m.logf("write %d: a shared write to checkpoint storage failed", f.id)
			return
		}
		place(piece{h, data})
	}
	for _, p := range f.base {
		if m.rng.IntN(3) > 0 {
			f.pieces = append(f.pieces, p)
		}
	}
	hs := make([]checkpoint.Handle, len(f.pieces))
	for i, p := range f.pieces {
		hs[i] = p.h
	}
	m.lt.Referenced(f.id, hs)
	if !m.settled(f.id) {
		p := m.pendingOf(f.id) // even with no pieces: its completion keeps nothing
		for _, h := range hs {
			p[h.Path] = true
		}
	}
	if err := m.lt.WriteErr(); err != nil {
		m.t.Fatal(err)
	}
	f.written = true
	m.logf("write %d: %d pieces", f.id, len(f.pieces))
}

func (m *modelRun) pendingOf(id checkpoint.ID) map[string]bool {
	if m.pending[id] == nil {
		m.pending[id] = map[string]bool{}
	}
	return m.pending[id]
}

// complete completes a written checkpoint at the coordinator, and tells
// the task (or not: a notice lost, as when the attempt ends first).
func (m *modelRun) complete(f *flight) {
	m.done = append(m.done, f.id)
	m.pieces[f.id] = f.pieces
	m.flights = slices.DeleteFunc(m.flights, func(g *flight) bool {
		if g.id < f.id {
			m.late = append(m.late, g) // subsumed
		}
		return g.id <= f.id
	})
	if m.rng.IntN(6) == 0 {
		m.logf("complete %d (the task is not told)", f.id)
		return
	}
	m.building = f.id
	m.lt.Complete(f.id)
	if f.id > m.completed {
		p, ok := m.pending[f.id]
		if ok {
			m.kept = p
		}
		m.marker = 0
		if ok && len(p) > 0 {
			m.marker = f.id
		}
		for c := range m.pending {
			if c <= f.id {
				delete(m.pending, c)
			}
		}
		for c := range m.bases {
			if c <= f.id {
				delete(m.bases, c)
			}
		}
		m.completed = f.id
		m.sweep()
	}
	m.logf("complete %d", f.id)
}

func (m *modelRun) abort(f *flight) {
	m.flights = slices.DeleteFunc(m.flights, func(g *flight) bool { return g == f })
	m.late = append(m.late, f)
	m.lt.Abort(f.id)
	delete(m.pending, f.id)
	delete(m.bases, f.id)
	if f.id > m.completed {
		m.aborted[f.id] = true
	}
	m.sweep()
	m.logf("abort %d", f.id)
}

// lateStep ends the write of a checkpoint already settled for the task,
// or tells it again of a completion it has had (a late notice).
func (m *modelRun) lateStep() {
	if len(m.late) == 0 {
		return
	}
	f := m.late[m.rng.IntN(len(m.late))]
	if !f.written {
		m.write(f)
		return
	}
	if f.id <= m.completed && !m.aborted[f.id] && !f.failed {
		m.lt.Complete(f.id)
		m.logf("complete %d, late", f.id)
	}
}

// damage flips a byte of a local file, cuts it short or deletes it.
func (m *modelRun) damage() {
	ps := slices.Sorted(func(yield func(string) bool) {
		for p := range m.present {
			if !yield(p) {
				return
			}
		}
	})
	if len(ps) == 0 {
		return
	}
	p := ps[m.rng.IntN(len(ps))]
	path := filepath.Join(m.dir, "job", "v-0", filepath.FromSlash(p))
	switch m.rng.IntN(3) {
	case 0:
		b, err := os.ReadFile(path)
		if err != nil {
			m.fatalf("the model has %s, the directory does not: %v", p, err)
		}
		if len(b) == 0 {
			b = []byte("x")
		} else {
			b[m.rng.IntN(len(b))] ^= 0x20
		}
		// A new file, not the same inode: the damage is to the local copy
		// only, as a torn write of it would be.
		if err := os.Remove(path); err != nil {
			m.t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			m.t.Fatal(err)
		}
		m.logf("flip a byte of %s", p)
	case 1:
		if err := os.Remove(path); err != nil {
			m.t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			m.t.Fatal(err)
		}
		m.logf("empty %s", p)
	default:
		if err := os.Remove(path); err != nil {
			m.t.Fatal(err)
		}
		delete(m.present, p)
		m.logf("delete %s", p)
	}
	delete(m.intact, p)
}

// restart ends the attempt (its checkpoints in flight never complete),
// maybe the process too, and restores the newest completed checkpoint or,
// now and then, an older one. Every piece must read as written, and every
// piece the model holds intact must be read locally.
func (m *modelRun) restart() {
	if m.rng.IntN(2) == 0 {
		s, err := local.Open(m.dir)
		if err != nil {
			m.t.Fatal(err)
		}
		m.s = s
	}
	m.newAttempt()
	m.building = 0
	if len(m.done) == 0 {
		m.logf("restart from nothing")
		return
	}
	id := m.done[len(m.done)-1]
	if m.rng.IntN(5) == 0 {
		id = m.done[m.rng.IntN(len(m.done))]
	}
	m.building = id
	m.logf("restart from %d", id)
	remote := 0
	r := &countingRemote{remote: m.r, n: &remote}
	read, open := m.lt.Reads(r.read, r.open)
	for _, p := range m.pieces[id] {
		before := remote
		var got []byte
		var err error
		if m.rng.IntN(2) == 0 {
			got, err = read(p.h)
		} else {
			got, err = m.stream(open, p)
		}
		if err != nil {
			m.fatalf("restore %d, piece %s: %v", id, p.h.Path, err)
		}
		if !bytes.Equal(got, p.data) {
			m.fatalf("restore %d, piece %s: read %q, want %q", id, p.h.Path, got, p.data)
		}
		if m.intact[p.h.Path] && remote != before {
			m.fatalf("restore %d: piece %s, intact in the local copy, was read from checkpoint storage", id, p.h.Path)
		}
		m.kept[p.h.Path] = true
		m.present[p.h.Path], m.intact[p.h.Path] = true, true
	}
	if err := m.lt.RestoreErr(); err != nil {
		m.t.Fatal(err)
	}
}

// stream reads a piece as Pebble's restore does: into a file of its own,
// which it hands to the local copy to keep (state.Keeper) once whole.
func (m *modelRun) stream(open func(checkpoint.Handle) (io.ReadCloser, error), p piece) ([]byte, error) {
	rc, err := open(p.h)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		return nil, err
	}
	if k, ok := rc.(state.Keeper); ok {
		path := filepath.Join(m.tmp, fmt.Sprintf("down-%d", m.rng.Int64()))
		if err := os.WriteFile(path, data, 0o644); err != nil {
			m.t.Fatal(err)
		}
		k.Keep(path)
	}
	return data, nil
}

// countingRemote counts the reads of checkpoint storage of one restore.
type countingRemote struct {
	remote *remote
	n      *int
}

func (c *countingRemote) read(h checkpoint.Handle) ([]byte, error) {
	*c.n++
	return c.remote.read(h)
}

func (c *countingRemote) open(h checkpoint.Handle) (io.ReadCloser, error) {
	*c.n++
	return c.remote.open(h)
}

// check compares the task's directory with the model.
func (m *modelRun) check() {
	m.t.Helper()
	got := files(m.t, m.s)
	var want []string
	for p := range m.present {
		want = append(want, p)
	}
	sort.Strings(want)
	if !slices.Equal(got, want) {
		m.fatalf("the local copy holds %v, the model %v", got, want)
	}
	// The marker, as a process started now would read it.
	s, err := local.Open(m.dir)
	if err != nil {
		m.t.Fatal(err)
	}
	var marker checkpoint.ID
	for _, c := range s.Copies() {
		marker = c.Checkpoint
	}
	if marker != m.marker {
		m.fatalf("the completion marker names checkpoint %d, the model %d", marker, m.marker)
	}
}

// runModel runs one seed; it returns the first difference from the model.
func runModel(t *testing.T, seed uint64) (err error) {
	defer func() {
		if r := recover(); r != nil {
			v, ok := r.(violation)
			if !ok {
				panic(r)
			}
			err = v.err
		}
	}()
	r, s := setup(t)
	m := &modelRun{t: t, rng: rand.New(rand.NewPCG(seed, 97)), r: r, dir: s.Dir(), tmp: t.TempDir(), s: s, next: 1,
		pieces: map[checkpoint.ID][]piece{}, present: map[string]bool{}, intact: map[string]bool{}}
	m.newAttempt()
	for range 60 {
		switch k := m.rng.IntN(20); {
		case k < 5:
			if len(m.flights) < 3 {
				m.take()
			}
		case k < 10:
			for _, f := range m.flights {
				if !f.written {
					m.write(f)
					break
				}
			}
		case k < 14:
			var ws []*flight
			for _, f := range m.flights {
				if f.written && !f.failed {
					ws = append(ws, f)
				}
			}
			if len(ws) > 0 {
				m.complete(ws[m.rng.IntN(len(ws))])
			}
		case k < 16:
			if len(m.flights) > 0 {
				m.abort(m.flights[m.rng.IntN(len(m.flights))])
			}
		case k < 18:
			m.restart()
		case k < 19:
			m.damage()
		default:
			m.lateStep()
		}
		m.check()
	}
	return nil
}

// TestLocalCopyAgainstAModel runs seeded sequences of checkpoints (written
// as bytes, streamed or as immutable files, reusing shared pieces of the
// checkpoint they build on), completions (some never told to the task),
// aborts, attempts and processes restarted, restores of the newest or an
// older checkpoint (read whole or streamed and kept), and damage to local
// files. After every step the task's directory holds exactly what the
// model says; every restore reads every piece as it was written, and
// reads from checkpoint storage no piece the model holds intact locally.
func TestLocalCopyAgainstAModel(t *testing.T) {
	for seed := *modelFirst; seed < *modelFirst+*modelSeeds; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			if err := runModel(t, uint64(seed)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLocalCopyModelCatchesPlantedBugs: each defect put back is caught
// within the first seeds.
func TestLocalCopyModelCatchesPlantedBugs(t *testing.T) {
	for name, bug := range local.Planted() {
		t.Run(name, func(t *testing.T) {
			bug.Store(true)
			defer bug.Store(false)
			for seed := range 200 {
				if err := runModel(t, uint64(seed)); err != nil {
					t.Logf("caught at seed %d: %v", seed, strings.SplitN(err.Error(), "\n", 2)[0])
					return
				}
			}
			t.Fatal("not caught in 200 seeds")
		})
	}
}
