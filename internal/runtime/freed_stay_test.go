package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/storage"
)

// freedStays is storage whose every Commit writes the metadata and then
// fails to delete the shared files it freed, as S3 throttling deletes does.
type freedStays struct{ storage.Storage }

func (s freedStays) Commit(m *checkpoint.Metadata) error {
	if err := s.Storage.Commit(m); err != nil {
		return err
	}
	return fmt.Errorf("checkpoint %d completed, but %w: DeleteObject: 503", m.ID, storage.ErrFreedFilesStay)
}

// TestCommitThatCouldNotDeleteFreedFilesCompletes: a Commit that wrote its
// metadata and could not delete the shared files it freed committed the
// checkpoint. The run took any Commit error for "not committed": it
// aborted and discarded a complete checkpoint, and with the default
// tolerance of no failures failed over, for a failed garbage collection.
func TestCommitThatCouldNotDeleteFreedFilesCompletes(t *testing.T) {
	plan, err := graph.NewPlan(graph.Graph{Nodes: []graph.Node{{UID: "held", Kind: graph.KindSink, Parallelism: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	var ended atomic.Bool
	var mu sync.Mutex
	var completed []checkpoint.ID
	var aborted []error
	store := storage.NewMemory(0)
	spec := Spec{
		Name: "freed", Plan: plan, Storage: freedStays{store}, Checkpoint: checkpoint.Config{Interval: 5 * time.Millisecond},
		Logger: slog.New(slog.DiscardHandler),
		OnEvent: func(e JobEvent) {
			mu.Lock()
			defer mu.Unlock()
			switch e.Kind {
			case EventCheckpointCompleted:
				if completed = append(completed, e.ID); len(completed) == 3 {
					ended.Store(true)
				}
			case EventCheckpointAborted:
				aborted = append(aborted, e.Err)
			}
		},
		Build: func(*TaskBuild) (*TaskParts, error) {
			op := &heldSource{ended: &ended}
			return &TaskParts{Ops: []operator.Operator{op}, Head: op}, nil
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, spec)
	mu.Lock()
	defer mu.Unlock()
	if err != nil || len(aborted) > 0 || res.Attempts != 1 {
		t.Fatalf("run: %v after %d attempts; checkpoints completed %v, aborted %v; want every checkpoint completed, none aborted, one attempt", err, res.Attempts, completed, errors.Join(aborted...))
	}
	scan, err := store.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if len(scan.Completed) == 0 || scan.Completed[len(scan.Completed)-1].ID != completed[len(completed)-1] {
		t.Fatalf("storage holds %d completed checkpoints, want the last one the run completed, %d", len(scan.Completed), completed[len(completed)-1])
	}
}
