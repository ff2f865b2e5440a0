// Package storage holds checkpoint storage: where tasks write their state
// for a checkpoint and where the coordinator commits its metadata.
//
// Two kinds exist: Memory (everything in the process's heap; for tests and
// tiny jobs) and Dir (a directory on a vfs.FS, local or shared). Layout of a
// Dir:
//
//	<root>/<job>/chk-<id>/_metadata   written last, atomically; its presence = completed
//	<root>/<job>/chk-<id>/<state>     state files of that checkpoint
//	<root>/<job>/_rollback-<id>       a start that restored an older checkpoint (Rollback)
//
// Every file access goes through vfs.FS so tests can run on an in-memory
// file system, simulate a crash between any two writes and inject I/O errors.
package storage

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/aws/smithy-go"

	"github.com/weirstream/weir/checkpoint"
)

// Storage is checkpoint storage. Implementations are safe for concurrent use:
// tasks write state from a pool while the coordinator commits.
type Storage interface {
	// Reserve records durably that checkpoint id was triggered, so that ids
	// are never reused after a restart.
	Reserve(id checkpoint.ID) error
	// WriteState writes one piece of state of checkpoint id. h describes it
	// (operator, subtask, kind, key groups); the returned copy also says
	// where it went (Path or Inline) and its size.
	WriteState(id checkpoint.ID, h checkpoint.Handle, data []byte) (checkpoint.Handle, error)
	// WriteShared writes a file that later checkpoints may reference too
	// (an incremental state backend's), streaming it from r, under
	// shared/. Shared files are deleted when no retained checkpoint
	// references them any more.
	WriteShared(id checkpoint.ID, h checkpoint.Handle, r io.Reader) (checkpoint.Handle, error)
	// ReadState reads the state a handle points at.
	ReadState(h checkpoint.Handle) ([]byte, error)
	// OpenState streams the state a handle points at.
	OpenState(h checkpoint.Handle) (io.ReadCloser, error)
	// Commit writes m durably and atomically: the checkpoint's commit point.
	// Metadata above checkpoint.MaxMetadataBytes is refused with an error
	// wrapping checkpoint.ErrTooLarge; metadata that references a shared
	// file storage deleted, or is about to, with one wrapping
	// ErrSharedGone (nothing is written then). An error wrapping
	// ErrFreedFilesStay says the checkpoint is committed, and only the
	// shared files it freed could not be deleted.
	Commit(m *checkpoint.Metadata) error
	// Scan reports what storage holds, and counts the shared files'
	// references anew from the completed checkpoints. An I/O error that
	// proves nothing fails it with an error wrapping ErrUnavailable that
	// names the file: it never makes a checkpoint look damaged,
	// incomplete or absent.
	Scan() (Scan, error)
	// RemoveOrphans deletes the shared files no completed checkpoint
	// references (a crash during a discard or an upload leaves such).
	// Call it after Scan, before the run's first checkpoint.
	RemoveOrphans() error
	// Discard deletes checkpoint id and exactly its files: its metadata
	// first, so that a crash midway leaves an incomplete checkpoint, never
	// a completed one with state missing; then its own files, then the
	// shared files no other checkpoint references (those a checkpoint in
	// flight might reference wait until it settles). It waits for state
	// writes of id in flight and refuses new ones until it is done.
	Discard(id checkpoint.ID) error
	// DiscardState deletes state written for a checkpoint that was not
	// completed.
	DiscardState(hs []checkpoint.Handle) error
	// Describe names the storage for people: a directory or "memory".
	Describe() string
	// RecordRollback writes r durably: a start restores an older
	// checkpoint than the newest, or one from elsewhere (see Rollback).
	// Scan reports it from then on.
	RecordRollback(r Rollback) error
	// Lock takes the storage for this run: a second run on the same
	// storage fails here, naming the holder. Close releases it.
	Lock() (io.Closer, error)
}

