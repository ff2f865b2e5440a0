package weir

import (
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/storage"
)

// A cluster's coordinator restores by path only a checkpoint its storage
// holds: it names the checkpoint to the workers by id, and they read it
// from there.
func TestClusterRestoresOnlyItsOwnCheckpoints(t *testing.T) {
	own := storage.NewMemory(0)
	m := &checkpoint.Metadata{Job: "j", ID: 3, Lineage: "L", Savepoint: true, Triggered: time.Unix(3, 0)}
	if err := own.Reserve(3); err != nil {
		t.Fatal(err)
	}
	if err := own.Commit(m); err != nil {
		t.Fatal(err)
	}
	spec := runtime.Spec{Storage: own}
	if err := restoresOwn(spec); err != nil {
		t.Fatalf("no checkpoint named: %v", err)
	}
	spec.Start.Point = &runtime.RestorePoint{Metadata: m, Where: "/ckpt/j/chk-3"}
	if err := restoresOwn(spec); err != nil {
		t.Fatalf("checkpoint 3 of its own storage: %v", err)
	}
	// The same id, of another run kept elsewhere.
	other := *m
	other.Triggered = time.Unix(4, 0)
	spec.Start.Point = &runtime.RestorePoint{Metadata: &other, Where: "/backup/j/chk-3"}
	if err := restoresOwn(spec); err == nil || !strings.Contains(err.Error(), "restore /backup/j/chk-3: checkpoint 3 is not in the cluster's checkpoint storage memory") {
		t.Fatalf("a checkpoint 3 from elsewhere: %v; want it refused, named", err)
	}
}
