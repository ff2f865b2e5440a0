package file

import (
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestS41vRewindAfterRestoreOfAFileShorterInSubtask0sGlob: z.txt is 146
// bytes (12 lines) in subtask 0's glob and 250 (20 lines) in subtask 1's.
// z.txt has place 1: subtask 0 takes z1 = [100,146) (its view's last split,
// cut short at its size); subtask 1 takes z0 and z2 = [0,100), [200,250).
// The restore (parallelism 1) reads what no one took: [146,200), a split
// that starts off the 100-byte grid. A checkpoint taken before that split
// is done records it at byte 146; its rewind (weir verify's rerun) rebuilds
// z.txt from "sizes" as [0,100) [100,200) [200,250) and fails for good:
// "records a split of /in/z.txt at byte 146, which is not one of the splits
// it records the file was read in".
func TestS41vRewindAfterRestoreOfAFileShorterInSubtask0sGlob(t *testing.T) {
	fs := vfs.NewMem()
	fs.MkdirAll("/in", 0o755)
	numbered(t, fs, "/in/a.txt", 20)
	numbered(t, fs, "/in/z.txt", 12) // 146 bytes
	early := review(t, fs)
	numbered(t, fs, "/in/z.txt", 20) // 250 bytes
	late := review(t, fs)
	w := &operatortest.MemWriter{}
	var before lines
	hs := freshCheckpoint(t, w, &before, 0, early, late)

	rd := late()
	if err := rd.Open(opCtx(0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read})); err != nil {
		t.Fatal(err)
	}
	t.Logf("after the restore, pending: %+v", rd.(*lineReader).mine)
	async, err := rd.Snapshot(2) // before the untaken split is read
	if err != nil {
		t.Fatal(err)
	}
	hs2, err := async(w)
	if err != nil {
		t.Fatal(err)
	}
	rd.Close()

	ctx := opCtx(0, 1, &operator.Restore{Checkpoint: 2, Handles: hs2, Read: w.Read})
	ctx.Rewind = true
	rw := late()
	if err := rw.Open(ctx); err != nil {
		t.Fatalf("rewind to checkpoint 2, taken after a restore that reads z.txt's untaken [146,200): %v", err)
	}
	var again lines
	drain(t, rw, &again)
	slices.Sort(again)
	slices.Sort(before)
	if !slices.Equal(again, before) {
		t.Fatalf("rewound, read %d lines; before checkpoint 2 %d", len(again), len(before))
	}
}
