// Package checkpoint holds the checkpoint coordinator's decisions as a pure,
// deterministic state machine, and the checkpoint metadata format.
//
// # The protocol
//
// Weir takes checkpoints by asynchronous barrier snapshots, the
// Chandy–Lamport variant Apache Flink made standard:
//
//  1. The Coordinator decides to trigger checkpoint n (Trigger). The driver
//     asks storage to reserve n, then injects barrier n at every source task.
//  2. Sources record their positions and emit barrier n; tasks with several
//     inputs align barrier n (package checkpoint/barrier), snapshot, forward it.
//  3. Each task acknowledges n with the state handles it wrote, or declines n.
//  4. When every task has acknowledged, the Coordinator asks the driver to
//     persist n's Metadata (Persist). That write is the commit point.
//  5. Only after the driver reports a durable write (Persisted with a nil
//     error) does the Coordinator announce NotifyComplete; two-phase-commit
//     sinks commit then. Older pending checkpoints are subsumed, completed
//     ones beyond the retention count discarded. Savepoints are never
//     subsumed nor discarded.
//  6. Timeouts, declines and failed writes abort n; more than
//     Config.TolerableFailures consecutive failures emit FailJob. Failures
//     of savepoints, and of checkpoints older than the newest completed
//     one, do not count.
//  7. Once every source has reported its input exhausted (InputExhausted),
//     a final checkpoint is triggered; its NotifyComplete carries
//     EndOfInput, and the job ends.
//
// Metadata records the job's operators, and Metadata.Fit checks a
// checkpoint against the job about to restore it.
//
// # The caller's duties
//
// The Coordinator starts no goroutine, does no I/O and never reads a clock:
// time comes in as a value. It is not safe for concurrent use; one driver
// goroutine owns it. The driver
//
//   - builds it with New from facts read from storage (the highest id ever
//     reserved and the completed checkpoints found), so ids survive restarts;
//   - calls Start when every task is deployed and restored, and Tick
//     periodically with the current time;
//   - feeds it every acknowledgement, decline, task and job life-cycle event
//     and the result of every Persist;
//   - after each call, takes Ready and carries out the actions in order;
//   - reports the result of every Persist before it picks a checkpoint to
//     restore from, so that a checkpoint being written is not overlooked;
//   - shows other goroutines the checkpoints in flight, if it will, by
//     handing them a copy (Pending), never the Coordinator.
package checkpoint
