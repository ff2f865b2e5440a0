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

// debloatedCapacities runs source -> "fast" (a keyed running sum, no work
// to speak of) -> "slow" (2 ms a record, all on one key) -> sink with
// buffer debloating at a 100 ms target and cc's checkpoints, lets it settle
// for 3 s, and returns the input capacity the API shows for each subtask
// of each operator with inputs (0: debloating never changed it from 16).
func debloatedCapacities(t *testing.T, cc weir.CheckpointConfig) []web.Subtask {
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
	time.Sleep(3 * time.Second)
	var subs []web.Subtask
	getJSON(t, "http://"+addr+"/api/v1/subtasks", &subs)
	for _, s := range subs {
		t.Logf("%s: input capacity %d, in %d, busy %.2fs, back-pressured %.2fs, idle %.2fs", s.Task, s.InputCapacity, s.RecordsIn, s.BusySeconds, s.BackPressuredSeconds, s.IdleSeconds)
	}
	return subs
}

// Review 3. The README ("time waiting for input or for room downstream
// does not count") and note 77 ("the period less the time it waited for
// input or for room downstream") say a task's throughput is measured over
// its work only. That holds for a task whose outputs are elastic (its
// waits for room go through task.wait), but with aligned checkpoints the
// emitter waits for room inside Emitter.send (o.Push), which
// debloat.waited never sees: a back-pressured task that works for
// microseconds a batch is measured at its downstream's rate, and its
// inputs shrink to one batch, while the same job with unaligned
// checkpoints keeps them whole. The sizing thus depends on the checkpoint
// mode, and the documented measure is not the one taken in aligned jobs.
func TestBackPressureIsNotWork_review3(t *testing.T) {
	for _, m := range []struct {
		name string
		cc   weir.CheckpointConfig
	}{{"unaligned", weir.CheckpointConfig{Alignment: weir.Unaligned}}, {"aligned", weir.CheckpointConfig{}}} {
		t.Run(m.name, func(t *testing.T) {
			for _, s := range debloatedCapacities(t, m.cc) {
				if s.Vertex == "fast" && s.InputCapacity != 0 && s.InputCapacity < 16 {
					t.Errorf("%s (a keyed sum, back-pressured %.2fs, busy %.2fs): inputs sized to %d batches; "+
						"measured over its work only, as documented, it drains thousands of batches a second: 16",
						s.Task, s.BackPressuredSeconds, s.BusySeconds, s.InputCapacity)
				}
			}
		})
	}
}

// Review 3. Debloater.Observe says "A period without work says nothing of
// the throughput and changes nothing", but the task feeds it periods of a
// few microseconds of loop turns and barrier handling without a batch as
// throughput 0: a subtask that receives no record at all (here the "slow"
// subtask owning no key, with checkpoints every 100 ms) has its inputs
// shrunk to one batch, and the API and weir_subtask_input_capacity show 1
// for a subtask that never measured anything. (In a running job, a lull
// decays a busy subtask's average the same way; see
// TestDebloaterPeriodWithoutBatchesChangesNothing_review3.)
func TestSubtaskWithoutInputKeepsItsChannels_review3(t *testing.T) {
	for _, s := range debloatedCapacities(t, weir.CheckpointConfig{Alignment: weir.Unaligned}) {
		if s.Vertex != "numbers" && s.RecordsIn == 0 && s.InputCapacity != 0 {
			t.Errorf("%s took no record in %.1fs (busy %.3fs), yet debloating sized its inputs to %d batches",
				s.Task, s.Uptime, s.BusySeconds, s.InputCapacity)
		}
	}
}
