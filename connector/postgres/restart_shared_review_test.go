package postgres

import (
	"errors"
	"strings"
	"testing"

	"github.com/weirstream/weir/internal/pgtest"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestRestartOfARunInASharedTableSaysWhy (outside review): two jobs write
// one table. Job "test" runs without checkpoints at parallelism 2, without
// --fresh; its subtask 1 commits and finishes, then subtask 0 fails. The
// restart (attempt 2) restored nothing, so it starts over and must delete
// attempt 1's output, which it cannot do in a shared table: it is refused,
// permanently (a restart would find the same), and the error says it is the
// restart of a run without a checkpoint, not a --fresh the user never gave.
func TestRestartOfARunInASharedTableSaysWhy(t *testing.T) {
	pg := pgtest.Start(t)
	for mode, cfg := range modeConfigs(pg.URL) {
		t.Run(mode, func(t *testing.T) {
			exec(t, pg.URL, "DROP TABLE IF EXISTS counts")
			newSink, err := Sink(cfg)
			if err != nil {
				t.Fatal(err)
			}
			// Another job's output in the table.
			other := &operatortest.Run{}
			defer other.Close()
			octx := noneContext(other, 0, 1, 1, false)
			octx.Job = "other"
			finishAlone(t, newSink, octx, "other")

			run := &operatortest.Run{}
			defer run.Close()
			// Attempt 1: subtask 0 opens (the check passes), subtask 1
			// commits and finishes, subtask 0 then fails.
			s0 := newSink()
			if err := s0.Open(noneContext(run, 0, 2, 1, false)); err != nil {
				t.Fatalf("attempt 1 subtask 0: %v", err)
			}
			finishAlone(t, newSink, noneContext(run, 1, 2, 1, false), "world")
			s0.Close() // fails

			// Attempt 2 of the same run, starting over as the runtime does.
			r0 := newSink()
			defer r0.Close()
			err = r0.Open(noneContext(run, 0, 2, 2, true))
			if !errors.Is(err, ErrSharedTable) || !operator.IsPermanent(err) || !strings.Contains(err.Error(), "cannot start over (attempt 2 of this run, which completed no checkpoint to restore") {
				t.Fatalf("attempt 2 of a run without checkpoints in a shared table: %v, want a permanent ErrSharedTable that says why it starts over", err)
			}
		})
	}
}