// Scan is what storage holds for a job.
type Scan struct {
	// MaxID is the highest id reserved, completed or not, or in a
	// rollback record's range (Rollback.Through): new ids start above it.
	MaxID checkpoint.ID
	// Completed lists the checkpoints with valid metadata, ascending.
	Completed []*checkpoint.Metadata
	// Damaged lists checkpoints whose metadata exists but is proven
	// damaged (ProvenDamage): a checksum, version or content that is
	// wrong. Metadata that cannot be read for any other reason fails Scan
	// with ErrUnavailable instead.
	Damaged []Damaged
	// Incomplete lists checkpoints reserved but never committed (a crash or
	// an abort left them), ascending.
	Incomplete []checkpoint.ID
	// Rollbacks lists the starts that restored an older checkpoint than
	// the newest, or one from elsewhere, ascending by Through.
	Rollbacks []Rollback
}

// Damaged is a checkpoint whose metadata cannot be used.
type Damaged struct {
	ID   checkpoint.ID
	Path string
	Err  error
}

// Latest is the checkpoint to resume from (--restore latest): the newest
// completed one that no start rolled back (RolledBack), or nil. See also
// Elsewhere.
func (s Scan) Latest() *checkpoint.Metadata {
	for i := len(s.Completed) - 1; i >= 0; i-- {
		if _, rolled := s.RolledBack(s.Completed[i]); !rolled {
			return s.Completed[i]
		}
	}
	return nil
}

// Restored is the facts a coordinator is built from.
func (s Scan) Restored() checkpoint.Restored {
	r := checkpoint.Restored{MaxID: s.MaxID}
	for _, m := range s.Completed {
		r.Completed = append(r.Completed, checkpoint.Completed{ID: m.ID, Savepoint: m.Savepoint})
	}
	return r
}

// ErrStateTooLarge is returned by Memory.WriteState for state above its bound.
var ErrStateTooLarge = errors.New("state too large for memory checkpoint storage")

// ErrUnavailable marks a failed storage call that proves nothing about what
// storage holds: an I/O error, a timeout, a store's 5xx answer. Retrying
// may succeed. Scan fails with it rather than report a checkpoint damaged:
// only proven damage (checkpoint.ErrCorrupt, checkpoint.ErrVersion,
// checkpoint.ErrStateDamaged) may make a run skip a checkpoint, fall back
// to an older one or delete one.
var ErrUnavailable = errors.New("checkpoint storage unavailable (retrying may succeed)")

// ErrFreedFilesStay marks the error of a Commit that wrote its metadata,
// so the checkpoint is complete, but could not delete the shared files it
// freed (those only older checkpoints referenced): they stay until the
// next start deletes orphaned shared files. NB: not "not committed": a run
// that took it so discarded a complete checkpoint, and counted a failure,
// for a failed garbage collection.
var ErrFreedFilesStay = errors.New("shared files the checkpoint freed stay until the next start")

// ErrNoBucket: S3 answered that the checkpoint URL's bucket does not
// exist (NoSuchBucket), which no retry mends.
var ErrNoBucket = errors.New("the checkpoint URL's bucket does not exist: create it, or name an existing bucket")

// noBucket says whether err is S3's NoSuchBucket. (Not any 404: gocloud
// takes a plain 404 of an endpoint that is no S3 for NotFound too.)
func noBucket(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "NoSuchBucket"
}

// unavailable marks err, which proves nothing, as ErrUnavailable, unless
// it is S3's NoSuchBucket, which it marks as ErrNoBucket.
func unavailable(err error) error {
	if errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNoBucket) {
		return err
	}
	if noBucket(err) {
		return fmt.Errorf("%w: %w", ErrNoBucket, err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// plantedDefect3, set only by the planted-bug test of the storage-fault
// generator (export_test.go), brings issue 19's defect 3 back: Scan
// reports a checkpoint whose metadata it could not read as damaged, so
// that the test can show the generator catches it.
var plantedDefect3 atomic.Bool

// ProvenDamage reports whether err proves a checkpoint unusable: its
// metadata's checksum, version or content is wrong, or state it lists is
// missing or not what was written. Any other error (ErrUnavailable among
// them) proves nothing.
func ProvenDamage(err error) bool {
	return errors.Is(err, checkpoint.ErrCorrupt) || errors.Is(err, checkpoint.ErrVersion) || errors.Is(err, checkpoint.ErrStateDamaged)
}

func handleName(h checkpoint.Handle) string {
	return fmt.Sprintf("%s subtask %d (%s state)", h.Operator, h.Subtask, h.Kind)
}
