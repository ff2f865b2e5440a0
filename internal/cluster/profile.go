package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"connectrpc.com/connect"

	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/profiling"
)

// A worker's CPU profile reaches the web UI through the coordinator: the
// coordinator asks the worker over the control plane (mutual TLS, the
// worker answers only the coordinator's certificate), and the web server
// of the coordinator's process serves it behind the job's token. A worker
// serves no profile on a listener of its own.

// ErrNoWorker says that no live worker holds the name asked for.
var ErrNoWorker = errors.New("no live worker of that name")

// Coordinator is the coordinator x places tasks with.
func (x *Executor) Coordinator() *Coordinator { return x.c }

// Profile takes a CPU profile of worker's process for d (profiling.CPU
// on the worker) and returns it in pprof's format. It fails with
// ErrNoWorker when the worker is not live, and profiling.ErrBusy while
// the worker takes another profile. ctx bounds the call: give it d and
// time to send the profile back.
func (x *Executor) Profile(ctx context.Context, worker string, d time.Duration) ([]byte, error) {
	if err := profiling.CheckDuration(d); err != nil {
		return nil, err
	}
	ws, _ := x.c.Workers()
	i := slices.IndexFunc(ws, func(w Worker) bool { return w.Name == worker })
	if i < 0 {
		return nil, fmt.Errorf("profile worker %q: %w", clip(worker), ErrNoWorker)
	}
	resp, err := x.client(ws[i]).Profile(ctx, connect.NewRequest(&clusterpb.ProfileRequest{DurationMs: d.Milliseconds()}))
	switch {
	case connect.CodeOf(err) == connect.CodeResourceExhausted:
		return nil, fmt.Errorf("worker %s: %w", worker, profiling.ErrBusy)
	case err != nil:
		return nil, fmt.Errorf("profile worker %s: %w", worker, err)
	}
	return resp.Msg.GetProfile(), nil
}

// Profile implements WorkerService.
func (n *node) Profile(ctx context.Context, req *connect.Request[clusterpb.ProfileRequest]) (*connect.Response[clusterpb.ProfileResponse], error) {
	if err := n.callerIsCoordinator(ctx); err != nil {
		return nil, err
	}
	d := time.Duration(req.Msg.GetDurationMs()) * time.Millisecond
	if err := profiling.CheckDuration(d); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("worker %s: %w", n.cfg.Name, err))
	}
	data, err := profiling.CPU(ctx, d)
	switch {
	case errors.Is(err, profiling.ErrBusy):
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("worker %s: %w", n.cfg.Name, err))
	case err != nil:
		return nil, fmt.Errorf("worker %s: %w", n.cfg.Name, err)
	}
	return connect.NewResponse(&clusterpb.ProfileResponse{Profile: data}), nil
}
