package weir_test

import (
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestReviewProbeAnsweredIsNotSuspect: a worker that answers the storage
// probe with an error that may pass (its write hit a full disk) answered:
// it is reachable, and alive. The coordinator took the answer's code,
// Unavailable, for a call that never reached the worker, and made it
// suspect, logging "worker suspect: it gets no tasks until it answers a
// heartbeat" of a worker that had just answered, so that an operator
// looks for a dead process or a partition where there is a full disk.
func TestReviewProbeAnsweredIsNotSuspect(t *testing.T) {
	logs := newLogRecords()
	fs := &failFirstProbe{FS: vfs.Default, err: syscall.ENOSPC}
	got, err := runProbedLogged(t, fs, slog.New(logs))
	if !fs.fired.Load() {
		t.Fatal("no probe was written")
	}
	if err != nil || got < probedRecords {
		t.Fatalf("one failing probe write: the job ended with %v, %d records sunk; want it to restart and finish", err, got)
	}
	for _, l := range logs.after(time.Time{}, slog.LevelInfo) {
		if strings.Contains(l, "worker suspect") {
			t.Errorf("the coordinator made a worker that answered the probe suspect:\n%s", l)
		}
	}
}
