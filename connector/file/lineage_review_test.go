package file

import (
	"errors"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/operator/operatortest"
)

// renameFails fails every rename of a lineage file into place.
type renameFails struct{ vfs.FS }

func (f renameFails) Rename(from, to string) error {
	if strings.Contains(from, ".lineage-") {
		return errors.New("planted: rename failed")
	}
	return f.FS.Rename(from, to)
}

// Review of d5fea69 (lineages): a start whose lineage file could not be
// renamed into place leaves .lineage-<uid>-<sub>.tmp in the output
// directory, and nothing removes it: a later restore never writes a
// lineage, and a start at a lower parallelism never writes that
// subtask's file again.
func TestReviewLineageTempFileIsNotLeftBehind(t *testing.T) {
	mem := vfs.NewMem()
	run := &operatortest.Run{Lineage: "A"}
	t.Cleanup(func() { run.Close() })
	newSink, err := Sink(SinkConfig[string]{FS: renameFails{mem}, Dir: "/out", Format: format})
	if err != nil {
		t.Fatal(err)
	}
	s := newSink().(*fileSink[string])
	if err := s.Open(run.Context("sink", 1, 2, nil)); err == nil {
		t.Fatal("open with a failing rename: no error")
	}
	s.Close()
	run.Close()
	// The next run (parallelism 1) starts and ends normally.
	run = &operatortest.Run{Lineage: "B"}
	newSink, err = Sink(SinkConfig[string]{FS: mem, Dir: "/out", Format: format})
	if err != nil {
		t.Fatal(err)
	}
	s = newSink().(*fileSink[string])
	ctx := run.Context("sink", 0, 1, nil)
	ctx.StartOver = true
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	s.Close()
	names, _ := mem.List("/out")
	for _, n := range names {
		if strings.HasSuffix(n, ".tmp") {
			t.Fatalf("output directory holds %s after a later start: %v", n, names)
		}
	}
}
