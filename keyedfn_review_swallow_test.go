package weir_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

// TestReviewKPFSinkErrorInProcessingTimerSwallowed: a sink chained after
// a keyed operator fails (permanently) on every record a processing-time
// timer emits: the job must fail. It reported success, every write having
// failed: keyed.FireTimers did not return the chain's error, as
// AdvanceWatermark does (an outside review, session 33).
func TestReviewKPFSinkErrorInProcessingTimerSwallowed(t *testing.T) {
	t.Run("process", func(t *testing.T) {
		e := env(weir.Config{})
		src := weir.Source(e, "n", gen(t, 50, func(i int64) int64 { return i }))
		out := weir.Process(weir.KeyBy(src, func(v int64) int64 { return v }), "p",
			func() weir.KeyedProcessFunction[int64, int64, int64] { return ptAll{weir.ProcessingTime} })
		calls := 0
		weir.Sink(out, "out", weir.SinkFunc(func(v int64) error {
			calls++
			return weir.Permanent(errors.New("sink down"))
		}))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := e.Execute(ctx)
		if err == nil || !strings.Contains(err.Error(), "sink down") || calls != 1 {
			t.Fatalf("job: %v, after %d writes; want it failed by the sink's first write (sink down)", err, calls)
		}
	})
}
