package weir_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

// TestNilFactoryOtherShapes: the nil factory results the fix did not test:
// a source with Watermarks (wrapped in timedSource), KeyedCoProcess.
func TestNilFactoryOtherShapes(t *testing.T) {
	for name, build := range map[string]func(e *weir.Environment){
		"tsrc": func(e *weir.Environment) {
			weir.Sink(weir.Source(e, "tsrc", func() weir.SourceReader[int64] { return nil }, weir.Watermarks(weir.Monotonous(at))), "out", (&collect[int64]{}).sink())
		},
		"kco": func(e *weir.Environment) {
			s := weir.Source(e, "nums", gen(t, 10, func(i int64) int64 { return i }))
			k := weir.KeyBy(s, func(v int64) int64 { return v })
			k2 := weir.KeyBy(weir.Map(s, "m", func(v int64) int64 { return v }), func(v int64) int64 { return v })
			co := weir.KeyedCoProcess(k, k2, "kco", func() weir.KeyedCoProcessFunction[int64, int64, int64, int64] { return nil })
			weir.Sink(co, "out", (&collect[int64]{}).sink())
		},
	} {
		e := quietEnv()
		build(e)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := e.Execute(ctx)
		cancel()
		if err == nil || strings.Contains(err.Error(), "panicked") || !strings.Contains(err.Error(), `operator "`+name+`": its factory returned a nil`) {
			t.Errorf("a factory of operator %q that returns nil: %.400v", name, err)
		}
	}
}

// TestVerifyNilFactoriesSaySo: weir verify (Environment.Verify) of a job
// whose source and sink factories return nil must say the factory returned
// nil, as Execute does; it says the reader "does not implement
// weir.Rewinder" and the writer "does not implement weir.VerifiedSink".
func TestVerifyNilFactoriesSaySo(t *testing.T) {
	e := weir.New(weir.Config{Job: "j", Checkpoint: weir.CheckpointConfig{Interval: time.Second, Dir: t.TempDir()}})
	weir.Sink(weir.Source(e, "src", func() weir.SourceReader[int64] { return nil }), "snk", func() weir.SinkWriter[int64] { return nil })
	_, err := e.Verify(context.Background(), weir.VerifyConfig{})
	if err == nil || !strings.Contains(err.Error(), "returned a nil") {
		t.Fatalf("verify with nil factory results: %v; want a refusal saying the factories returned nil", err)
	}
}
