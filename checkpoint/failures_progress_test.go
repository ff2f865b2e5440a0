package checkpoint

import (
	"testing"
	"time"
)

// reviewCoord builds a coordinator over two tasks (one source). A
// completion that is no progress (older than the newest completed) ended
// a run of failures (found by an outside review, session 39).
func reviewCoord(t *testing.T, cfg Config) (*Coordinator, []TaskID) {
	t.Helper()
	src, sink := TaskID{Vertex: "src", Subtask: 0}, TaskID{Vertex: "sink", Subtask: 0}
	c, err := New(Job{Name: "j", Tasks: Tasks{All: []TaskID{src, sink}, Sources: []TaskID{src}}, Operators: testOperators}, cfg, Restored{})
	if err != nil {
		t.Fatal(err)
	}
	c.Start(t0)
	c.Ready()
	return c, []TaskID{src, sink}
}

func ackAll(c *Coordinator, tasks []TaskID, at time.Time, id ID) {
	for _, tk := range tasks {
		c.Acknowledge(at, tk, id, []Handle{{Operator: "op", Parallelism: 1, Inline: []byte("s")}})
	}
}

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

// TestAStaleCompletionDoesNotResetFailures: with MaxConcurrent 2,
// metadata writes may finish out of order. Checkpoint 2 completes while 1
// is still being persisted; then 3 expires (a counted failure: 3 is newer
// than the newest completed). When 1's write lands, 1 is durable but
// older than 2: it is discarded, not retained, not announced. It is no
// progress, so it must not wipe the count of consecutive failures. Flink's
// CheckpointFailureManager.handleCheckpointSuccess clears the counter
// only "if (checkpointId > lastSucceededCheckpointId)". Here 4 then
// expires too: two consecutive failures of checkpoints newer than the
// newest completed exceed the one tolerated, and the job must fail over.
func TestAStaleCompletionDoesNotResetFailures(t *testing.T) {
	c, tasks := reviewCoord(t, Config{Interval: 10 * time.Millisecond, Timeout: 100 * time.Millisecond, MaxConcurrent: 2, TolerableFailures: 1})
	c.Tick(ms(10)) // trigger 1
	c.Tick(ms(20)) // trigger 2
	ackAll(c, tasks, ms(21), 1)
	ackAll(c, tasks, ms(22), 2)
	c.Persisted(ms(23), 2, nil) // 2 lands first
	c.Tick(ms(30))              // trigger 3
	if got := c.PendingIDs(); len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Fatalf("pending after 2 completed: %v, want [1 3]", got)
	}
	c.Ready()
	c.Tick(ms(130)) // 3 expires: the first counted failure
	if f := c.ConsecutiveFailures(); f != 1 {
		t.Fatalf("consecutive failures after 3 expired: %d, want 1", f)
	}
	c.Persisted(ms(131), 1, nil) // 1's write lands late: stale, discarded
	if f := c.ConsecutiveFailures(); f != 1 {
		t.Errorf("consecutive failures after stale checkpoint 1 (older than completed 2) completed: %d, want 1 (Flink resets only on a success newer than the last)", f)
	}
	c.Ready()
	// The next pending checkpoint expires: the second consecutive failure.
	pend := c.PendingIDs()
	if len(pend) == 0 {
		c.Tick(ms(140))
		pend = c.PendingIDs()
	}
	if len(pend) == 0 {
		t.Fatal("nothing pending to expire")
	}
	c.Tick(ms(1000))
	var failed bool
	for _, a := range c.Ready() {
		if _, ok := a.(FailJob); ok {
			failed = true
		}
	}
	if !failed {
		t.Errorf("2 consecutive failures of checkpoints newer than the newest completed (2) with 1 tolerated: no FailJob (failures=%d)", c.ConsecutiveFailures())
	}
}

// TestALateSavepointDoesNotResetFailures: the same through the path
// the runtime's driver can take (it persists synchronously, so only a
// savepoint, which is never subsumed, completes after a newer checkpoint;
// design note 80). Savepoint 2 aligns slowly; checkpoint 3 completes; 4
// expires (counted); savepoint 2 then completes: no progress past 3, so
// the count stays (Flink: handleCheckpointSuccess(2) with
// lastSucceededCheckpointId 3 changes nothing). 5 expiring is the second
// consecutive failure and, with one tolerated, fails the job.
func TestALateSavepointDoesNotResetFailures(t *testing.T) {
	c, tasks := reviewCoord(t, Config{Interval: 10 * time.Millisecond, Timeout: 100 * time.Millisecond, TolerableFailures: 1})
	c.Tick(ms(10)) // trigger 1
	ackAll(c, tasks, ms(11), 1)
	c.Persisted(ms(12), 1, nil)
	sp, err := c.TriggerSavepoint(ms(13)) // 2
	if err != nil {
		t.Fatal(err)
	}
	c.Tick(ms(20)) // trigger 3 (a savepoint does not count against MaxConcurrent)
	ackAll(c, tasks, ms(21), 3)
	c.Persisted(ms(22), 3, nil)
	c.Tick(ms(30)) // trigger 4
	ackAll(c, tasks, ms(31), sp)
	c.Ready()
	c.Tick(ms(130)) // 4 expires: counted; 5 triggered
	if f := c.ConsecutiveFailures(); f != 1 {
		t.Fatalf("failures after 4 expired: %d, want 1", f)
	}
	c.Persisted(ms(131), sp, nil) // the savepoint lands, older than 3
	if f := c.ConsecutiveFailures(); f != 1 {
		t.Errorf("consecutive failures after savepoint %d (older than completed 3) completed: %d, want 1", sp, f)
	}
	c.Ready()
	c.Tick(ms(1000)) // 5 expires
	var failed bool
	for _, a := range c.Ready() {
		if _, ok := a.(FailJob); ok {
			failed = true
		}
	}
	if !failed {
		t.Errorf("checkpoints 4 and 5 expired in a row with 1 tolerated and only an older savepoint completing between: no FailJob (failures=%d)", c.ConsecutiveFailures())
	}
}
