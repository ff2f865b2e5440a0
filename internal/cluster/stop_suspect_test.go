package cluster

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/operator"
)

// taskEvents counts what tasks say ("open worker-1", "close worker-1").
type taskEvents struct {
	mu      sync.Mutex
	counts  map[string]int
	changed chan struct{} // closed at the next event
}

func newTaskEvents() *taskEvents {
	return &taskEvents{counts: map[string]int{}, changed: make(chan struct{})}
}

func (e *taskEvents) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.counts[s]++
	close(e.changed)
	e.changed = make(chan struct{})
}

// count is how often s was said, and a channel closed at the next event.
func (e *taskEvents) count(s string) (int, <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.counts[s], e.changed
}

// waitFor waits until s was said, at most 20 s.
func (e *taskEvents) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		n, ch := e.count(s)
		if n > 0 {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no %q within 20s", s)
		}
	}
}

// closingSpec is job name's spec on worker: a closingSource per subtask.
func closingSpec(name string, plan *graph.Plan, worker string, ev *taskEvents) runtime.Spec {
	return runtime.Spec{
		Name: name, Plan: plan, Mode: runtime.None, Logger: quiet(),
		Build: func(*runtime.TaskBuild) (*runtime.TaskParts, error) {
			op := &closingSource{worker: worker, event: ev.add}
			return &runtime.TaskParts{Ops: []operator.Operator{op}, Head: op}, nil
		},
	}
}

// closingSource idles until its attempt stops, and says when it opens and
// closes.
type closingSource struct {
	operator.Base
	worker string
	event  func(string)
}

func (s *closingSource) Open(*operator.Context) error { s.event("open " + s.worker); return nil }
func (s *closingSource) Close() error                 { s.event("close " + s.worker); return nil }
func (s *closingSource) Poll() (operator.PollResult, error) {
	return operator.PollResult{IdleUntil: time.Now().Add(5 * time.Millisecond)}, nil
}

// TestStopCancelsTheAttemptOnASuspectWorker (found by an outside review,
// session 34). Rule (runtime.Execution.Stop; executor.go's Stop says it "returns when
// they have stopped its tasks, or could not be reached"): Stop cancels
// the attempt on every worker that runs its tasks and is alive. A worker
// that is merely suspect (a peer reported its data connection failing, a
// control call to it timed out) is alive and answering heartbeats; Stop
// skipped it as if it were lost ("lost: it fenced itself"), so its tasks
// of the stopped attempt go on running beside the next attempt's.
func TestStopCancelsTheAttemptOnASuspectWorker(t *testing.T) {
	tlsOf := testCerts(t, "worker-1", "worker-2")
	plan, err := graph.NewPlan(graph.Graph{Nodes: []graph.Node{{UID: "src", Kind: graph.KindSink, Parallelism: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	ev := newTaskEvents()
	specOf := func(worker string) runtime.Spec { return closingSpec("suspect", plan, worker, ev) }
	spec := specOf("coordinator")
	// Heartbeats a minute apart: a worker made suspect stays so for the test.
	coord, err := StartCoordinator(CoordinatorConfig{Graph: GraphOf(spec), TLS: tlsOf("coordinator"), Liveness: Liveness{HeartbeatInterval: time.Minute, Timeout: 5 * time.Minute}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close()
	x := NewExecutor(coord)
	defer x.Close()
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
	ex, err := x.Start(ctx, spec, runtime.Part{RunID: "r", Attempt: 1}, make(chan runtime.Report, 64))
	if err != nil {
		t.Fatal(err)
	}
	ev.waitFor(t, "open worker-1")
	ev.waitFor(t, "open worker-2")
	// worker-2 becomes suspect, as when worker-1 reports that its data
	// connection to worker-2 failed (Coordinator.Report) or a control call
	// to it timed out (deliver). It still answers heartbeats: it is alive.
	ws, _ := coord.Workers()
	for _, w := range ws {
		if w.Name == "worker-2" {
			coord.suspect(w, errors.New("planted: a peer's data connection to it failed"))
		}
	}
	if _, slots := coord.Workers(); slots != 1 {
		t.Fatalf("worker-2 not suspect: %d slots", slots)
	}
	ex.Stop()
	if n, _ := ev.count("close worker-1"); n == 0 {
		t.Fatal("Stop returned before worker-1's task of the attempt closed")
	}
	if n, _ := ev.count("close worker-2"); n == 0 {
		t.Fatal("Stop returned, and the suspect (but live) worker-2 still runs its task of the stopped attempt: it was never told to cancel")
	}
}
