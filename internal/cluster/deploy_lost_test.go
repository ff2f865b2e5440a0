package cluster

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/cluster/clusterpb/clusterpbconnect"
	"github.com/weirstream/weir/internal/runtime"
)

// hangingWorker's Deploy never answers (a paused process, or one cut off
// mid-deploy); it says when a Deploy arrived.
type hangingWorker struct {
	clusterpbconnect.UnimplementedWorkerServiceHandler
	deploying chan struct{}
	once      sync.Once
}

func (h *hangingWorker) Deploy(ctx context.Context, _ *connect.Request[clusterpb.DeployRequest]) (*connect.Response[clusterpb.DeployResponse], error) {
	h.once.Do(func() { close(h.deploying) })
	<-ctx.Done()
	return nil, ctx.Err()
}

func (h *hangingWorker) Cancel(context.Context, *connect.Request[clusterpb.CancelRequest]) (*connect.Response[clusterpb.CancelResponse], error) {
	return connect.NewResponse(&clusterpb.CancelResponse{}), nil
}

// TestDeployGivesUpOnAWorkerDeclaredLost (found by an outside review,
// session 34). Rule (DESIGN: "detects a lost worker by heartbeat; the job then
// restarts from its latest checkpoint on the slots it has"): once the
// coordinator has declared a worker of the attempt being deployed lost,
// the deploy gives up on it; the attempt does not wait out the 30 s call
// timeout for a worker it already knows is gone. Here the heartbeat
// timeout is 1 s, and the job restarted only after callTimeout (30 s):
// watchLost's failure report waited in the reports channel, which the
// runtime reads only once Start returns, and nothing cancelled the deploy.
func TestDeployGivesUpOnAWorkerDeclaredLost(t *testing.T) {
	tlsOf := testCerts(t, "worker-1", "worker-2")
	plan, err := graph.NewPlan(graph.Graph{Nodes: []graph.Node{{UID: "src", Kind: graph.KindSink, Parallelism: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	spec := closingSpec("lost", plan, "w", newTaskEvents())
	coord, err := StartCoordinator(CoordinatorConfig{Graph: GraphOf(spec), TLS: tlsOf("coordinator"), Liveness: Liveness{HeartbeatInterval: 100 * time.Millisecond, Timeout: time.Second}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close()
	x := NewExecutor(coord)
	defer x.Close()

	var wg sync.WaitGroup
	defer wg.Wait()
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	wg.Go(func() {
		RunNode(ctx1, NodeConfig{Coordinator: coord.Addr(), Name: "worker-1", Slots: 1, TLS: tlsOf("worker-1"), Spec: spec, Logger: quiet(), RetryInterval: 50 * time.Millisecond})
	})
	// worker-2: heartbeats from RunWorker, a WorkerService whose Deploy hangs.
	hw := &hangingWorker{deploying: make(chan struct{})}
	path, h := clusterpbconnect.NewWorkerServiceHandler(hw, rpcOptions)
	mux := http.NewServeMux()
	mux.Handle(path, withPeer(h))
	tc := tlsOf("worker-2").Clone()
	tc.NextProtos = []string{"h2"}
	srv := &http.Server{Handler: mux, TLSConfig: tc}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { srv.ServeTLS(ln, "", "") })
	defer srv.Close()
	ctx2, pause2 := context.WithCancel(context.Background())
	defer pause2()
	wg.Go(func() {
		RunWorker(ctx2, WorkerConfig{Coordinator: coord.Addr(), Name: "worker-2", Slots: 1, DataAddress: ln.Addr().String(), Graph: GraphOf(spec), TLS: tlsOf("worker-2"), Logger: quiet(),
			RetryInterval: 50 * time.Millisecond, Registered: func(Worker, Liveness, string) {}, Fence: func(error) {}})
	})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	started := make(chan error, 1)
	go func() {
		ex, err := x.Start(ctx, spec, runtime.Part{RunID: "r", Attempt: 1}, make(chan runtime.Report, 64))
		if ex != nil {
			ex.Stop()
		}
		started <- err
	}()
	<-hw.deploying
	pause2() // worker-2 stops heartbeating: the coordinator declares it lost after 1 s
	lostAt := time.Now()
	for {
		if ws, _ := coord.Workers(); len(ws) == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, not synchronising
	}
	t.Logf("worker-2 declared lost %v after it stopped heartbeating", time.Since(lostAt).Round(time.Millisecond))
	select {
	case err := <-started:
		t.Logf("Start returned %v after the loss: %v", time.Since(lostAt).Round(time.Millisecond), err)
		if err == nil || !strings.Contains(err.Error(), "lost") {
			t.Fatalf("the deploy of an attempt whose worker was lost: %v, want an error that says so", err)
		}
	case <-time.After(10 * time.Second):
		err := <-started
		t.Fatalf("the deploy of attempt 1 went on %v after worker-2 was declared lost (heartbeat timeout 1s); it ended only at the call timeout: %v", time.Since(lostAt).Round(time.Second), err)
	}
}
