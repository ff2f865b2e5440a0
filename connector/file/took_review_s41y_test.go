package file

import (
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestS41yFreshClusterAMultiSplitFileEmptyInSubtask0IsLostForGood: as
// TestS41cFreshClusterAFileEmptyInOneProcessIsReadTwice, but b.txt, empty
// when subtask 0's process globs, has 3 splits (20 lines, SplitBytes 100)
// when subtask 1's does. b.txt has place 1, so its splits go to subtasks
// 1, 0, 1. Subtask 1 reads b0 and b2; subtask 0 saw b.txt empty and has no
// split of it: b1 is read by no one. The first fix had subtask 1 record
// b.txt in "files" and "sizes" up to the end of b2, the whole file, so the
// restore took b.txt as read: b1's lines were never read. Before it the
// restore read b.txt again whole (b0, b2 twice, but b1 too). Now subtask
// 1 records the splits it took, and the restore reads the rest (b1).
func TestS41yFreshClusterAMultiSplitFileEmptyInSubtask0IsLostForGood(t *testing.T) {
	fs := vfs.NewMem()
	fs.MkdirAll("/in", 0o755)
	a := numbered(t, fs, "/in/a.txt", 20) // place 0
	writeFile(t, fs, "/in/b.txt", "")     // place 1
	early := review(t, fs)
	b := numbered(t, fs, "/in/b.txt", 20) // 3 splits
	late := review(t, fs)
	w := &operatortest.MemWriter{}
	var got lines
	hs := freshCheckpoint(t, w, &got, 0, early, late)
	fresh := len(only(got, "/in/b.txt"))
	rs := &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read}
	for sub := range 2 {
		rd := late()
		if err := rd.Open(opCtx(sub, 2, rs)); err != nil {
			t.Fatal(err)
		}
		drain(t, rd, &got)
		rd.Close()
	}
	t.Logf("b.txt: %d of its %d lines read by the fresh run, %d in all after the restore", fresh, len(b), len(only(got, "/in/b.txt")))
	once(t, "a.txt", only(got, "/in/a.txt"), a)
	once(t, "b.txt after the fresh run and a restore", only(got, "/in/b.txt"), b)
}

// TestFreshClusterRewindReadsWhatWasTaken: as above, and a rewind to the
// checkpoint (weir verify's rerun) reads again exactly what was read
// before it: b.txt's splits subtask 1 took (up to its position in them),
// not b1, which no one read.
func TestFreshClusterRewindReadsWhatWasTaken(t *testing.T) {
	for _, reads := range []int{1, 1000} {
		fs := vfs.NewMem()
		fs.MkdirAll("/in", 0o755)
		numbered(t, fs, "/in/a.txt", 20)
		writeFile(t, fs, "/in/b.txt", "")
		early := review(t, fs)
		numbered(t, fs, "/in/b.txt", 20)
		late := review(t, fs)
		w := &operatortest.MemWriter{}
		var before lines
		hs := freshCheckpoint(t, w, &before, reads, early, late)
		ctx := opCtx(0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read})
		ctx.Rewind = true
		rd := late()
		if err := rd.Open(ctx); err != nil {
			t.Fatalf("rewind to a checkpoint of a fresh run: %v", err)
		}
		var again lines
		drain(t, rd, &again)
		slices.Sort(again)
		slices.Sort(before)
		if !slices.Equal(again, before) {
			t.Fatalf("%d reads a subtask: rewound, read %d lines (%d of b.txt); before the checkpoint %d (%d of b.txt)",
				reads, len(again), len(only(again, "/in/b.txt")), len(before), len(only(before, "/in/b.txt")))
		}
	}
}
