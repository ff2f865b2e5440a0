package weir_test

import (
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

// A job that read a directory to its end is resumed (Restore "latest")
// after a file was added, as note 60 makes the file source do: the
// resumed run reads the new file. Its records are on time for the
// windows they fall in (nothing has fired there, no watermark ever passed
// them while records could come), and Flink, which does not checkpoint
// watermarks, counts them. The final checkpoint of the first run recorded
// the end of event time (MaxTime) as the window's watermark, and the
// resumed window took it back: every new record was dropped as late.
func TestS41ResumedEndedJobCountsNewFile(t *testing.T) { s41Resumed(t, false) }

// The same with a keyed function's event-time timers: one registered in
// the resumed run, at its record's time, never fires.
func TestS41ResumedEndedJobFiresNewTimers(t *testing.T) { s41Resumed(t, true) }

func s41Resumed(t *testing.T, wantTimers bool) {
	dir := t.TempDir()
	in, out, ck := filepath.Join(dir, "in"), filepath.Join(dir, "out"), filepath.Join(dir, "ckpt")
	if err := os.MkdirAll(in, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string, ts ...int64) {
		var b strings.Builder
		for _, x := range ts {
			fmt.Fprintln(&b, x)
		}
		if err := os.WriteFile(filepath.Join(in, name), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(restore bool) {
		timers := wantTimers
		cfg := weir.Config{Parallelism: 1, WatermarkInterval: time.Millisecond, Logger: s41Log,
			Checkpoint: weir.CheckpointConfig{Interval: 10 * time.Millisecond, Dir: ck}}
		if restore {
			cfg.Restore = "latest"
		}
		e := weir.New(cfg)
		src, err := file.Lines(file.LinesConfig{Pattern: filepath.Join(in, "*.txt")})
		if err != nil {
			t.Fatal(err)
		}
		at := func(l string) time.Time { x, _ := strconv.ParseInt(l, 10, 64); return time.UnixMilli(x) }
		lines := weir.Source(e, "lines", src, weir.Watermarks(weir.BoundedOutOfOrderness(0, at)))
		c := weir.WindowAggregate(weir.Window(weir.KeyBy(lines, func(string) string { return "all" }), weir.Tumbling(time.Second)),
			"count", weir.Count[string]())
		sink, err := file.Sink(file.SinkConfig[string]{Dir: out, Format: lineFormat})
		if err != nil {
			t.Fatal(err)
		}
		weir.Sink(weir.Map(c, "fmt", func(r weir.WindowResult[string, int64]) string {
			return fmt.Sprintf("[%d,%d) %d", r.Window.Start.UnixMilli(), r.Window.End.UnixMilli(), r.Value)
		}), "out", sink)
		if timers {
			weir.Sink(weir.Process(weir.KeyBy(lines, func(l string) string { return l }), "timers",
				func() weir.KeyedProcessFunction[string, string, string] { return s41Timer{} }), "out timers", sink)
		}
		s41Run(t, e)
	}
	write("a.txt", 1000, 1500, 2100)
	run(false)
	write("b.txt", 5000, 5100, 6200)
	run(true)
	want := []string{"[1000,2000) 2", "[2000,3000) 1", "[5000,6000) 2", "[6000,7000) 1"}
	if wantTimers {
		want = append(want, "timer 1000", "timer 1500", "timer 2100", "timer 5000", "timer 5100", "timer 6200")
	}
	s41Diff(t, sortedLines(t, out), want)
}

// s41Timer registers an event-time timer at each record's time and
// emits when it fires.
type s41Timer struct{}

func (s41Timer) Process(c *weir.KeyedContext[string], _ string, _ weir.Collector[string]) error {
	c.RegisterEventTimer(c.Timestamp())
	return nil
}

func (s41Timer) OnTimer(_ *weir.KeyedContext[string], at time.Time, out weir.Collector[string]) error {
	out.Collect(fmt.Sprintf("timer %d", at.UnixMilli()))
	return nil
}
