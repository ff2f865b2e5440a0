package writeahead

import (
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestRescaleDownThenUpWritesEachBatchOnce: batches of subtasks that no longer exist are
// written once by the subtask that stands for them, and a later rescale up
// neither repeats nor skips a batch.
func TestRescaleDownThenUpWritesEachBatchOnce(t *testing.T) {
	fs := vfs.NewMem()
	w := &operatortest.MemWriter{}
	o := &out{}
	newSink, err := Sink(Config[string]{Write: o.write, MarkerDir: "/markers", FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	openAt := func(sub, p int, r *operator.Restore) *sink[string] {
		s := newSink().(*sink[string])
		if err := s.Open((&operatortest.Run{}).Context("print", sub, p, r)); err != nil {
			t.Fatal(err)
		}
		return s
	}
	s0, s1 := openAt(0, 2, nil), openAt(1, 2, nil)
	s0.Write("a0")
	s1.Write("a1")
	var hs []checkpoint.Handle
	hs = append(snapshot(t, s0, 1, w), snapshot(t, s1, 1, w)...)
	s0.NotifyComplete(1) // s1's notification is lost: the process dies
	s0.Write("b0")
	s1.Write("b1")
	hs2 := append(snapshot(t, s0, 2, w), snapshot(t, s1, 2, w)...)
	_ = hs
	// Restore checkpoint 2 at parallelism 1.
	r := openAt(0, 1, &operator.Restore{Checkpoint: 2, Handles: hs2, Read: w.Read})
	got := o.records()
	slices.Sort(got)
	if !slices.Equal(got, []string{"a0", "a1", "b0", "b1"}) {
		t.Fatalf("after the restore at parallelism 1: %v", got)
	}
	r.Write("c0")
	hs3 := snapshot(t, r, 3, w)
	// Back to 2, restoring checkpoint 3 before its notification.
	openAt(0, 2, &operator.Restore{Checkpoint: 3, Handles: hs3, Read: w.Read})
	openAt(1, 2, &operator.Restore{Checkpoint: 3, Handles: hs3, Read: w.Read})
	got = o.records()
	slices.Sort(got)
	if !slices.Equal(got, []string{"a0", "a1", "b0", "b1", "c0"}) {
		t.Fatalf("after the restore at parallelism 2: %v", got)
	}
}
