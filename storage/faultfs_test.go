package storage_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/weirstream/weir/state/heap"
	"github.com/weirstream/weir/storage"
)

// faults is an errorfs.Injector that fails calls to the checkpoint
// storage's file system on a schedule drawn from a seed: transient errors
// only (EIO, a timeout, "try again", as a disk or a network store gives
// them), and slow answers. Proven damage is planted between runs instead
// (plantDamage), where it stays until a run deals with it. Safe for
// concurrent use: the job calls it from many goroutines.
//
// NB: the seed fixes the schedule (which share of which calls fail, and
// with what), not the order in which the job's goroutines make their
// calls: a failing seed fails again with high probability, not for sure.
type faults struct {
	mu       sync.Mutex
	rng      *rand.Rand
	sched    schedule
	injected int // calls failed on purpose, in all runs
	slowed   int
}

// schedule is how often each kind of call fails during one run.
type schedule struct {
	name string
	// metadataRead is the probability that a read of a _metadata file
	// (open, read, stat) fails: the reads a start makes to find what to
	// restore.
	metadataRead float64
	read         float64 // any other read (list, stat, open, read)
	write        float64 // any write (create, write, sync, rename, remove, mkdir)
	slow         float64 // a call answers late
}

// schedules are the kinds of runs a seed draws from.
var schedules = []schedule{
	{name: "no faults"},
	{name: "faults at start", metadataRead: 0.2, read: 0.02, slow: 0.01},
	{name: "faults while running", write: 0.03, slow: 0.01},
	{name: "faults at every call", metadataRead: 0.05, read: 0.005, write: 0.01, slow: 0.01},
	{name: "many faults at every call", metadataRead: 0.2, read: 0.03, write: 0.05, slow: 0.02},
}

func newFaults(seed uint64) *faults {
	return &faults{rng: rand.New(rand.NewPCG(seed, 0xfa017))}
}

func (f *faults) String() string { return "seeded storage faults" }

// set makes s the schedule from now on.
func (f *faults) set(s schedule) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sched = s
}

// transient is the errors faults injects: each proves nothing about what
// storage holds.
var transient = []error{syscall.EIO, os.ErrDeadlineExceeded, syscall.EAGAIN}

// isInjected reports whether err is one faults injected.
func isInjected(err error) bool {
	for _, t := range transient {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

func (f *faults) MaybeError(op errorfs.Op) error {
	f.mu.Lock()
	s := f.sched
	p := s.read
	switch {
	case op.Kind.ReadOrWrite() == errorfs.OpIsWrite:
		p = s.write
	case strings.HasSuffix(op.Path, "/"+storage.MetadataFile) && (op.Kind == errorfs.OpOpen || op.Kind == errorfs.OpFileRead || op.Kind == errorfs.OpStat):
		p = s.metadataRead
	}
	switch op.Kind {
	case errorfs.OpFileClose:
		p = 0 // a failed close leaves MemFS's file open: not a fault of storage
	case errorfs.OpLock:
		// NB: internal/lockfile reports any error of a non-OS file
		// system's Lock as "in use by another run" (ErrLocked, the cause
		// formatted with %v), so a fault here reads as a second run.
		p = 0
	}
	var err error
	if f.rng.Float64() < p {
		f.injected++
		err = &os.PathError{Op: fmt.Sprint(op.Kind), Path: op.Path, Err: transient[f.rng.IntN(len(transient))]}
	}
	slow := f.rng.Float64() < s.slow
	if slow {
		f.slowed++
	}
	f.mu.Unlock()
	if slow {
		time.Sleep(200 * time.Microsecond) // a slow answer: simulated latency, not synchronisation
	}
	return err
}

// damage is proven damage planted in a checkpoint between runs.
type damage int

const (
	flipMetadata     damage = iota // a byte of _metadata flipped: bad checksum or header
	truncateMetadata               // _metadata cut short
	truncateState                  // a state file cut short: not the size the metadata says
	flipState                      // a byte of a keyed state file flipped: bad checksum
)

func (d damage) String() string {
	return [...]string{"flipped byte in _metadata", "truncated _metadata", "truncated state file", "flipped byte in keyed state"}[d]
}

// plantDamage damages checkpoint dir on fs as d says, choosing with rng;
// it reports false when d cannot be planted there (no state file). The
// state files of a checkpoint are those in its directory and the shared
// files no other completed checkpoint references (an incremental heap
// checkpoint's keyed state is in those; its index is inline).
func plantDamage(fs vfs.FS, dir string, d damage, rng *rand.Rand) (bool, error) {
	path := fs.PathJoin(dir, storage.MetadataFile)
	if d == truncateState || d == flipState {
		names, err := fs.List(dir)
		if err != nil {
			return false, err
		}
		var files []string
		for _, n := range names {
			if n != storage.MetadataFile && (d == truncateState || strings.Contains(n, ".keyed.")) {
				files = append(files, fs.PathJoin(dir, n))
			}
		}
		own, err := sharedOnlyIn(fs, dir)
		if err != nil {
			return false, err
		}
		files = append(files, own...)
		if len(files) == 0 {
			return false, nil
		}
		path = files[rng.IntN(len(files))]
	}
	data, err := readAll(fs, path)
	if err != nil || len(data) < 2 {
		return false, err
	}
	switch d {
	case flipMetadata, flipState:
		i := rng.IntN(len(data))
		data[i] ^= byte(1 << rng.IntN(8))
	case truncateMetadata, truncateState:
		data = data[:rng.IntN(len(data))]
	}
	w, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return false, err
	}
	if _, err := w.Write(data); err != nil {
		w.Close()
		return false, err
	}
	return true, errors.Join(w.Sync(), w.Close())
}

// sharedOnlyIn lists the shared files of incremental heap state that
// checkpoint dir references and no other completed checkpoint does.
func sharedOnlyIn(fs vfs.FS, dir string) ([]string, error) {
	scan, err := cleanScan(fs)
	if err != nil {
		return nil, err
	}
	refs := map[string]int{}
	var mine []string
	for _, m := range scan.Completed {
		for _, ts := range m.Tasks {
			for _, h := range ts.Handles {
				if storage.IsShared(h) {
					refs[h.Path]++
					if fs.PathBase(dir) == fmt.Sprintf("chk-%d", m.ID) && h.Kind == heap.KindData {
						mine = append(mine, h.Path)
					}
				}
			}
		}
	}
	var files []string
	for _, p := range mine {
		if refs[p] == 1 {
			files = append(files, fs.PathJoin(fs.PathDir(dir), p))
		}
	}
	return files, nil
}

func readAll(fs vfs.FS, path string) ([]byte, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	data := make([]byte, st.Size())
	_, err = f.ReadAt(data, 0)
	return data, err
}
