// Package backend builds state backends and their tables: the heap backend
// (Go maps) or Pebble (an LSM on local disk, with incremental checkpoints),
// behind the interfaces of package state.
package backend

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/heap"
	"github.com/weirstream/weir/state/pebble"
)

// Kind names a state backend.
type Kind string

const (
	// Heap keeps state in Go maps; checkpoints write what changed since
	// the last completed one unless Full is set.
	Heap Kind = "heap"
	// Pebble keeps state in a Pebble database on local disk; checkpoints
	// are incremental unless Full is set.
	Pebble Kind = "pebble"
)

// Config chooses and configures the state backend.
type Config struct {
	// Kind is the backend; default Heap.
	Kind Kind
	// Dir is where Pebble keeps its databases; default
	// <os.TempDir()>/weir-state.
	Dir string
	// Full makes every checkpoint write all of the state: Pebble uploads
	// all of its data files, not only those no completed checkpoint
	// holds; heap writes every key group whole, not only what changed.
	Full bool
	// CacheBytes bounds the block cache the process's Pebble databases
	// share (default 256 MiB), MemTableBytes each one's memtable (default
	// 16 MiB).
	CacheBytes, MemTableBytes int64
}

// Validate checks cfg, naming what is wrong.
func (c Config) Validate() error {
	switch {
	case c.Kind != "" && c.Kind != Heap && c.Kind != Pebble:
		return fmt.Errorf("state backend %q: want heap or pebble", c.Kind)
	case c.CacheBytes < 0 || c.MemTableBytes < 0:
		return fmt.Errorf("state backend: cache (%d bytes) and memtable (%d bytes) must not be negative", c.CacheBytes, c.MemTableBytes)
	case c.Kind != Pebble && (c.Dir != "" || c.CacheBytes != 0 || c.MemTableBytes != 0):
		return fmt.Errorf("state backend %s: a directory, cache and memtable sizes are Pebble's settings", c.kind())
	}
	return nil
}

// CheckDir makes Pebble's directory, if the backend is Pebble, and checks
// that it can write there: a process that runs tasks calls it at start, so
// that a directory it cannot use fails the job at once, naming the
// setting, not every keyed task's start, restart after restart.
func (c Config) CheckDir() error {
	if c.kind() != Pebble {
		return nil
	}
	dir := c.dir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("state directory %s: %w: set --state-dir (StateBackend.Dir) to a writable directory", dir, err)
	}
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return fmt.Errorf("state directory %s is not writable: %w: set --state-dir (StateBackend.Dir) to a writable directory", dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// dir is where Pebble keeps its databases.
func (c Config) dir() string {
	if c.Dir == "" {
		return filepath.Join(os.TempDir(), "weir-state")
	}
	return c.Dir
}

func (c Config) kind() Kind {
	if c.Kind == "" {
		return Heap
	}
	return c.Kind
}

// Scope is the subtask a backend serves.
type Scope struct {
	Job, Operator string
	Subtask       int
	KeyGroups     keygroup.Range
}

// New builds the backend of one keyed operator subtask, restored from rs
// (nil: empty).
func New(cfg Config, sc Scope, rs *state.Restored) (state.Backend, error) {
	if cfg.kind() == Pebble {
		return pebble.New(pebble.Options{Dir: cfg.dir(), Incremental: !cfg.Full, CacheBytes: cfg.CacheBytes, MemTableBytes: cfg.MemTableBytes},
			pebble.Scope(sc), rs)
	}
	if rs != nil {
		if err := pebbleWrote(sc, rs.Handles); err != nil {
			return nil, err
		}
	}
	b := heap.NewIncremental(sc.KeyGroups)
	if cfg.Full {
		b = heap.New(sc.KeyGroups)
	}
	var err error
	switch {
	case rs == nil:
	case rs.Owned:
		err = b.RestoreOwned(rs.Handles, rs.Reader.Read)
	default:
		err = b.Restore(rs.Handles, rs.Reader.Read)
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

// pebbleWrote refuses a restore of the key groups of sc from handles hs
// by the heap backend when the Pebble backend wrote some (data files the
// heap backend cannot read: their state would be lost without a word). A
// Pebble checkpoint always holds them. The error marks a checkpoint that
// does not fit the job, which no restart fixes. (A restore on Pebble
// migrates a heap checkpoint's state instead: see package pebble.)
func pebbleWrote(sc Scope, hs []checkpoint.Handle) error {
	for _, h := range hs {
		if (h.Kind == pebble.KindData || h.Kind == pebble.KindFile) && h.KeyGroups.Intersect(sc.KeyGroups).Len() > 0 {
			return fmt.Errorf("operator %s: its keyed state was checkpointed by the pebble state backend, which the heap state backend cannot read: restore with --state-backend pebble (Config.StateBackend.Kind PebbleState): %w",
				sc.Operator, checkpoint.ErrMismatch)
		}
	}
	return nil
}

func unknown(b state.Backend) error { return fmt.Errorf("state: unknown backend %T", b) }

// NewValue declares value state name in b.
func NewValue[K comparable, V any](b state.Backend, name string, kc codec.Codec[K], vc codec.Codec[V]) (state.Value[K, V], error) {
	switch b := b.(type) {
	case *heap.Backend:
		return heap.NewValue(b, name, kc, vc)
	case *pebble.Backend:
		return pebble.NewValue(b, name, kc, vc)
	}
	return nil, unknown(b)
}

// NewList declares list state name in b.
func NewList[K comparable, V any](b state.Backend, name string, kc codec.Codec[K], vc codec.Codec[V]) (state.List[K, V], error) {
	switch b := b.(type) {
	case *heap.Backend:
		return heap.NewList(b, name, kc, vc)
	case *pebble.Backend:
		return pebble.NewList(b, name, kc, vc)
	}
	return nil, unknown(b)
}

// NewMap declares map state name in b.
func NewMap[K, UK comparable, V any](b state.Backend, name string, kc codec.Codec[K], ukc codec.Codec[UK], vc codec.Codec[V]) (state.Map[K, UK, V], error) {
	switch b := b.(type) {
	case *heap.Backend:
		return heap.NewMap(b, name, kc, ukc, vc)
	case *pebble.Backend:
		return pebble.NewMap(b, name, kc, ukc, vc)
	}
	return nil, unknown(b)
}

// NewTimers declares a timer table name in b.
func NewTimers[K comparable](b state.Backend, name string, kc codec.Codec[K]) (state.Timers[K], error) {
	switch b := b.(type) {
	case *heap.Backend:
		return heap.NewTimers(b, name, kc)
	case *pebble.Backend:
		return pebble.NewTimers(b, name, kc)
	}
	return nil, unknown(b)
}
