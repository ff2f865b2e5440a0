// Package backend builds state backends and their tables: the heap backend
// (Go maps) or Pebble (an LSM on local disk, with incremental checkpoints),
// behind the interfaces of package state.
package backend

import (
	"fmt"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/heap"
)

// Kind names a state backend.
type Kind string

const (
	// Heap keeps state in Go maps; a checkpoint writes all of it.
	Heap Kind = "heap"
)

// Config chooses and configures the state backend.
type Config struct {
	// Kind is the backend; default Heap.
	Kind Kind
}

// Validate checks cfg, naming what is wrong.
func (c Config) Validate() error {
	switch c.Kind {
	case "", Heap:
		return nil
	}
	return fmt.Errorf("state backend %q: want heap", c.Kind)
}

// Scope is the subtask a backend serves.
type Scope struct {
	Job, Operator string
	Subtask       int
	KeyGroups     keygroup.Range
}

// New builds the backend of one keyed operator subtask, restored from the
// handles hs (nil: empty).
func New(cfg Config, sc Scope, hs []checkpoint.Handle, r state.Reader) (state.Backend, error) {
	b := heap.New(sc.KeyGroups)
	if hs != nil {
		if err := b.Restore(hs, r.Read); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func unknown(b state.Backend) error { return fmt.Errorf("state: unknown backend %T", b) }

// NewValue declares value state name in b.
func NewValue[K comparable, V any](b state.Backend, name string, kc codec.Codec[K], vc codec.Codec[V]) (state.Value[K, V], error) {
	switch b := b.(type) {
	case *heap.Backend:
		return heap.NewValue(b, name, kc, vc)
	}
	return nil, unknown(b)
}

// NewList declares list state name in b.
func NewList[K comparable, V any](b state.Backend, name string, kc codec.Codec[K], vc codec.Codec[V]) (state.List[K, V], error) {
	switch b := b.(type) {
	case *heap.Backend:
		return heap.NewList(b, name, kc, vc)
	}
	return nil, unknown(b)
}

// NewMap declares map state name in b.
func NewMap[K, UK comparable, V any](b state.Backend, name string, kc codec.Codec[K], ukc codec.Codec[UK], vc codec.Codec[V]) (state.Map[K, UK, V], error) {
	switch b := b.(type) {
	case *heap.Backend:
		return heap.NewMap(b, name, kc, ukc, vc)
	}
	return nil, unknown(b)
}

// NewTimers declares a timer table name in b.
func NewTimers[K comparable](b state.Backend, name string, kc codec.Codec[K]) (state.Timers[K], error) {
	switch b := b.(type) {
	case *heap.Backend:
		return heap.NewTimers(b, name, kc)
	}
	return nil, unknown(b)
}
