package file_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
)

// TestTwoSinksShareADirectorySpelledTwoWays: sinks may share a directory
// (file names carry the UID). Two sinks of one job writing one directory,
// one given as dir/out and the other as dir/out/, both run and commit
// every record once. The run-wide lock was keyed by the spelling, so the
// second sink locked the same file again and the job refused itself,
// naming its own process as the holder (found by an outside review,
// session 39).
func TestTwoSinksShareADirectorySpelledTwoWays(t *testing.T) {
	dir := t.TempDir()
	want := writeLines(t, dir, "in.txt", 100)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := weir.New(weir.Config{Job: "share", Parallelism: 1,
		Checkpoint: weir.CheckpointConfig{Interval: 5 * time.Millisecond, Dir: filepath.Join(dir, "ckpt")}})
	lines, err := file.Lines(file.LinesConfig{Pattern: filepath.Join(dir, "in.txt")})
	if err != nil {
		t.Fatal(err)
	}
	format := func(dst []byte, s string) []byte { return append(append(dst, s...), '\n') }
	a, err := file.Sink(file.SinkConfig[string]{Dir: filepath.Join(dir, "out"), Format: format})
	if err != nil {
		t.Fatal(err)
	}
	b, err := file.Sink(file.SinkConfig[string]{Dir: filepath.Join(dir, "out") + string(os.PathSeparator), Format: format})
	if err != nil {
		t.Fatal(err)
	}
	src := weir.Source(e, "lines", lines)
	weir.Sink(src, "a", a)
	weir.Sink(weir.Map(src, "copy", func(s string) string { return "b " + s }), "b", b)
	if _, err := e.Execute(ctx); err != nil {
		t.Fatalf("a job whose two sinks share one output directory (spelled %q and %q) failed: %v", filepath.Join(dir, "out"), filepath.Join(dir, "out")+"/", err)
	}
	counts := committedCounts(t, dir)
	var missing []string
	for _, l := range want {
		if counts[l] != 1 || counts["b "+l] != 1 {
			missing = append(missing, l)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%d lines not committed exactly once by both sinks, e.g. %v", len(missing), missing[:min(3, len(missing))])
	}
}
