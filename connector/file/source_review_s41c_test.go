package file

import (
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestS41cFreshClusterAFileEmptyInOneProcessIsReadTwice: a cluster of two
// processes builds the job, each globbing itself (as the deal_review tests
// have it). b.txt is in a landing directory: created, still empty when
// subtask 0's process globs, written (5 lines, one split) when subtask 1's does.
// Both see the same files, so b.txt has one place and its only split is
// dealt to subtask 1, which reads it to the end. But only subtask 0
// records the files the job took ("files", union state), and in its
// process b.txt was empty, so not known. The restore of a checkpoint
// taken after subtask 1 read b.txt (any parallelism; here the same) finds
// b.txt unknown and reads it again from its start: its 5 lines twice,
// silently (the log says it reads "files the checkpoint did not read").
func TestS41cFreshClusterAFileEmptyInOneProcessIsReadTwice(t *testing.T) {
	fs := vfs.NewMem()
	fs.MkdirAll("/in", 0o755)
	a := numbered(t, fs, "/in/a.txt", 20) // 248 bytes: 3 splits, place 0
	writeFile(t, fs, "/in/b.txt", "")     // place 1: its split 0 goes to subtask 1
	early := review(t, fs)                // subtask 0's process
	b := numbered(t, fs, "/in/b.txt", 5)  // its writer filled it: 60 bytes, one split
	late := review(t, fs)                 // subtask 1's process
	w := &operatortest.MemWriter{}
	var got lines
	hs := freshCheckpoint(t, w, &got, 0, early, late)
	once(t, "the fresh run", got, a, b)
	// The job fails after checkpoint 1 and is restored (both processes
	// now see b.txt written).
	rs := &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read}
	for sub := range 2 {
		rd := late()
		if err := rd.Open(opCtx(sub, 2, rs)); err != nil {
			t.Fatal(err)
		}
		drain(t, rd, &got)
		rd.Close()
	}
	once(t, "after a restore of a checkpoint that had read everything", got, a, b)
}
