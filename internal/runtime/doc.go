// Package runtime runs a job in one process: the thin driver around the
// pure checkpoint coordinator, and one goroutine per task.
//
// # Tasks
//
// A task runs one subtask of a vertex (a chain of operators) and owns all
// its state, so the data path takes no locks. Its loop, in order: handle
// every waiting control message (trigger, checkpoint complete, abort); fire
// due timers; take the next event from an input channel that barrier
// alignment has not blocked; when nothing is ready, flush its output batches
// and wait for input, a control message, a timer or the end of the attempt.
// Records move in batches ([]T) over bounded channels: a full channel makes
// its producer wait (back-pressure). A snapshot's synchronous part runs in
// the task between two batches; its asynchronous part runs on a bounded pool
// and acknowledges or declines the checkpoint.
//
// # The driver
//
// Run owns the checkpoint.Coordinator in one goroutine: it ticks it, feeds it
// the tasks' acknowledgements, declines and life-cycle, and carries out its
// decisions (reserve and inject barriers, write metadata, notify, discard).
// Metadata writes are synchronous in the driver, so none is in flight when a
// failed attempt is torn down and the latest completed checkpoint is chosen
// to restore. A failure stops every task of the attempt, and the restart
// strategy decides whether and when the job restarts from that checkpoint.
//
// # Starting
//
// Before anything runs, the driver takes the job's checkpoint storage for
// the run (a second run on it fails), reads what it holds and decides where
// the run starts (Start): a checkpoint the user named, the latest one, or
// the beginning — which it refuses over an earlier run's checkpoints unless
// told to start over. A checkpoint to restore is checked against the job
// (checkpoint.Metadata.Fit) before any task is deployed; checkpoints newer
// than it are deleted, since sinks roll back what those committed. A
// failover restores the newest checkpoint this run completed, else where
// the run started.
//
// # End of input
//
// Flink's FLIP-147 order. A bounded source that has emitted its last record
// finishes its operators and sends end of data downstream; a task whose
// every input delivered end of data finishes its operators (they emit what
// they buffered; timers stop) and forwards it. The source reports its input
// exhausted and keeps taking part in checkpoints. Once every source has,
// the coordinator triggers a final checkpoint, whose barriers follow end of
// data everywhere: it covers every record the job emitted. Its completion
// carries EndOfInput; sinks commit on it as on any other completion, and
// then every task ends. Without checkpoints a task ends at end of data.
package runtime
