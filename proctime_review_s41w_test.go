package weir_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/connector/generator"
	"github.com/weirstream/weir/operator"
)

// tailWait wraps a reader: once it is exhausted, it waits d more before
// it says so, so that processing-time windows close before the end.
type tailWait[T any] struct {
	weir.SourceReader[T]
	d     time.Duration
	until time.Time
}

func (w *tailWait[T]) Read(out weir.Collector[T]) (operator.PollResult, error) {
	if !w.until.IsZero() {
		if time.Now().Before(w.until) {
			return operator.PollResult{IdleUntil: w.until}, nil
		}
		return operator.PollResult{Exhausted: true}, nil
	}
	r, err := w.SourceReader.Read(out)
	if r.Exhausted {
		w.until = time.Now().Add(w.d)
		return operator.PollResult{IdleUntil: w.until}, err
	}
	return r, err
}

// Processing-time windows (tumbling, sliding, sessions) count every record
// once in the committed output, through failures, when the input waits
// long enough at its end for the windows to close.
func TestS41ProcessingTimeWindowsCountOnceThroughFailures(t *testing.T) {
	const n = 3000
	for _, a := range []struct {
		name string
		w    weir.WindowAssigner
		per  int64 // windows a record is in
	}{
		{"tumbling", weir.Tumbling(30 * time.Millisecond), 1},
		{"sliding", weir.Sliding(30*time.Millisecond, 10*time.Millisecond), 3},
		{"session", weir.Session(5 * time.Millisecond), 1},
	} {
		t.Run(a.name, func(t *testing.T) {
			var k atomic.Int64
			out := t.TempDir()
			cfg := eventTimeConfig(weir.StateBackend{})
			e := env(cfg)
			g, err := generator.New(generator.Config[int64]{Count: n, Make: func(i int64) int64 { return i }, BatchSize: 10, RatePerSecond: 6000})
			if err != nil {
				t.Fatal(err)
			}
			src := weir.Source(e, "src", func() weir.SourceReader[int64] { return &tailWait[int64]{SourceReader: g(), d: 300 * time.Millisecond} })
			checked := weir.Map(src, "check", func(i int64) int64 {
				if c := k.Add(1); c == 1000 || c == 2500 {
					panic(errors.New("injected failure"))
				}
				return i
			})
			c := weir.WindowAggregate(weir.Window(weir.KeyBy(checked, func(i int64) int64 { return i % 3 }), a.w.ProcessingTime()), "count", weir.Count[int64]())
			sink, err := file.Sink(file.SinkConfig[string]{Dir: out, Format: lineFormat})
			if err != nil {
				t.Fatal(err)
			}
			weir.Sink(weir.Map(c, "fmt", func(r weir.WindowResult[int64, int64]) string {
				return fmt.Sprintf("%d [%d,%d) %d", r.Key, r.Window.Start.UnixMilli(), r.Window.End.UnixMilli(), r.Value)
			}), "out", sink)
			res := execute(t, e)
			if res.Attempts < 2 {
				t.Fatalf("%d attempts", res.Attempts)
			}
			var total int64
			for _, l := range sortedLines(t, out) {
				f := strings.Fields(l)
				v, _ := strconv.ParseInt(f[len(f)-1], 10, 64)
				total += v
			}
			if total != n*a.per {
				t.Errorf("windows counted %d records, want %d (%d records in %d windows each)", total, n*a.per, n, a.per)
			}
		})
	}
}
