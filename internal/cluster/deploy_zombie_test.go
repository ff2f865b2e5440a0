package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/internal/transport"
	"github.com/weirstream/weir/operator"
)

// testCerts writes a cluster's certificates and returns a loader.
func testCerts(t *testing.T, names ...string) func(string) *tls.Config {
	dir := writeCerts(t, names...)
	return func(name string) *tls.Config {
		tc, err := transport.LoadTLS(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		return tc
	}
}

// TestCancelledDeployLeavesNoZombieTasks (found by an outside review,
// session 34). Rule (Execution.Stop, runtime.Execution): when an attempt stops — here,
// because its deploy failed on one worker — no task of that attempt runs
// on any live worker afterwards. A deploy the coordinator gave up on
// (it cancelled the call when another worker's deploy failed) must not
// go on to start its tasks after the coordinator's Cancel of the attempt
// was answered: the Cancel found nothing to cancel (the deploy had not
// set n.run yet), and the deploy then installed the attempt's tasks,
// which run as zombies until some later deploy reaches the same worker.
func TestCancelledDeployLeavesNoZombieTasks(t *testing.T) {
	tlsOf := testCerts(t, "worker-1", "worker-2")
	plan, err := graph.NewPlan(graph.Graph{Nodes: []graph.Node{{UID: "probe", Kind: graph.KindSink, Parallelism: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	ev := newTaskEvents()
	entered := make(chan struct{}) // worker-1's build began
	unblock := make(chan struct{}) // worker-1's build may go on
	var enteredOnce sync.Once
	specOf := func(worker string) runtime.Spec {
		return runtime.Spec{
			Name: "zombie", Plan: plan, Mode: runtime.None, Logger: quiet(),
			Build: func(*runtime.TaskBuild) (*runtime.TaskParts, error) {
				switch worker {
				case "worker-1":
					enteredOnce.Do(func() { close(entered) })
					<-unblock
				case "worker-2":
					<-entered // fail only once worker-1's deploy is under way
					return nil, errors.New("planted: worker-2 cannot build its task")
				}
				op := &closingSource{worker: worker, event: ev.add}
				return &runtime.TaskParts{Ops: []operator.Operator{op}, Head: op}, nil
			},
		}
	}
	spec := specOf("coordinator")
	coord, err := StartCoordinator(CoordinatorConfig{Graph: GraphOf(spec), TLS: tlsOf("coordinator"), Liveness: Liveness{HeartbeatInterval: 100 * time.Millisecond, Timeout: 2 * time.Second}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close()
	x := NewExecutor(coord)
	defer x.Close()
	spec.Executor = x

	var wg sync.WaitGroup
	defer wg.Wait()
	for _, name := range []string{"worker-1", "worker-2"} {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		wg.Go(func() {
			RunNode(ctx, NodeConfig{Coordinator: coord.Addr(), Name: name, Slots: 1, TLS: tlsOf(name), Spec: specOf(name), Logger: quiet(), RetryInterval: 50 * time.Millisecond})
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reports := make(chan runtime.Report, 64)
	_, err = x.Start(ctx, spec, runtime.Part{RunID: "r", Attempt: 1}, reports)
	if err == nil {
		t.Fatal("attempt 1 deployed although worker-2 could not build its task")
	}
	t.Logf("attempt 1 failed to deploy, and was stopped: %v", err)
	// The coordinator stopped attempt 1 everywhere (Start called Stop).
	// worker-1's deploy handler is still building; let it finish.
	close(unblock)
	// If worker-1's task of attempt 1 starts at all, it must stop again
	// at once: the attempt was stopped.
	deadline := time.After(10 * time.Second)
	for {
		opened, ch := ev.count("open worker-1")
		closed, _ := ev.count("close worker-1")
		if opened == closed && opened > 0 {
			t.Logf("worker-1's task of attempt 1 opened and closed again")
			return
		}
		select {
		case <-ch:
		case <-deadline:
			if opened == 0 {
				return // never started: nothing runs
			}
			t.Fatalf("worker-1 started its task of attempt 1 after the coordinator had stopped attempt 1 (Start failed, Stop's Cancel answered), and 10s later it still runs: a zombie attempt (opened %d, closed %d)", opened, closed)
		}
	}
}
