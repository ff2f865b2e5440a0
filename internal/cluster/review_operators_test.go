package cluster

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/transport"
)

// TestFinishedJobCountsOnlyTheCurrentSessionsOperators: a worker's
// process was replaced under its name (a new session and incarnation);
// the old process's heartbeat is refused while the job runs, and its
// counts are not taken. Once the job finished, the coordinator answers
// every heartbeat "finished" and took its operators' counts whatever its
// session: a heartbeat of the old process then (one in flight at the
// end) swaps the incarnations back and forth, and each swap retires the
// other's counts again: they are counted twice.
func TestFinishedJobCountsOnlyTheCurrentSessionsOperators(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	now := t0
	ops := NewOperatorCounts()
	c := &Coordinator{
		cfg:     CoordinatorConfig{Graph: jobGraph, Now: func() time.Time { return now }, Operators: ops, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		members: NewMembers(jobGraph, time.Second, 0), via: map[string]*peerConn{}, changed: make(chan struct{}),
		told: map[uint64]bool{}, stop: make(chan struct{}), lost: make(chan Worker, 64),
	}
	ctx := context.WithValue(context.Background(), peerKey{}, peer{name: "w1", role: transport.RoleWorker})
	heartbeat := func(session, incarnation uint64, records int64) error {
		_, err := c.Heartbeat(ctx, connect.NewRequest(&clusterpb.HeartbeatRequest{Worker: "w1", Session: session, Incarnation: incarnation,
			Operators: []*clusterpb.OperatorCount{{Uid: "map", Records: records}}}))
		return err
	}
	old, _, err := c.members.Register(Worker{Name: "w1", Slots: 2}, jobGraph, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := heartbeat(old.Session, 1, 100); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Second) // the old session lapsed
	renewed, _, err := c.members.Register(Worker{Name: "w1", Slots: 2}, jobGraph, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := heartbeat(renewed.Session, 2, 10); err != nil {
		t.Fatal(err)
	}
	want := []OperatorCount{{UID: "map", Records: 110}}
	if err := heartbeat(old.Session, 1, 100); err == nil {
		t.Fatal("the old session's heartbeat was taken while the job runs")
	}
	if got := ops.Sum(); !slices.Equal(got, want) {
		t.Fatalf("while the job runs: %+v, want %+v", got, want)
	}
	c.jobFinished("finished")
	heartbeat(old.Session, 1, 100) // in flight as the job finished
	heartbeat(renewed.Session, 2, 10)
	if got := ops.Sum(); !slices.Equal(got, want) {
		t.Fatalf("after the job finished and a heartbeat of the old process: %+v, want %+v", got, want)
	}
}
