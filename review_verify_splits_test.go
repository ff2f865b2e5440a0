package weir_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
)

// TestReviewVerifyRewindKeepsSplitWatermarks: each split of the file
// source has its own watermark (EnterSplit). The input is one file of two
// splits, each in event-time order, the second earlier than the first;
// at parallelism 2 each subtask reads one split, no record is late, and
// an event-time window counts them all, deterministically. The rewind
// merges what the checkpoint read into ranges of its own (here the whole
// file, one range, one split): the rerun reads the second half after the
// first, its records are late and dropped, and Verify reports the
// committed windows of a correct run as "unexpected".
func TestReviewVerifyRewindKeepsSplitWatermarks(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	var b strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&b, "%06d\n", (i+1000)%2000) // 1000..1999, then 0..999
	}
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	build := func() *weir.Environment {
		lines, err := file.Lines(file.LinesConfig{Pattern: in, SplitBytes: 7000}) // a split per half
		if err != nil {
			t.Fatal(err)
		}
		sink, err := file.Sink(file.SinkConfig[string]{Dir: filepath.Join(dir, "out"), Format: lineFormat})
		if err != nil {
			t.Fatal(err)
		}
		e := weir.New(weir.Config{Job: "splits", Parallelism: 2, Checkpoint: weir.CheckpointConfig{Interval: 5 * time.Millisecond, Dir: filepath.Join(dir, "ckpt")}})
		s := weir.Source(e, "lines", lines, weir.Watermarks(weir.Monotonous(func(l string) time.Time {
			ms, _ := strconv.Atoi(l)
			return time.UnixMilli(int64(ms))
		})))
		counts := weir.WindowAggregate(weir.Window(weir.KeyBy(s, func(string) int { return 0 }), weir.Tumbling(100*time.Millisecond)), "counts", weir.Count[string]())
		weir.Sink(weir.Map(counts, "text", func(r weir.WindowResult[int, int64]) string {
			return fmt.Sprintf("[%d,%d) %d", r.Window.Start.UnixMilli(), r.Window.End.UnixMilli(), r.Value)
		}), "out", sink)
		return e
	}
	execute(t, build())
	var err error
	total := 0
	for l := range committedLines(t, filepath.Join(dir, "out")) {
		_, n, _ := strings.Cut(l, ") ")
		k, _ := strconv.Atoi(n)
		total += k
	}
	if total != 2000 {
		t.Fatalf("the run counted %d records, want 2000 (none late)", total)
	}
	rep, err := build().Verify(context.Background(), weir.VerifyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("a run that dropped no record does not verify:\n%s", short(rep))
	}
}
