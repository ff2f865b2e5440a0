package file

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/weirstream/weir/storage"
)

// TestMatchesUnderLinkedCheckpointDirNotYetCreated: the checkpoint
// directory ck is a symbolic link to real; the job directory ck/wordcount
// does not exist yet (a first run). An input pattern naming the job
// directory by its real path matches its lock file and checkpoints once
// they are written, so the first run must refuse it, as a restore (when the
// job directory exists and the link resolves) does.
func TestMatchesUnderLinkedCheckpointDirNotYetCreated(t *testing.T) {
	tmp, _ := filepath.EvalSymlinks(t.TempDir())
	real := filepath.Join(tmp, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(tmp, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	files, dirs := storage.JobDirEntries()
	for _, tc := range []struct{ pattern, ck string }{
		{filepath.Join(real, "wordcount", "*"), link},
		{filepath.Join(link, "wordcount", "*"), real},
	} {
		jobDir := filepath.Join(tc.ck, "wordcount")
		first := MatchesUnder(tc.pattern, jobDir, files, dirs)
		if err := os.MkdirAll(filepath.Join(real, "wordcount"), 0o755); err != nil {
			t.Fatal(err)
		}
		restore := MatchesUnder(tc.pattern, jobDir, files, dirs)
		os.RemoveAll(filepath.Join(real, "wordcount"))
		if !first || !restore {
			t.Errorf("MatchesUnder(%s, %s): %v before the job directory exists, %v after; want true both times", tc.pattern, jobDir, first, restore)
		}
	}
}

// TestMatchesUnderCheckpointIDsOtherThanTheSample: JobDirEntries samples
// chk-<id> and _rollback-<id> with id 1 only; a pattern whose wildcards
// exclude 1 still matches the checkpoints 2, 10, ... the job writes.
func TestMatchesUnderCheckpointIDsOtherThanTheSample(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck", "wordcount")
	files, dirs := storage.JobDirEntries()
	for _, p := range []string{"chk-??/*", "chk-[2-9]/_metadata", "_rollback-[2-9]*"} {
		if !MatchesUnder(filepath.Join(dir, p), dir, files, dirs) {
			t.Errorf("MatchesUnder(%s) = false; the job writes %s", filepath.Join(dir, p), filepath.Join(dir, "chk-12 / chk-2 / _rollback-2"))
		}
	}
}
