package file

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// s41uOpen opens a reader of newReader as subtask sub of p, restoring
// (rewind: rewinding) hs when not nil.
func s41uOpen(t *testing.T, w *operatortest.MemWriter, newReader func() weir.SourceReader[string], sub, p int, hs []checkpoint.Handle, rewind bool) weir.SourceReader[string] {
	t.Helper()
	var rs *operator.Restore
	if hs != nil {
		rs = &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read}
	}
	ctx := opCtx(sub, p, rs)
	ctx.Rewind = rewind
	rd := newReader()
	if err := rd.Open(ctx); err != nil {
		t.Fatalf("open subtask %d of %d (rewind %v): %v", sub, p, rewind, err)
	}
	return rd
}

func s41uSnap(t *testing.T, w *operatortest.MemWriter, rd weir.SourceReader[string]) []checkpoint.Handle {
	t.Helper()
	async, err := rd.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	hs, err := async(w)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

// TestS41uFileEmptyInTheTakersListingButNotInSubtask0sIsLost: a cluster
// of 2 processes, subtask 1's built first (a replacement worker, say, or
// just the order the processes started in): b.txt is empty in its listing,
// 5 lines in subtask 0's. b.txt's one split goes to subtask 1, which has
// none; subtask 0 takes nothing of it but knows it (60 bytes): the
// checkpoint records b.txt as a known file, with no took. The restore takes
// a known file as read: b.txt is never read. (The generator grows files
// only after a process listed, in subtask order: subtask 0's listing is
// always the smallest, and it never makes this case.)
func TestS41uFileEmptyInTheTakersListingButNotInSubtask0sIsLost(t *testing.T) {
	fs := vfs.NewMem()
	fs.MkdirAll("/in", 0o755)
	a := numbered(t, fs, "/in/a.txt", 20)
	writeFile(t, fs, "/in/b.txt", "")
	sub1 := review(t, fs) // subtask 1's process lists first
	b := numbered(t, fs, "/in/b.txt", 5)
	sub0 := review(t, fs)
	w := &operatortest.MemWriter{}
	var got lines
	var hs []checkpoint.Handle
	for sub, nr := range []func() weir.SourceReader[string]{sub0, sub1} {
		rd := s41uOpen(t, w, nr, sub, 2, nil, false)
		drain(t, rd, &got)
		hs = append(hs, s41uSnap(t, w, rd)...)
		rd.Close()
	}
	before := slices.Clone(got)
	// The rewind of the checkpoint reads what was read before it.
	rw := s41uOpen(t, w, sub0, 0, 1, hs, true)
	var again lines
	drain(t, rw, &again)
	rw.Close()
	slices.Sort(again)
	slices.Sort(before)
	rewound := slices.Equal(again, before)

	rd := s41uOpen(t, w, sub0, 0, 1, hs, false)
	drain(t, rd, &got)
	rd.Close()
	if !rewound {
		t.Errorf("rewind: read %d lines (%d of b.txt), before the checkpoint %d (%d of b.txt)", len(again), len(only(again, "/in/b.txt")), len(before), len(only(before, "/in/b.txt")))
	}
	once(t, "a.txt", only(got, "/in/a.txt"), a)
	once(t, "b.txt, empty in the listing of the subtask its split was dealt to", only(got, "/in/b.txt"), b)
}

// TestS41uRewindAfterSplitBytesChanged: a fresh start in splits of 100
// reads a.txt (40 lines, 510 bytes) into its second split; the restore
// runs with SplitBytes 150 (a program that changed LinesConfig.SplitBytes,
// or a Weir whose default changed), and subtask 0 records a.txt as known
// in splits of 150 while the splits pending are the fresh start's, of 100
// ([200,300), [300,400), ...). The rewind of the restore's checkpoint
// (weir verify's rerun) cuts the grid of 150 and takes out what recorded
// splits starting in each grid split had not read: [400,500), recorded and
// not begun, starts in [300,450) and is taken out of it, but grid split
// [450,510) holds only the start of [500,510): the rewind reads [450,500),
// which no run had read.
func TestS41uRewindAfterSplitBytesChanged(t *testing.T) {
	fs := vfs.NewMem()
	fs.MkdirAll("/in", 0o755)
	numbered(t, fs, "/in/a.txt", 40)
	by := func(split int64) func() weir.SourceReader[string] {
		nr, err := Lines(LinesConfig{FS: fs, Pattern: "/in/*.txt", SplitBytes: split, BatchLines: 7})
		if err != nil {
			t.Fatal(err)
		}
		return nr
	}
	w := &operatortest.MemWriter{}
	var before lines
	rd := s41uOpen(t, w, by(100), 0, 1, nil, false)
	for range 2 {
		if _, err := rd.Read(&before); err != nil {
			t.Fatal(err)
		}
	}
	hs := s41uSnap(t, w, rd)
	rd.Close()

	rd = s41uOpen(t, w, by(150), 0, 1, hs, false)
	if _, err := rd.Read(&before); err != nil {
		t.Fatal(err)
	}
	hs2 := s41uSnap(t, w, rd)
	t.Logf("pending at checkpoint 2: %+v", rd.(*lineReader).mine)
	rd.Close()

	rw := s41uOpen(t, w, by(150), 0, 1, hs2, true)
	var again lines
	drain(t, rw, &again)
	rw.Close()
	slices.Sort(again)
	slices.Sort(before)
	if !slices.Equal(again, before) {
		var extra []string
		for _, l := range again {
			if _, ok := slices.BinarySearch(before, l); !ok {
				extra = append(extra, l)
			}
		}
		t.Fatalf("rewind to checkpoint 2 read %d lines, %d read before it; not read before: %q", len(again), len(before), extra)
	}
}

// TestRestoreWarnsOfWhatOnlyANonTakerListed: a cluster of 3 processes;
// a.txt has 5 lines (one split of 100) when subtasks 0's and 1's processes
// list the input, 15 (2 splits) when subtask 2's does. Split 1 is dealt to
// subtask 1, whose process did not have it, and subtask 2 takes no split
// of a.txt: no record holds its size there, and lines 5 to 14 are not read
// (design note 137). The restore cannot read them, and says so: every
// process's listing records its bytes, and the restore finds one listed
// more than the job reads.
func TestRestoreWarnsOfWhatOnlyANonTakerListed(t *testing.T) {
	fs := vfs.NewMem()
	fs.MkdirAll("/in", 0o755)
	numbered(t, fs, "/in/a.txt", 5)
	early := review(t, fs)
	a := numbered(t, fs, "/in/a.txt", 15)
	late := review(t, fs)
	w := &operatortest.MemWriter{}
	var got lines
	hs := freshCheckpoint(t, w, &got, 0, early, early, late)
	var logs bytes.Buffer
	run := &operatortest.Run{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	rd := late()
	if err := rd.Open(run.Context("src", 0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read})); err != nil {
		t.Fatal(err)
	}
	drain(t, rd, &got)
	rd.Close()
	if n := len(only(got, "/in/a.txt")); n != 5 || !strings.Contains(logs.String(), "a process listed more of the input at the job's start than the files the job took then") {
		t.Fatalf("read %d of a.txt's %d lines (want the 5 the takers saw), and the restore logged:\n%s", n, len(a), logs.String())
	}
	// A local job (every subtask one listing) warns of nothing.
	fs2 := vfs.NewMem()
	fs2.MkdirAll("/in", 0o755)
	numbered(t, fs2, "/in/a.txt", 15)
	one := review(t, fs2)
	w2 := &operatortest.MemWriter{}
	hs = freshCheckpoint(t, w2, &got, 1, one, one, one)
	logs.Reset()
	rd = one()
	if err := rd.Open(run.Context("src", 0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w2.Read})); err != nil {
		t.Fatal(err)
	}
	rd.Close()
	if strings.Contains(logs.String(), "listed more") {
		t.Fatalf("one listing for every subtask, and the restore warned:\n%s", logs.String())
	}
}
