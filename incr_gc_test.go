package weir_test

// Outside review (session 35): incremental heap checkpoints with several in
// flight, more than one retained, local recovery, failovers, an explicit
// restore of an older retained checkpoint: the output is exact, and at the
// end the job directory's shared files are exactly those the completed
// checkpoints reference (none deleted early, none leaked).

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/storage"
)

func sharedFilesOnDisk(t *testing.T, jobDir string) []string {
	t.Helper()
	var out []string
	root := filepath.Join(jobDir, storage.SharedDir)
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(jobDir, p)
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	slices.Sort(out)
	return out
}

func sharedFilesReferenced(t *testing.T, jobDir string) ([]string, []string) {
	t.Helper()
	var refs, ids []string
	metas, _ := filepath.Glob(filepath.Join(jobDir, "chk-*", "_metadata"))
	for _, p := range metas {
		m, err := storage.ReadMetadata(vfs.Default, p)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, filepath.Base(filepath.Dir(p)))
		for _, ts := range m.Tasks {
			for _, h := range ts.Handles {
				if storage.IsShared(h) {
					refs = append(refs, h.Path)
				}
			}
		}
	}
	slices.Sort(refs)
	return slices.Compact(refs), ids
}

func checkSharedFiles(t *testing.T, jobDir, when string) {
	t.Helper()
	disk := sharedFilesOnDisk(t, jobDir)
	refs, ids := sharedFilesReferenced(t, jobDir)
	var missing, leaked []string
	for _, r := range refs {
		if !slices.Contains(disk, r) {
			missing = append(missing, r)
		}
	}
	for _, d := range disk {
		if !slices.Contains(refs, d) {
			leaked = append(leaked, d)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%s: checkpoints %v reference shared files that are gone: %v", when, ids, missing)
	}
	if len(leaked) > 0 {
		t.Errorf("%s: %d shared files no checkpoint (%v) references are left: %v", when, len(leaked), ids, leaked)
	}
}

func TestIncrementalRetentionAndFailoversKeepSharedFilesExact(t *testing.T) {
	dir := t.TempDir()
	o := wcInput(t, dir)
	o.Checkpoint.Retained = 3
	o.Checkpoint.MaxConcurrent = 3
	o.Checkpoint.Interval = time.Millisecond
	o.LocalRecovery, o.LocalRecoveryDir = true, filepath.Join(dir, "local")
	jobDir := filepath.Join(dir, "ckpt", "wordcount")

	cancelAfter(t, o, 6)
	checkSharedFiles(t, jobDir, "after the first run")
	chks := completedCheckpoints(dir)
	if len(chks) < 2 {
		t.Fatalf("checkpoints %v", chks)
	}
	// Restore the oldest retained one, with failovers on the way.
	o.Restore = chks[0]
	var words atomic.Int64
	paced := func(string) {}
	_ = paced
	o.BeforeCount = func(string) {
		n := words.Add(1)
		if n%200 == 0 {
			time.Sleep(time.Millisecond)
		}
		if n == 20_000 || n == 60_000 || n == 61_000 || n == 120_000 {
			panic("injected failure")
		}
	}
	o.Restart = weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: 10}
	res, err := executeErr(t, o)
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	t.Logf("second run: %d attempts", res.Attempts)
	if rep := report(t, o); !rep.OK() {
		t.Fatalf("output: %v", rep)
	}
	checkSharedFiles(t, jobDir, "after the second run")
	_ = os.Remove
	_ = strings.Contains
}
