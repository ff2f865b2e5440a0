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
//   - ForwardCancel{n}: emit a cancel marker n on every output channel;
//   - PersistInput{c, n}: persist the records read from channel c from now
//     on as input channel state of unaligned checkpoint n (and process
//     them as usual), until EndPersist{c, n};
//   - EndPersist{c, n}: stop that: barrier n came on c, or n is over here
//     (a Decline or ForwardCancel of n in the same actions, or the
//     coordinator's abort of n: its channel state is discarded);
//   - ChannelStateComplete{n}: the input channel state of unaligned
//     checkpoint n is complete; acknowledge n once its snapshot and all its
//     channel state are durable.
//
// An unaligned Snapshot{n} (Unaligned set) is followed by Forward{n} with
// Overtake set: barrier n goes in front of each output channel's queued
// records and end of data (behind its queued barriers and cancel markers),
// and the records it overtakes are the snapshot's output channel state. A restore replays each
// channel's state (input state, then output state) before anything new.
//
// Modes follow Flink. ExactlyOnce aligns: a channel that delivered barrier n
// is blocked until barrier n has come on every channel. AtLeastOnce never
// blocks and snapshots when the last barrier n arrives; records that came
// after an early barrier are inside that snapshot and will be replayed after
// a restore (duplicates, never loss). Unaligned (Flink's FLIP-76) never
// blocks for a checkpoint: its first barrier n snapshots at once, forwards
// n overtaking, and persists every other channel until its barrier n comes;
// savepoints and the final checkpoint at the end of input align as in
// ExactlyOnce (the driver feeds their barriers with OnAlignedBarrier). With
// the AlignedTimeout option, ExactlyOnce switches a checkpoint (never one
// of those) whose alignment has
// lasted longer than the timeout to unaligned on the next Tick: the
// snapshot is taken at the switch, the channels that have not delivered
// barrier n are persisted from then on, and every channel is unblocked.
// The data after barrier n on a blocked channel is not channel state: it
// follows the cut. Time comes in through Tick only. Several unaligned
// checkpoints may persist channel state at once (at most 64).
//
// A persistence ends like an alignment: its channel state completes, or it
// is declined (a channel passed it), cancelled by a marker, or aborted.
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
// The Aligner starts no goroutine, does no I/O, reads no clock (time comes
// in through Tick), and is not
// safe for concurrent use: the task goroutine owns it.
package barrier
