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
// # End of input
//
// A bounded source that has emitted its last record reports it and waits.
// Once every source has, the coordinator triggers a final checkpoint; its
// completion carries EndOfInput, and only then do the sources end their
// output, so every record a sink commits at the end is covered by a
// completed checkpoint. NB: records an operator emits from Finish are not
// covered by a checkpoint; in exactly-once mode operators must not emit from
// Finish (this is what a later "end of data, then final checkpoint" protocol,
// Flink's FLIP-147, will lift).
package runtime
