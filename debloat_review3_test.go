package weir_test

import (
	"io"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/generator"
	"github.com/weirstream/weir/connector/stdio"
	"github.com/weirstream/weir/internal/web"
)

// debloatedJob runs source -> "fast" (a keyed running sum, no work to
// speak of) -> "slow" (2 ms a record, all on one key) -> sink with buffer
// debloating at a 100 ms target and cc's checkpoints, and returns a
// reading of its subtasks from the API.
func debloatedJob(t *testing.T, cc weir.CheckpointConfig) func() []web.Subtask {
	t.Helper()
	src, err := generator.New(generator.Config[int64]{Make: func(i int64) int64 { return i }, BatchSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	cc.Interval = 100 * time.Millisecond
	cc.TolerableFailures = 1000
	cc.Timeout = 400 * time.Millisecond
	addrs := make(chan string, 1)
	env := weir.New(weir.Config{Job: "bp", Parallelism: 2, BatchSize: 16, Checkpoint: cc, BufferDebloat: 100 * time.Millisecond,
		Web: "127.0.0.1:0", OnWeb: func(a string) { addrs <- a }})
	fast := weir.Reduce(weir.KeyBy(weir.Source(env, "numbers", src), func(i int64) int64 { return i % 7 }), "fast", func(a, b int64) int64 { return a + b })
	slow := weir.Reduce(weir.KeyBy(fast, func(int64) int64 { return 0 }), "slow", func(a, b int64) int64 {
		time.Sleep(2 * time.Millisecond)
		return a + b
	})
	weir.Sink(slow, "discard", stdio.Print(io.Discard, func(dst []byte, i int64) []byte { return dst }))
	addr := runUntilCancelled(t, env, addrs)
	return func() []web.Subtask {
		var subs []web.Subtask
		getJSON(t, "http://"+addr+"/api/v1/subtasks", &subs)
		return subs
	}
}

// waitSubtasks reads the subtasks until ok says they are as wanted, and
// fails after 30 s with the last reading.
func waitSubtasks(t *testing.T, read func() []web.Subtask, what string, ok func([]web.Subtask) bool) []web.Subtask {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		subs := read()
		if ok(subs) {
			return subs
		}
		if time.Now().After(deadline) {
			for _, s := range subs {
				t.Logf("%s: input capacity %d, in %d, busy %.2fs, back-pressured %.2fs, idle %.2fs", s.Task, s.InputCapacity, s.RecordsIn, s.BusySeconds, s.BackPressuredSeconds, s.IdleSeconds)
			}
			t.Fatalf("not within 30 s: %s", what)
		}
		time.Sleep(50 * time.Millisecond) // polling the API
	}
}

// Review 3 found that a back-pressured task was measured differently by
// checkpoint mode: with aligned checkpoints its wait for room (inside a
// push) counted as time with input, with unaligned ones (elastic outputs,
// waiting in the task loop) it did not, so the same job's upstream task
// shrank its inputs in one mode and kept them whole in the other. Now
// both count it, as Flink's throughput calculator (which pauses only
// while the task waits for input): "fast", back-pressured by "slow",
// drains its inputs at slow's rate, and shrinks them in either mode.
func TestBackPressuredTaskShrinksItsInputsInEitherMode_review3(t *testing.T) {
	for _, m := range []struct {
		name string
		cc   weir.CheckpointConfig
	}{{"unaligned", weir.CheckpointConfig{Alignment: weir.Unaligned}}, {"aligned", weir.CheckpointConfig{}}} {
		t.Run(m.name, func(t *testing.T) {
			waitSubtasks(t, debloatedJob(t, m.cc), "both back-pressured fast subtasks sized their inputs below 16 batches", func(subs []web.Subtask) bool {
				n := 0
				for _, s := range subs {
					if s.Vertex == "fast" && s.BackPressuredSeconds > 0 && s.InputCapacity > 0 && s.InputCapacity < 16 {
						n++
					}
				}
				return n == 2
			})
		})
	}
}

// Review 3: a period without a batch was read as a throughput of 0, and a
// subtask that received no record at all (the "slow" subtask owning no
// key) had its inputs shrunk to one batch, shown in the API and metrics.
// A period now lasts until the task took a batch: once its sibling that
// takes every record has sized its inputs, the idle one still has not.
func TestSubtaskWithoutInputKeepsItsChannels_review3(t *testing.T) {
	read := debloatedJob(t, weir.CheckpointConfig{Alignment: weir.Unaligned})
	subs := waitSubtasks(t, read, "the slow subtask taking the records sized its inputs", func(subs []web.Subtask) bool {
		for _, s := range subs {
			if s.Vertex == "slow" && s.RecordsIn > 0 && s.InputCapacity > 0 {
				return true
			}
		}
		return false
	})
	for _, s := range subs {
		if s.Vertex != "numbers" && s.RecordsIn == 0 && s.InputCapacity != 0 {
			t.Errorf("%s took no record in %.1fs (busy %.3fs), yet debloating sized its inputs to %d batches",
				s.Task, s.Uptime, s.BusySeconds, s.InputCapacity)
		}
	}
}
