package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/internal/transport"
	"github.com/weirstream/weir/storage"
)

// slowProbes is a directory whose probe writes wait until released, and
// say when they are done.
type slowProbes struct {
	*storage.Dir
	entered chan struct{}
	release chan struct{}
	wrote   chan struct{} // buffered: the worker's handler goes on after the test gives up on it
}

func (s slowProbes) WriteProbe(name string, data []byte) error {
	defer func() { s.wrote <- struct{}{} }()
	s.entered <- struct{}{}
	<-s.release
	return s.Dir.WriteProbe(name, data)
}

// TestProbeCancelledIsNoUnreachableWorker: a probe the coordinator gives
// up on itself (its attempt or the coordinator stopping) says nothing of
// the worker, which answered every heartbeat. It made the worker suspect
// (no tasks until its next heartbeat) and logged it so, as a probe the
// worker never answered does; the deploy and control calls already told
// the two apart.
func TestProbeCancelledIsNoUnreachableWorker(t *testing.T) {
	dir := t.TempDir()
	if err := transport.WriteCerts(dir, []string{"coordinator", "worker-1"}, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	plan, err := graph.NewPlan(graph.Graph{Nodes: []graph.Node{{UID: "sink", Kind: graph.KindSink, Parallelism: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := storage.NewDir(vfs.Default, dir, "job", 0)
	if err != nil {
		t.Fatal(err)
	}
	slow := slowProbes{st, make(chan struct{}), make(chan struct{}), make(chan struct{}, 1)}
	spec := runtime.Spec{Name: "job", Plan: plan, Mode: runtime.None, Logger: quiet(), Storage: slow}
	tc, err := transport.LoadTLS(dir, "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	// Heartbeats far apart: a worker made suspect stays so for the test.
	coord, err := StartCoordinator(CoordinatorConfig{Graph: GraphOf(spec), TLS: tc, Liveness: Liveness{HeartbeatInterval: time.Minute, Timeout: 5 * time.Minute}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close()
	x := NewExecutor(coord)
	defer x.Close()

	wtc, err := transport.LoadTLS(dir, "worker-1")
	if err != nil {
		t.Fatal(err)
	}
	nctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		RunNode(nctx, NodeConfig{Coordinator: coord.Addr(), Name: "worker-1", Slots: 1, TLS: wtc, Spec: spec, Logger: quiet(), RetryInterval: 50 * time.Millisecond})
	}()
	// NB: the worker's probe handler writes into dir once released, maybe
	// after RunNode returned: it must be done before dir is removed.
	writing := false
	defer func() {
		stop()
		close(slow.release)
		if writing {
			<-slow.wrote
		}
		<-done
	}()
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	ws, err := coord.WaitForSlots(wctx, 1, 0)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	probed := make(chan error, 1)
	go func() { probed <- x.probe(ctx, slow, ws[0]) }()
	select {
	case <-slow.entered:
		writing = true
	case err := <-probed:
		t.Fatalf("the probe ended before the worker wrote: %v", err)
	}
	cancel()
	if err := <-probed; err == nil {
		t.Fatal("the probe given up on returned no error")
	}
	if got, slots := coord.Workers(); slots != 1 || len(got) != 1 {
		t.Fatalf("after a probe the coordinator gave up on: workers %+v, %d slots; want worker-1 with its slot (not suspect)", got, slots)
	}
}
