package cluster

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/transport"
)

// TestStaleSessionHeardTheEndNotItsSuccessorReview: a worker's process
// was replaced under its name (its session lapsed, a new process
// registered); the old process, back from a pause, sends a heartbeat of
// its old session after the job ended, and is answered that it ended. The
// coordinator counted the name told, so Close stopped waiting for the new
// process, which had not heard it: the coordinator exited before the new
// process's next heartbeat, and that process looked for it for ever.
// Close must wait for the new session until it hears the end.
func TestStaleSessionHeardTheEndNotItsSuccessorReview(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	now := t0
	var log bytes.Buffer
	c := &Coordinator{
		cfg:     CoordinatorConfig{Graph: jobGraph, Now: func() time.Time { return now }, Logger: slog.New(slog.NewTextHandler(&log, nil))},
		members: NewMembers(jobGraph, time.Second, 0), via: map[string]*peerConn{}, changed: make(chan struct{}),
		told: map[uint64]bool{}, stop: make(chan struct{}), lost: make(chan Worker, 64),
	}
	ctx := context.WithValue(context.Background(), peerKey{}, peer{name: "w1", role: transport.RoleWorker})
	heartbeat := func(session uint64) string {
		resp, err := c.Heartbeat(ctx, connect.NewRequest(&clusterpb.HeartbeatRequest{Worker: "w1", Session: session}))
		if err != nil {
			t.Fatalf("heartbeat of session %d: %v", session, err)
		}
		return resp.Header().Get(jobFinishedHeader)
	}
	old, _, err := c.members.Register(Worker{Name: "w1", Slots: 1}, jobGraph, now)
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Second) // the old session lapsed
	renewed, _, err := c.members.Register(Worker{Name: "w1", Slots: 1}, jobGraph, now)
	if err != nil {
		t.Fatal(err)
	}
	c.jobFinished("stopped with savepoint 3")
	if got := heartbeat(old.Session); got != "stopped with savepoint 3" {
		t.Fatalf("the old session's heartbeat after the end was answered %q", got)
	}
	c.waitUntilTold(50 * time.Millisecond)
	if !strings.Contains(log.String(), "workers did not hear it") {
		t.Fatalf("Close would not wait for session %d, which did not hear that the job ended (only the replaced session %d did); the coordinator logged:\n%s",
			renewed.Session, old.Session, log.String())
	}
	log.Reset()
	if got := heartbeat(renewed.Session); got != "stopped with savepoint 3" {
		t.Fatalf("the new session's heartbeat after the end was answered %q", got)
	}
	c.waitUntilTold(time.Minute) // returns at once: every session heard it
	if strings.Contains(log.String(), "did not hear it") {
		t.Fatalf("every live session heard the end, and the coordinator logged:\n%s", log.String())
	}
}
