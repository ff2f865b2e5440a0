package weir_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

// quietEnv is a job with no restarts and no logs, so that a failure shows at once.
func quietEnv() *weir.Environment {
	return weir.New(weir.Config{Checkpoint: weir.CheckpointConfig{Interval: 5 * time.Millisecond}, Restart: weir.NoRestart{},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// TestLateToWithoutConsumer (an outside review, session 40): a window
// with LateTo(&late) whose late stream the job never reads. Flink drops a
// side output nobody consumes; Weir's window task panicked in Open
// ("interface conversion: interface is nil, not weir.Collector[int64]"),
// and with the default restart strategy retried that 10 times, a second
// apart. Weir refuses a stream without a consumer at Execute, and now a
// late stream without one too, naming LateTo.
func TestLateToWithoutConsumer(t *testing.T) {
	e := quietEnv()
	nums := weir.Source(e, "nums", gen(t, 10, func(i int64) int64 { return i }), weir.Watermarks(weir.Monotonous(at)))
	var late *weir.Stream[int64]
	w := weir.Window(weir.KeyBy(nums, func(v int64) int64 { return v }), weir.Tumbling(time.Second), weir.LateTo(&late))
	got := &collect[int64]{}
	weir.Sink(weir.Map(weir.WindowAggregate(w, "w", weir.Count[int64]()), "v", value), "out", got.sink())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := e.Execute(ctx)
	if err == nil || strings.Contains(err.Error(), "panicked") || !strings.Contains(err.Error(), "LateTo") || !strings.Contains(err.Error(), "no consumer") {
		t.Fatalf("a LateTo stream without a consumer: %.300s; want a refusal at Execute saying LateTo's stream has no consumer", err)
	}
}

// TestNilStreamPanicsSayingWhy (an outside review, session 40): a nil
// *Stream given to Map, Sink, KeyBy... panicked with a nil pointer
// dereference while the graph was built. The natural way to get one: sink
// the late stream before the window that sets it (LateTo(&late)) is added.
// A nil stream has no Environment to record the mistake in, as Union
// records a nil stream among others: the panic now says what to fix.
func TestNilStreamPanicsSayingWhy(t *testing.T) {
	var late *weir.Stream[int64]
	for name, build := range map[string]func(){
		"Sink":   func() { weir.Sink(late, "late out", (&collect[int64]{}).sink()) },
		"Map":    func() { weir.Map(late, "m", func(v int64) int64 { return v }) },
		"KeyBy":  func() { weir.KeyBy(late, func(v int64) int64 { return v }) },
		"Reduce": func() { weir.Reduce(weir.KeyedStream[int64, int64]{}, "r", func(a, b int64) int64 { return a + b }) },
	} {
		var got any
		func() {
			defer func() { got = recover() }()
			build()
		}()
		if err, ok := got.(error); !ok || !strings.Contains(err.Error(), "nil *weir.Stream") || !strings.Contains(err.Error(), "LateTo") {
			t.Errorf("%s of a nil stream: panic %v, want one saying the stream is nil and how LateTo sets it", name, got)
		}
	}
}

// TestLateToNilPointerError (an outside review, session 40):
// LateTo[int64](nil) was refused, but the error said the option needs "a
// **weir.Stream of the window's records, not **weir.Stream[int64]", which
// is exactly the window's record type. It says the pointer is nil now.
func TestLateToNilPointerError(t *testing.T) {
	e := quietEnv()
	nums := weir.Source(e, "nums", gen(t, 10, func(i int64) int64 { return i }), weir.Watermarks(weir.Monotonous(at)))
	w := weir.Window(weir.KeyBy(nums, func(v int64) int64 { return v }), weir.Tumbling(time.Second), weir.LateTo[int64](nil))
	weir.Sink(weir.Map(weir.WindowAggregate(w, "w", weir.Count[int64]()), "v", value), "out", (&collect[int64]{}).sink())
	_, err := e.Execute(context.Background())
	if err == nil || strings.Contains(err.Error(), "not **weir.Stream[int64]") || !strings.Contains(err.Error(), "nil") {
		t.Fatalf("error %v, want one saying LateTo's pointer is nil", err)
	}
}

// TestProcessFactoryReturnsNil (an outside review, session 40): a
// newFn that returns a nil function (a constructor with a missing return
// value, say) was not caught: the task dereferenced it on the first record
// and the job failed with "panicked: runtime error: invalid memory address
// or nil pointer dereference" and a stack, after the restart strategy's 10
// retries by default. It now fails at the subtask's start, for good, naming
// the operator.
func TestProcessFactoryReturnsNil(t *testing.T) {
	nums := func(e *weir.Environment) *weir.Stream[int64] {
		return weir.Source(e, "nums", gen(t, 10, func(i int64) int64 { return i }))
	}
	for name, build := range map[string]func(e *weir.Environment){
		"p": func(e *weir.Environment) {
			p := weir.Process(weir.KeyBy(nums(e), func(v int64) int64 { return v }), "p", func() weir.KeyedProcessFunction[int64, int64, int64] { return nil })
			weir.Sink(p, "out", (&collect[int64]{}).sink())
		},
		"src": func(e *weir.Environment) {
			weir.Sink(weir.Source(e, "src", func() weir.SourceReader[int64] { return nil }), "out", (&collect[int64]{}).sink())
		},
		"snk": func(e *weir.Environment) {
			weir.Sink(nums(e), "snk", func() weir.SinkWriter[int64] { return nil })
		},
		"co": func(e *weir.Environment) {
			s := nums(e)
			co := weir.CoProcess(weir.Connect(s, weir.Map(s, "n2", func(v int64) int64 { return v })), "co",
				func() weir.CoProcessFunction[int64, int64, int64] { return nil })
			weir.Sink(co, "out", (&collect[int64]{}).sink())
		},
	} {
		e := quietEnv()
		build(e)
		_, err := e.Execute(context.Background())
		if err == nil || strings.Contains(err.Error(), "panicked") || !strings.Contains(err.Error(), `operator "`+name+`": its factory returned a nil`) {
			t.Errorf("a factory of operator %q that returns nil: %.300v; want a failure naming the operator and its nil factory result", name, err)
		}
	}
}

// TestKeyByWindowEnd (an outside review, session 40): WindowEnd's doc
// calls it "a key to gather the results of one window from every key
// (KeyBy(results, weir.WindowEnd))", and API.md's Nexmark q5 does exactly
// that. KeyBy refuses every time.Time key ("*time.Location compares by
// address ... key by the value pointed at"), so the documented idiom
// failed at Execute; WindowEnd is now the end in milliseconds.
func TestKeyByWindowEnd(t *testing.T) {
	e := quietEnv()
	nums := weir.Source(e, "nums", gen(t, 40, func(i int64) int64 { return i * 10 }), weir.Watermarks(weir.Monotonous(at)))
	counts := weir.WindowAggregate(weir.Window(weir.KeyBy(nums, func(v int64) int64 { return v % 3 }), weir.Tumbling(100*time.Millisecond)), "counts", weir.Count[int64]())
	perWindow := weir.WindowAggregate(weir.Window(weir.KeyBy(counts, weir.WindowEnd), weir.Tumbling(100*time.Millisecond)), "per window", weir.Count[weir.WindowResult[int64, int64]]())
	got := &collect[int64]{}
	weir.Sink(weir.Map(perWindow, "v", func(r weir.WindowResult[int64, int64]) int64 { return r.Value }), "out", got.sink())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := e.Execute(ctx); err != nil {
		t.Fatalf("KeyBy(results, weir.WindowEnd), as its doc says: %v", err)
	}
	if g := got.values(); len(g) != 4 {
		t.Fatalf("got %v, want 4 windows of 3 keys each", g)
	}
}

// TestDuplicateNameError (an outside review, session 40): two
// operators named "m" (no UID set) were refused with "operators 1 and 2
// share the UID "m"": graph indices the user never sees, a UID the user
// never set, and no fix. An empty name gave "operator 1 () has no UID".
func TestDuplicateNameError(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(e *weir.Environment, s *weir.Stream[int64])
	}{
		{"two operators named m", func(e *weir.Environment, s *weir.Stream[int64]) {
			id := func(v int64) int64 { return v }
			weir.Sink(weir.Map(weir.Map(s, "m", id), "m", id), "out", (&collect[int64]{}).sink())
		}},
		{"an empty name", func(e *weir.Environment, s *weir.Stream[int64]) {
			weir.Sink(weir.Map(s, "", func(v int64) int64 { return v }), "out", (&collect[int64]{}).sink())
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := quietEnv()
			c.build(e, weir.Source(e, "nums", gen(t, 10, func(i int64) int64 { return i })))
			_, err := e.Execute(context.Background())
			if err == nil || !strings.Contains(err.Error(), "weir.UID") || !strings.Contains(err.Error(), "name") {
				t.Fatalf("error %v, want one that names the operators and the fix (a name of its own, or weir.UID)", err)
			}
		})
	}
}
