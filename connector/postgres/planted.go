package postgres

import "sync/atomic"

// plantedBug is a defect put back by the planted-bug test of the lifecycle
// generator (lifecycle_gen_test.go), to show that the generator catches it.
// Only that test sets one.
type plantedBug = atomic.Bool

// planted are the defects the lifecycle generator exists to catch.
var planted struct {
	// noOwnerCheck: a sink that restores no state neither refuses an earlier
	// run's output nor deletes it on --fresh (issue 19, defect 4).
	noOwnerCheck plantedBug
	// noRollBack: a start leaves the job's prepared transactions that no
	// restored checkpoint recorded.
	noRollBack plantedBug
	// ownSubtaskOnly: a restore commits only the recorded transactions of
	// the subtask with its own number, not those of the subtasks a lower
	// parallelism folds into it.
	ownSubtaskOnly plantedBug
	// rolledBackIsCommitted: a restore takes a recorded transaction that an
	// earlier start rolled back for one committed earlier, and its rows are
	// lost without a word (issue 19, found and left alone 3).
	rolledBackIsCommitted plantedBug
	// noRunID: ownership records are told apart without their run ids, as
	// before them: by the liveness of the session that wrote them.
	noRunID plantedBug
	// noLineage: a restore of a checkpoint taken before a run started over
	// (--fresh) is not refused, and the rows --fresh deleted are missing
	// without a word (issue 19, defect 4, gap 4).
	noLineage plantedBug
	// verifyReadsPrepared: verify reads the table back while transactions
	// the checkpoint recorded are prepared, their rows not readable.
	verifyReadsPrepared plantedBug
}
