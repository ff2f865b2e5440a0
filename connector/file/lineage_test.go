package file

import (
	"errors"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestRestoreFromBeforeStartOverIsRefused (issue 19, defect 4): a
// checkpoint of lineage A, restored after a run of lineage B started over
// (deleting A's files) and was killed before any checkpoint of its own
// (so the runtime has no newer checkpoint to tell it by), is refused with
// ErrStartedOver, and the directory is left as it is. So is a checkpoint
// without a lineage (Weir before lineages) once a lineage is recorded; and
// a restore of lineage B's own state is not.
func TestRestoreFromBeforeStartOverIsRefused(t *testing.T) {
	fs := vfs.NewMem()
	w := &operatortest.MemWriter{}
	var run *operatortest.Run
	t.Cleanup(func() { run.Close() })
	// open opens the sink in a run of lineage ("-": none), ending the
	// run before (a kill: the lock is the kernel's, the files stay).
	open := func(lineage string, startOver bool, r *operator.Restore) (*fileSink[string], error) {
		if run != nil {
			run.Close()
		}
		run = &operatortest.Run{Lineage: lineage}
		newSink, err := Sink(SinkConfig[string]{FS: fs, Dir: "/out", Format: format})
		if err != nil {
			t.Fatal(err)
		}
		s := newSink().(*fileSink[string])
		ctx := run.Context("sink", 0, 1, r)
		ctx.StartOver = startOver
		if lineage == "-" {
			ctx.Lineage = ""
		}
		return s, s.Open(ctx)
	}
	s, err := open("A", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Write("a1")
	snapshot(t, s, 1, w)
	s.NotifyComplete(1)
	s.Write("a2")
	hs := snapshot(t, s, 2, w) // completes; the notification never comes
	s.Close()
	fromA := &operator.Restore{Checkpoint: 2, Handles: hs, Read: w.Read}

	// Lineage B starts over, writes, and is killed before its first
	// checkpoint completes.
	s, err = open("B", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Write("b1")
	snapshot(t, s, 3, w)
	s.NotifyComplete(3)
	s.Write("b2")
	before, _ := fs.List("/out")
	slices.Sort(before)
	s.Close()

	for _, lineage := range []string{"A", "-"} {
		_, err := open(lineage, false, fromA)
		if !errors.Is(err, operator.ErrStartedOver) || !operator.IsPermanent(err) {
			t.Fatalf("restore of lineage %q after lineage B started over: %v, want a permanent ErrStartedOver", lineage, err)
		}
		after, _ := fs.List("/out")
		slices.Sort(after)
		if !slices.Equal(before, after) {
			t.Fatalf("the refused restore changed the directory: %v, was %v", after, before)
		}
	}
	if _, got := committed(t, fs); !slices.Equal(got, []string{"b1"}) {
		t.Fatalf("committed %v, want lineage B's b1", got)
	}
	// B's own state restores (its checkpoint 3).
	s, err = open("B", false, &operator.Restore{Checkpoint: 3, Handles: nil, Read: w.Read})
	if err != nil {
		t.Fatalf("restore of lineage B: %v", err)
	}
	s.Close()
}
