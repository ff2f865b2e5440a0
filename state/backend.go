package state

import (
	"io"
	"iter"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// Backend holds one keyed operator subtask's state: tables of values,
// lists, maps and timers, each scoped to the current key's key group.
// It belongs to the task goroutine; only the asynchronous part of a
// snapshot runs elsewhere. Implementations: state/heap (Go maps) and
// state/pebble (an LSM on local disk, with incremental checkpoints);
// state/backend builds them and their tables.
//
// Table methods have no error results: a backend that fails to read or
// write its storage panics with an error, which fails the task (and the
// job restarts from its latest checkpoint).
type Backend interface {
	// SetGroup makes key group g (absolute) current: every table access
	// that follows is in it.
	SetGroup(g int)
	// Snapshot is the synchronous part of checkpoint id: it freezes the
	// state and returns the asynchronous part, which writes it.
	Snapshot(id checkpoint.ID) (Async, error)
	// NotifyComplete and NotifyAborted tell the backend the fate of a
	// checkpoint it snapshotted (an incremental backend reuses only what
	// completed checkpoints hold).
	NotifyComplete(id checkpoint.ID)
	NotifyAborted(id checkpoint.ID)
	// Close releases the backend's resources (files, caches).
	Close() error
}

// Async writes what a Snapshot froze and returns the handles.
type Async func(w Writer) ([]checkpoint.Handle, error)

// Writer writes the state of the checkpoint being taken.
type Writer interface {
	// Write writes one piece of state; h describes it.
	Write(h checkpoint.Handle, data []byte) (checkpoint.Handle, error)
	// WriteShared writes a file that later checkpoints may reference too
	// (an incremental backend's immutable files), streaming it from r.
	WriteShared(h checkpoint.Handle, r io.Reader) (checkpoint.Handle, error)
}

// Restored is the state of a checkpoint a backend starts from.
type Restored struct {
	// Handles are the operator's handles, of every subtask that took the
	// checkpoint (its parallelism may differ from the current one).
	Handles []checkpoint.Handle
	Reader  Reader
	// Owned: the job's checkpoint storage holds the checkpoint, counts
	// the references to its shared files and deletes none a checkpoint
	// references, and it is not a savepoint: a backend restored at the
	// parallelism that took it may reference them from its next
	// checkpoints rather than write its state again (Flink's CLAIM mode,
	// which Flink's failover uses too). Otherwise its first checkpoint is
	// full (NO_CLAIM): the files may be another job's, or a savepoint's
	// that its owner deletes.
	Owned bool
}

// Reader reads the state of the checkpoint being restored.
type Reader interface {
	Read(h checkpoint.Handle) ([]byte, error)
	// Open streams the state a handle points at (large files).
	Open(h checkpoint.Handle) (io.ReadCloser, error)
}

// Local recovery (Config.LocalRecovery) lets a backend whose pieces are
// files it never writes again (Pebble's sstables) share them with the
// local copy instead of copying the bytes: what it uploads
// (ImmutableFile), and what Reader.Open returns (VerifiedFile, Keeper).
//
// A VerifiedFile is a piece read from the local copy, checked whole
// against its handle's size and checksum: the backend may hard-link the
// file at VerifiedPath rather than copy it.
type VerifiedFile interface {
	io.ReadCloser
	VerifiedPath() string
}

// An ImmutableFile is what a backend may pass to Writer.WriteShared when
// the bytes are a file's that nobody writes again (Pebble's sstables):
// local recovery then hard-links the file at ImmutablePath into the local
// copy rather than writing the bytes a second time.
type ImmutableFile interface {
	io.Reader
	ImmutablePath() string
}

// A Keeper is a piece read from checkpoint storage. Once the backend has
// written it whole to a file and checked it against the handle's size and
// checksum, it may pass the file's path to Keep, which keeps that file as
// the piece's local copy (a hard link where it can).
type Keeper interface {
	io.ReadCloser
	Keep(path string)
}

// Value is keyed state holding one value per key.
type Value[K comparable, V any] interface {
	Get(k K) (V, bool)
	Put(k K, v V)
	Delete(k K)
}

// List is keyed state holding a list per key.
type List[K comparable, V any] interface {
	// Get returns k's list; the caller must not modify it.
	Get(k K) []V
	// All streams k's list, in order.
	All(k K) iter.Seq[V]
	// Add appends v; it need not read the list.
	Add(k K, v V)
	// Update replaces k's list (empty: deletes it).
	Update(k K, vs []V)
	Delete(k K)
}

// Map is keyed state holding a map per key.
type Map[K, UK comparable, V any] interface {
	Get(k K, uk UK) (V, bool)
	Put(k K, uk UK, v V)
	Remove(k K, uk UK)
	// All streams k's entries; entries may be removed meanwhile.
	All(k K) iter.Seq2[UK, V]
	Delete(k K)
}

// Timers are timers per key (millisecond precision): a key has at most
// one timer at a time.
type Timers[K comparable] interface {
	Register(k K, at time.Time)
	Delete(k K, at time.Time)
	// Next is the earliest timer.
	Next() (time.Time, bool)
	// FireUpTo fires, earliest first, every timer at or before limit (ms
	// since the Unix epoch), including those fire registers there; it
	// makes each timer's key group current first.
	FireUpTo(limit int64, fire func(k K, at time.Time) error) error
	// Clear removes every timer.
	Clear()
}
