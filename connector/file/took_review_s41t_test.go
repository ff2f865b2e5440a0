package file

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestS41tWarningMaskedByAFileThatLandsBeforeTheRestore: the case of
// TestRestoreWarnsOfWhatOnlyANonTakerListed (a.txt's lines 5 to 14 were
// listed only by subtask 2's process, which took no split of it: lost),
// but a new file lands in the input before the restore, as one does in a
// landing directory. The restore counts the new file's bytes as bytes of
// the fresh start's listing that the job reads ("accounted"), so the
// listed bytes no longer exceed them: the 10 lines are lost and the restore
// says nothing. README: "the restore then warns".
func TestS41tWarningMaskedByAFileThatLandsBeforeTheRestore(t *testing.T) {
	fs := vfs.NewMem()
	fs.MkdirAll("/in", 0o755)
	numbered(t, fs, "/in/a.txt", 5)
	early := review(t, fs)
	a := numbered(t, fs, "/in/a.txt", 15)
	late := review(t, fs)
	w := &operatortest.MemWriter{}
	var got lines
	hs := freshCheckpoint(t, w, &got, 0, early, early, late)
	numbered(t, fs, "/in/n.txt", 20) // lands before the restore
	var logs bytes.Buffer
	run := &operatortest.Run{Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	rd := review(t, fs)()
	if err := rd.Open(run.Context("src", 0, 1, &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read})); err != nil {
		t.Fatal(err)
	}
	drain(t, rd, &got)
	rd.Close()
	n := len(only(got, "/in/a.txt"))
	if n < len(a) && !strings.Contains(logs.String(), "a process listed more of the input at the job's start than the files the job took then") {
		t.Fatalf("read %d of a.txt's %d lines, and the restore did not warn; it logged:\n%s", n, len(a), logs.String())
	}
}

var _ weir.SourceReader[string] = (*lineReader)(nil)
