package storage

import (
	"context"
	"fmt"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/checkpoint"
)

// Disposed says what DisposeSavepoint deleted.
type Disposed struct {
	ID checkpoint.ID
	// SharedKept: a job held the storage, so the shared files only the
	// savepoint used were left for that job's next start to delete.
	SharedKept bool
	// Held is why the storage could not be taken, when SharedKept.
	Held error
}

// DisposeSavepoint deletes the savepoint at path (a chk-<id> directory or
// URL, or its _metadata), which Weir never deletes itself: its metadata
// first, then its files, then the shared files no other checkpoint
// references. A checkpoint that is not a savepoint is refused: Weir
// deletes those as newer ones complete. While a job holds the storage, its
// shared files stay (that job's reference counts include them) and go at
// its next start, as every unreferenced shared file does.
//
// The job's newest checkpoint (what a restart and --restore latest resume
// from) is refused when it is the savepoint: without it the job could
// resume only from an older checkpoint, or not at all.
func DisposeSavepoint(ctx context.Context, fs vfs.FS, path string) (Disposed, error) {
	open := func() (*checkpoint.Metadata, Storage, error) {
		if IsURL(path) {
			return OpenCheckpointURL(ctx, path)
		}
		return OpenCheckpoint(fs, strings.TrimPrefix(path, "file://"))
	}
	m, st, err := open()
	if err != nil {
		return Disposed{}, fmt.Errorf("dispose: %w", err)
	}
	if !m.Savepoint {
		return Disposed{}, fmt.Errorf("dispose %s: checkpoint %d is not a savepoint; Weir deletes checkpoints itself as newer ones complete (Checkpoint.Retained)", path, m.ID)
	}
	d := Disposed{ID: m.ID}
	scanned := st // Scan counts the shared files' references
	lock, err := st.Lock()
	if err != nil {
		d.SharedKept, d.Held = true, err
		// NB: st's counts stay empty, so that Discard leaves every shared
		// file to the job that holds the storage; another copy looks.
		if _, scanned, err = open(); err != nil {
			return Disposed{}, fmt.Errorf("dispose: %w", err)
		}
	} else {
		defer lock.Close()
	}
	scan, err := scanned.Scan()
	if err != nil {
		return Disposed{}, fmt.Errorf("dispose %s: %w", path, err)
	}
	if latest := scan.Latest(); latest != nil && latest.ID == m.ID {
		return Disposed{}, fmt.Errorf("dispose %s: savepoint %d is the job's newest checkpoint: a restart and --restore latest resume from it, and without it the job could resume only from an older checkpoint or not at all; dispose it once the job has completed a newer checkpoint, or delete the job's checkpoints whole (%s) to discard the job", path, m.ID, st.Describe())
	}
	if err := st.Discard(m.ID); err != nil {
		return Disposed{}, fmt.Errorf("dispose %s: %w", path, err)
	}
	return d, nil
}
