// Package barrier holds one task's barrier alignment over its input
// channels, as a pure, deterministic state machine.
//
// A task with input channels 0..n-1 feeds the Aligner every control event it
// reads from a channel (OnBarrier, OnCancel) and every abort the coordinator
// announces (Abort). Each call returns the actions to carry out, in order:
//
//   - Block{c}: stop reading channel c (its producer is back-pressured);
//   - Snapshot{n}: take the task's snapshot for checkpoint n — after every
//     record that preceded barrier n on each channel and before any record
//     that followed it (in exactly-once mode);
//   - Forward{n}: emit barrier n on every output channel;
//   - UnblockAll: read every channel again;
//   - Decline{n}: tell the coordinator the task will not take checkpoint n;
//   - ForwardCancel{n}: emit a cancel marker n on every output channel.
//
// Modes follow Flink. ExactlyOnce aligns: a channel that delivered barrier n
// is blocked until barrier n has come on every channel. AtLeastOnce never
// blocks and snapshots when the last barrier n arrives; records that came
// after an early barrier are inside that snapshot and will be replayed after
// a restore (duplicates, never loss).
//
// An alignment ends in exactly one of four ways: the snapshot; a decline
// (a channel delivered a newer barrier or cancel marker without this one, so
// it can never complete here, or a newer checkpoint completed first); a
// cancel marker for it, which is forwarded; or the coordinator's abort of
// it. An abort or cancel marker affects only the checkpoint it names.
//
// Channels carry barriers until the job ends: a source whose input is
// exhausted keeps taking part in checkpoints (see the end-of-input protocol
// in package checkpoint), so a channel never ends during an alignment.
//
// The Aligner starts no goroutine, does no I/O, reads no clock, and is not
// safe for concurrent use: the task goroutine owns it.
package barrier
