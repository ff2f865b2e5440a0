package cluster

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/internal/runtime"
)

// TestStopDoesNotWaitOutAWorkerDeclaredLost: Stop "returns when they have
// stopped its tasks, or could not be reached". Once Stop cancelled on
// suspect workers too (TestStopCancelsTheAttemptOnASuspectWorker), one that
// stopped answering (paused, partitioned: the very case in which it is made
// suspect) held the restart for the whole 30 s call timeout, though the
// coordinator declares it lost, and it fences itself, after the heartbeat
// timeout (2 s here). A suspect worker's Cancel is now bounded by that
// timeout. Found by an outside review of session 34's fixes.
func TestStopDoesNotWaitOutAWorkerDeclaredLost(t *testing.T) {
	tlsOf := testCerts(t, "worker-1", "worker-2")
	plan, err := graph.NewPlan(graph.Graph{Nodes: []graph.Node{{UID: "src", Kind: graph.KindSink, Parallelism: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	ev := newTaskEvents()
	specOf := func(worker string) runtime.Spec { return closingSpec("lost", plan, worker, ev) }
	spec := specOf("coordinator")
	coord, err := StartCoordinator(CoordinatorConfig{Graph: GraphOf(spec), TLS: tlsOf("coordinator"), Liveness: Liveness{HeartbeatInterval: 200 * time.Millisecond, Timeout: 2 * time.Second}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close()
	lost := make(chan Worker, 4)
	stopLost := make(chan struct{})
	var lwg sync.WaitGroup
	lwg.Go(func() {
		for {
			select {
			case w := <-coord.Lost():
				lost <- w
			case <-stopLost:
				return
			}
		}
	})
	defer func() { close(stopLost); lwg.Wait() }()
	x := NewExecutor(coord)
	defer x.Close()

	// worker-2 reaches the coordinator, and is reached, through proxies
	// that can go silent: a paused (SIGSTOP) or partitioned process.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen2 := ln.Addr().String()
	ln.Close()
	toCoord := newProxy(t, coord.Addr())
	toWorker := newProxy(t, listen2)

	var wg sync.WaitGroup
	defer wg.Wait()
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	wg.Go(func() {
		RunNode(ctx1, NodeConfig{Coordinator: coord.Addr(), Name: "worker-1", Slots: 1, TLS: tlsOf("worker-1"), Spec: specOf("worker-1"), Logger: quiet(), RetryInterval: 50 * time.Millisecond})
	})
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	wg.Go(func() {
		RunNode(ctx2, NodeConfig{Coordinator: toCoord.ln.Addr().String(), Name: "worker-2", Slots: 1, TLS: tlsOf("worker-2"), Spec: specOf("worker-2"), Logger: quiet(), RetryInterval: 50 * time.Millisecond,
			Listen: listen2, Advertise: toWorker.ln.Addr().String()})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ex, err := x.Start(ctx, spec, runtime.Part{RunID: "r", Attempt: 1}, make(chan runtime.Report, 64))
	if err != nil {
		t.Fatal(err)
	}
	ev.waitFor(t, "open worker-1")
	ev.waitFor(t, "open worker-2")

	// worker-2 goes silent; a peer's data connection to it failing makes
	// it suspect (Coordinator.Report), and the attempt fails: Stop.
	toCoord.cut.Store(true)
	toWorker.cut.Store(true)
	ws, _ := coord.Workers()
	for _, w := range ws {
		if w.Name == "worker-2" {
			coord.suspect(w, errors.New("planted: a peer's data connection to it went silent"))
		}
	}
	start := time.Now()
	ex.Stop()
	took := time.Since(start)
	var lostAfter time.Duration
	select {
	case <-lost:
		lostAfter = time.Since(start)
	default:
	}
	t.Logf("Stop took %v; worker-2 declared lost by then: %v", took.Round(100*time.Millisecond), lostAfter > 0)
	if took > 10*time.Second {
		t.Fatalf("Stop took %v: it waited out callTimeout on worker-2, which stopped answering and was declared lost after the 2 s heartbeat timeout (it fenced itself); the restart waits that long", took.Round(100*time.Millisecond))
	}
}
