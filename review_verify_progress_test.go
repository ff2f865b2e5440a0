package weir_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/connector/generator"
)

// TestReviewVerifyProgressEndsWithVerify: Verify returns while its
// progress goroutine may still be in a call of VerifyConfig.Progress (it
// closes the goroutine's stop channel and does not wait for it): the
// goroutine outlives Verify, and the caller's callback runs after Verify
// returned (a test's t.Logf there panics).
func TestReviewVerifyProgressEndsWithVerify(t *testing.T) {
	dir := t.TempDir()
	var slow atomic.Bool
	build := func() *weir.Environment {
		src, err := generator.New(generator.Config[int64]{Count: 1500, Make: func(i int64) int64 { return i }})
		if err != nil {
			t.Fatal(err)
		}
		sink, err := file.Sink(file.SinkConfig[string]{Dir: filepath.Join(dir, "out"), Format: lineFormat})
		if err != nil {
			t.Fatal(err)
		}
		e := weir.New(weir.Config{Job: "progress", Checkpoint: weir.CheckpointConfig{Interval: time.Hour, Dir: filepath.Join(dir, "ckpt")}})
		weir.Sink(weir.Map(weir.Source(e, "numbers", src), "m", func(i int64) string {
			if slow.Load() {
				time.Sleep(time.Millisecond)
			}
			return fmt.Sprint(i)
		}), "out", sink)
		return e
	}
	execute(t, build())
	opt := goleak.IgnoreCurrent()
	slow.Store(true) // the rerun lasts over a second: Progress is called
	var returned, late atomic.Bool
	rep, err := build().Verify(context.Background(), weir.VerifyConfig{Progress: func(int64) {
		time.Sleep(3 * time.Second)
		if returned.Load() {
			late.Store(true)
		}
	}})
	returned.Store(true)
	if err != nil || !rep.OK() {
		t.Fatalf("%v\n%s", err, rep)
	}
	if err := goleak.Find(opt); err != nil {
		time.Sleep(3 * time.Second)
		t.Fatalf("Verify returned with its progress goroutine running (Progress called after Verify returned: %v): %v", late.Load(), err)
	}
}
