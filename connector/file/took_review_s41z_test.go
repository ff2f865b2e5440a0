package file

import (
	"errors"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// freshCheckpoint runs a fresh cluster of len(builds) subtasks, subtask i
// from builds[i] (its process's listing), each read reads times (0: to its
// end), and checkpoints it as 1.
func freshCheckpoint(t *testing.T, w *operatortest.MemWriter, got *lines, reads int, builds ...func() weir.SourceReader[string]) []checkpoint.Handle {
	t.Helper()
	var hs []checkpoint.Handle
	for sub, newReader := range builds {
		rd := newReader()
		if err := rd.Open(opCtx(sub, len(builds), nil)); err != nil {
			t.Fatal(err)
		}
		if reads == 0 {
			drain(t, rd, got)
		}
		for range reads {
			res, err := rd.Read(got)
			if err != nil {
				t.Fatal(err)
			}
			if res.Exhausted {
				break
			}
		}
		async, err := rd.Snapshot(1)
		if err != nil {
			t.Fatal(err)
		}
		more, err := async(w)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, more...)
		rd.Close()
	}
	return hs
}

// TestS41zRewindAfterRestoreOfAFileThatGrew: b.txt is empty in subtask 0's
// glob and 250 bytes (3 splits) in subtask 1's, which takes [0,100) and
// [200,250). Before the restore b.txt grows to 510 bytes (it is being
// written: it was empty a moment before). The restore (parallelism 1)
// cuts what was not taken from the taken splits' ends: [100,200),
// [250,350), [350,450), [450,510), and subtask 0 records b.txt as known,
// 510 bytes in splits of 100. A checkpoint taken while those splits are
// pending records splits at 250, 350, 450, none of the 0,100,200,... grid
// the rewind makes from "sizes": the rewind of that checkpoint (weir
// verify's rerun) fails for good.
func TestS41zRewindAfterRestoreOfAFileThatGrew(t *testing.T) {
	fs := vfs.NewMem()
	fs.MkdirAll("/in", 0o755)
	numbered(t, fs, "/in/a.txt", 20)
	writeFile(t, fs, "/in/b.txt", "")
	early := review(t, fs)
	numbered(t, fs, "/in/b.txt", 20)
	late := review(t, fs)
	w := &operatortest.MemWriter{}
	var before lines
	hs := freshCheckpoint(t, w, &before, 0, early, late)
	numbered(t, fs, "/in/b.txt", 40) // grew: 510 bytes
	later := review(t, fs)

	rd := later()
	if err := rd.Open(opCtx(0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read})); err != nil {
		t.Fatal(err)
	}
	if _, err := rd.Read(&before); err != nil { // one batch, then checkpoint 2
		t.Fatal(err)
	}
	async, err := rd.Snapshot(2)
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
	rw := later()
	if err := rw.Open(ctx); err != nil {
		t.Fatalf("rewind to checkpoint 2, taken after a restore that read the rest of b.txt: %v", err)
	}
	var again lines
	drain(t, rw, &again)
	slices.Sort(again)
	slices.Sort(before)
	if !slices.Equal(again, before) {
		t.Fatalf("rewound, read %d lines; before checkpoint 2 %d", len(again), len(before))
	}
}

// TestS41zTookFileMissingAtRestoreIsForgotten: as
// TestS41yFreshClusterAMultiSplitFileEmptyInSubtask0IsLostForGood, b.txt
// empty in subtask 0's glob; subtask 1 reads b0 and b2, b1 no one. b.txt
// is out of the input at the restore (moved away a while, say). A known
// file with lines unread would fail the restore (ErrUnreadInputDropped,
// "put them back"); b.txt's b1 is dropped without a word, and b.txt is
// forgotten: the restore's checkpoint neither knows it nor records took.
// Put back, the next restore reads b.txt again from its start: b0 and b2
// twice.
func TestS41zTookFileMissingAtRestoreIsForgotten(t *testing.T) {
	fs := vfs.NewMem()
	fs.MkdirAll("/in", 0o755)
	fs.MkdirAll("/away", 0o755)
	a := numbered(t, fs, "/in/a.txt", 20)
	writeFile(t, fs, "/in/b.txt", "")
	early := review(t, fs)
	b := numbered(t, fs, "/in/b.txt", 20)
	late := review(t, fs)
	w := &operatortest.MemWriter{}
	var got lines
	hs := freshCheckpoint(t, w, &got, 0, early, late)

	if err := fs.Rename("/in/b.txt", "/away/b.txt"); err != nil {
		t.Fatal(err)
	}
	without := review(t, fs)
	rd := without()
	err := rd.Open(opCtx(0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read}))
	if errors.Is(err, ErrUnreadInputDropped) {
		return // told, as for a known file
	}
	if err != nil {
		t.Fatal(err)
	}
	drain(t, rd, &got)
	async, err := rd.Snapshot(2)
	if err != nil {
		t.Fatal(err)
	}
	hs2, err := async(w)
	if err != nil {
		t.Fatal(err)
	}
	rd.Close()
	t.Logf("restore without b.txt: no error; b.txt lines read so far %d of %d", len(only(got, "/in/b.txt")), len(b))

	if err := fs.Rename("/away/b.txt", "/in/b.txt"); err != nil {
		t.Fatal(err)
	}
	back := review(t, fs)
	rd = back()
	if err := rd.Open(opCtx(0, 1, &operator.Restore{Checkpoint: 2, Handles: hs2, Read: w.Read})); err != nil {
		t.Fatal(err)
	}
	drain(t, rd, &got)
	rd.Close()
	once(t, "a.txt", only(got, "/in/a.txt"), a)
	once(t, "b.txt, out of the input at one restore and back at the next", only(got, "/in/b.txt"), b)
}

// TestS41zRewindOfAFileSmallerInSubtask0sGlob: z.txt has 5 lines (60
// bytes, one split) when subtask 0's process globs and 40 (510 bytes, 6
// splits) when subtask 1's does. z.txt has place 1: in subtask 1's deal
// it takes z0, z2, z4 ([0,100), [200,300), [400,500)) and reads them.
// Subtask 0 knows z.txt at 60 bytes and records it; subtask 1 records the
// ranges it took (took), but the rewind skips took for a file subtask 0
// knew: the rewind of the checkpoint reads z.txt up to 60 bytes, not
// z2, z4, which were read before it.
func TestS41zRewindOfAFileSmallerInSubtask0sGlob(t *testing.T) {
	fs := vfs.NewMem()
	fs.MkdirAll("/in", 0o755)
	numbered(t, fs, "/in/a.txt", 20)
	numbered(t, fs, "/in/z.txt", 5)
	early := review(t, fs)
	numbered(t, fs, "/in/z.txt", 40)
	late := review(t, fs)
	w := &operatortest.MemWriter{}
	var before lines
	hs := freshCheckpoint(t, w, &before, 0, early, late)
	ctx := opCtx(0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read})
	ctx.Rewind = true
	rd := late()
	if err := rd.Open(ctx); err != nil {
		t.Fatalf("rewind: %v", err)
	}
	var again lines
	drain(t, rd, &again)
	slices.Sort(again)
	slices.Sort(before)
	if !slices.Equal(again, before) {
		t.Fatalf("rewound, read %d lines (%d of z.txt); before the checkpoint %d (%d of z.txt)",
			len(again), len(only(again, "/in/z.txt")), len(before), len(only(before, "/in/z.txt")))
	}
}
