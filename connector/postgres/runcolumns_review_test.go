package postgres

import (
	"testing"

	"github.com/weirstream/weir/internal/pgtest"
	"github.com/weirstream/weir/operator"
)

// Review: adding the run columns is bounded per subtask (addRunLockTimeout,
// 2 s), but the subtasks take the advisory lock one after another before
// SET LOCAL lock_timeout, without a bound of their own: with a prepared
// transaction holding a lock on a records table made before run ids (here
// another job's, killed before its commit, in the same schema), subtask
// number k of a parallel start waits about 2 s * k. At parallelism 8 and the
// default Timeout (10 s) the last subtasks' Open fails with a deadline
// instead of "going on without the columns" as addRun says; every restart
// does the same until the other job is restored: the job is stuck.
func TestRunColumnsLockWaitAddsUpOverSubtasksReview(t *testing.T) {
	pg := pgtest.Start(t)
	exec(t, pg.URL, createAppend, oldCreateOwnerSQL,
		"BEGIN",
		"INSERT INTO weir_sink_owner (relation, relation_name, job, uid, subtask, session_pid, session_start) VALUES ('counts'::regclass, 'counts', 'other', 'counts', 0, 0, now())",
		"PREPARE TRANSACTION 'held'")
	defer exec(t, pg.URL, "ROLLBACK PREPARED 'held'")
	cfg := SinkConfig[count]{URL: pg.URL, Table: "counts"} // default Timeout
	_, errs := openAll(t, cfg, 8, func(*operator.Context) {})
	failed := 0
	for sub, err := range errs {
		if err != nil {
			failed++
			t.Errorf("subtask %d of 8: %v", sub, err)
		}
	}
	if failed > 0 {
		t.Fatalf("%d of 8 subtasks failed to open; want all to go on without the run columns", failed)
	}
}
