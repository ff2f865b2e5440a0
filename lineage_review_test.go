package weir_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/weirstream/weir"
)

// Review of d5fea69 (lineages). The runtime's check (startedOverSince)
// orders checkpoints by id, but ids are per storage and start again at 1
// in an empty one. A checkpoint kept elsewhere (as the README's own case
// does) from before a start over is then restored although the job's
// storage holds that newer run's checkpoints: only the directory and
// PostgreSQL sinks would catch it; with an output that records no lineage
// (standard output here, Kafka alike: "only the runtime's check
// applies") the restore goes ahead and appends the old run's continuation
// after the newer run's output.
func TestReviewRestoreFromBeforeStartOverWithLowerIDsIsRefused(t *testing.T) {
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	stdout := os.Stdout
	os.Stdout = devnull // the word count's "-" output
	defer func() { os.Stdout = stdout }()

	dir := t.TempDir()
	o := wcInput(t, dir)
	o.Output = "-"
	cancelAfter(t, o, 4)
	chks := completedCheckpoints(dir)
	saved := filepath.Join(dir, "saved", filepath.Base(chks[len(chks)-1]))
	if err := os.CopyFS(saved, os.DirFS(chks[len(chks)-1])); err != nil {
		t.Fatal(err)
	}
	// The checkpoints are moved out of the job's storage, and the job
	// starts over: a run of another lineage, whose ids start at 1.
	if err := os.Rename(filepath.Join(dir, "ckpt"), filepath.Join(dir, "ckpt-old")); err != nil {
		t.Fatal(err)
	}
	o.Fresh = true
	cancelAfter(t, o, 2)
	o.Fresh = false
	if n := len(completedCheckpoints(dir)); n == 0 {
		t.Fatal("the run that started over left no checkpoint")
	}
	t.Logf("saved %s; the new run's checkpoints: %v", filepath.Base(saved), completedCheckpoints(dir))
	o.Restore = saved
	_, err = executeErr(t, o)
	if !errors.Is(err, weir.ErrStartedOver) {
		t.Fatalf("restore of a checkpoint taken before a run that started over, whose checkpoints are in the job's storage: %v, want weir.ErrStartedOver", err)
	}
}
