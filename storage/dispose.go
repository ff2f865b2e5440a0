package storage

import (
	"context"
	"fmt"

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
func DisposeSavepoint(ctx context.Context, fs vfs.FS, path string) (Disposed, error) {
	var m *checkpoint.Metadata
	var st Storage
	var err error
	if IsURL(path) {
		m, st, err = OpenCheckpointURL(ctx, path)
	} else {
		m, st, err = OpenCheckpoint(fs, path)
	}
	if err != nil {
		return Disposed{}, fmt.Errorf("dispose: %w", err)
	}
	if !m.Savepoint {
		return Disposed{}, fmt.Errorf("dispose %s: checkpoint %d is not a savepoint; Weir deletes checkpoints itself as newer ones complete (Checkpoint.Retained)", path, m.ID)
	}
	d := Disposed{ID: m.ID}
	lock, err := st.Lock()
	if err != nil {
		d.SharedKept, d.Held = true, err
	} else {
		defer lock.Close()
		if _, err := st.Scan(); err != nil { // counts the shared files' references
			return Disposed{}, fmt.Errorf("dispose %s: %w", path, err)
		}
	}
	if err := st.Discard(m.ID); err != nil {
		return Disposed{}, fmt.Errorf("dispose %s: %w", path, err)
	}
	return d, nil
}
