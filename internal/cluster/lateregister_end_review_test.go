package cluster

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/cluster/clusterpb/clusterpbconnect"
)

// endingCoordinator answers the first Register late, as lateCoordinator;
// the job ends meanwhile, and the heartbeat that confirms the session is
// the one call answered that it ended. The coordinator then exits (it
// told the worker): every later call is unavailable.
type endingCoordinator struct {
	clusterpbconnect.UnimplementedCoordinatorServiceHandler
	live      Liveness
	registers atomic.Int32
	told      atomic.Bool
}

func (c *endingCoordinator) Register(ctx context.Context, _ *connect.Request[clusterpb.RegisterRequest]) (*connect.Response[clusterpb.RegisterResponse], error) {
	if c.registers.Add(1) > 1 || c.told.Load() {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the coordinator exited"))
	}
	select {
	case <-time.After(c.live.Timeout): // NB: the fault: an answer that comes late
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return connect.NewResponse(&clusterpb.RegisterResponse{Session: 7, HeartbeatIntervalMs: c.live.HeartbeatInterval.Milliseconds(), TimeoutMs: c.live.Timeout.Milliseconds()}), nil
}

func (c *endingCoordinator) Heartbeat(context.Context, *connect.Request[clusterpb.HeartbeatRequest]) (*connect.Response[clusterpb.HeartbeatResponse], error) {
	if c.told.Swap(true) {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the coordinator exited"))
	}
	resp := connect.NewResponse(&clusterpb.HeartbeatResponse{})
	resp.Header().Set(jobFinishedHeader, "stopped with savepoint 4")
	return resp, nil
}

// TestLateRegisterHearsTheEndReview: a worker whose Register was answered
// after the fence time confirms its session with a heartbeat (see
// TestLateRegisterAnswerKeepsTheSession). If the job ended meanwhile, that
// heartbeat's answer says so, and it is the one the worker gets: the
// coordinator counts the worker told, and exits. The worker ignored it,
// took the session, and then looked for the exited coordinator for ever.
// It must exit, as on any answer that says the job ended.
func TestLateRegisterHearsTheEndReview(t *testing.T) {
	live := Liveness{HeartbeatInterval: 100 * time.Millisecond, Timeout: time.Second}
	coord := &endingCoordinator{live: live}
	addr, wtc := serveCoordinator(t, coord)
	var registered atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- RunWorker(ctx, WorkerConfig{
			Coordinator: addr, Name: "worker-1", Slots: 1, DataAddress: "127.0.0.1:1", Graph: jobGraph, TLS: wtc, Logger: quiet(),
			Registered: func(Worker, Liveness, string) { registered.Store(true) },
			Fence:      func(error) {},
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunWorker: %v; want nil, the job ended", err)
		}
	case <-time.After(10 * time.Second):
		cancel()
		<-done
		t.Fatalf("the worker still looks for the coordinator 10 s after it was told the job ended (registered %v, registrations %d)",
			registered.Load(), coord.registers.Load())
	}
	if registered.Load() {
		t.Error("the worker took a session of a job it was told had ended")
	}
}
