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
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/cluster/clusterpb/clusterpbconnect"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/storage"
)

// hangingWorker's Deploy and Probe never answer (a paused process, or one
// cut off mid-call); it says when the first arrived.
type hangingWorker struct {
	clusterpbconnect.UnimplementedWorkerServiceHandler
	called chan struct{}
	once   sync.Once
}

func (h *hangingWorker) hang(ctx context.Context) error {
	h.once.Do(func() { close(h.called) })
	<-ctx.Done()
	return ctx.Err()
}

func (h *hangingWorker) Deploy(ctx context.Context, _ *connect.Request[clusterpb.DeployRequest]) (*connect.Response[clusterpb.DeployResponse], error) {
	return nil, h.hang(ctx)
}

func (h *hangingWorker) Probe(ctx context.Context, _ *connect.Request[clusterpb.ProbeRequest]) (*connect.Response[clusterpb.ProbeResponse], error) {
	return nil, h.hang(ctx)
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
// The same held for the probe of the checkpoint storage that comes before
// the deploy (left by session 34, fixed in session 35).
func TestDeployGivesUpOnAWorkerDeclaredLost(t *testing.T) {
	t.Run("deploy", func(t *testing.T) { testGivesUpOnALostWorker(t, false) })
	t.Run("probe", func(t *testing.T) { testGivesUpOnALostWorker(t, true) })
}

// testGivesUpOnALostWorker starts an attempt on two workers, the second
// of which stops heartbeating while its deploy (or, with probe, its
// storage probe) hangs, and checks that Start gives up on it soon after
// the coordinator declares it lost.
func testGivesUpOnALostWorker(t *testing.T, probe bool) {
	tlsOf := testCerts(t, "worker-1", "worker-2")
	plan, err := graph.NewPlan(graph.Graph{Nodes: []graph.Node{{UID: "src", Kind: graph.KindSink, Parallelism: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	spec := closingSpec("lost", plan, "w", newTaskEvents())
	if probe {
		if spec.Storage, err = storage.NewDir(vfs.Default, t.TempDir(), "lost", 0); err != nil {
			t.Fatal(err)
		}
	}
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
	hw := &hangingWorker{called: make(chan struct{})}
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
	<-hw.called
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
			t.Fatalf("the start (probe %v) of an attempt whose worker was lost: %v, want an error that says so", probe, err)
		}
	case <-time.After(10 * time.Second):
		err := <-started
		t.Fatalf("the start of attempt 1 (probe %v) went on %v after worker-2 was declared lost (heartbeat timeout 1s); it ended only at the call timeout: %v", probe, time.Since(lostAt).Round(time.Second), err)
	}
}
