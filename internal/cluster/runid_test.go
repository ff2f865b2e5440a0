package cluster

import (
	"context"
	"crypto/tls"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/internal/transport"
	"github.com/weirstream/weir/operator"
)

// openedOn is what a probe saw at Open, on which worker.
type openedOn struct {
	worker, run, lineage string
	attempt, subtask     int
}

// probe is a source that records its context and idles until released.
type probe struct {
	operator.Base
	worker  string
	seen    func(openedOn)
	release *atomic.Bool
}

func (p *probe) Open(ctx *operator.Context) error {
	p.seen(openedOn{p.worker, ctx.RunID, ctx.Lineage, ctx.Attempt, ctx.Subtask})
	return nil
}

func (p *probe) Poll() (operator.PollResult, error) {
	if p.release.Load() {
		return operator.PollResult{Exhausted: true}, nil
	}
	return operator.PollResult{IdleUntil: time.Now().Add(5 * time.Millisecond)}, nil
}

// TestRunIDReachesEveryWorkerAndOutlivesARedeploy: the coordinator's run
// id reaches the operator contexts on every worker, as their lineage too
// (the run restores nothing), and is the same after
// a worker's process died, was started again, and the coordinator
// deployed the next attempt on it.
func TestRunIDReachesEveryWorkerAndOutlivesARedeploy(t *testing.T) {
	dir := t.TempDir()
	if err := transport.WriteCerts(dir, []string{"coordinator", "worker-1", "worker-2"}, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	tlsOf := func(name string) *tls.Config {
		tc, err := transport.LoadTLS(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		return tc
	}
	plan, err := graph.NewPlan(graph.Graph{Nodes: []graph.Node{{UID: "probe", Kind: graph.KindSink, Parallelism: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		seen    []openedOn
		changed = make(chan struct{}) // closed and replaced at each Open
		release atomic.Bool
	)
	specOf := func(worker string) runtime.Spec {
		return runtime.Spec{
			Name: "runid", Plan: plan, Mode: runtime.None, Restart: runtime.FixedDelay{Delay: 10 * time.Millisecond, MaxAttempts: 10},
			Logger: quiet(),
			Build: func(*runtime.TaskBuild) (*runtime.TaskParts, error) {
				op := &probe{worker: worker, release: &release, seen: func(o openedOn) {
					mu.Lock()
					defer mu.Unlock()
					seen = append(seen, o)
					close(changed)
					changed = make(chan struct{})
				}}
				return &runtime.TaskParts{Ops: []operator.Operator{op}, Head: op}, nil
			},
		}
	}
	// waitFor waits until cond holds of what the probes saw.
	waitFor := func(what string, cond func([]openedOn) bool) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			mu.Lock()
			ok, ch, now := cond(seen), changed, append([]openedOn(nil), seen...)
			mu.Unlock()
			if ok {
				return
			}
			select {
			case <-ch:
			case <-deadline:
				t.Fatalf("no %s within 30s; opened: %v", what, now)
			}
		}
	}
	// onBoth: subtasks 0 and 1 opened in one attempt at least attempt, on
	// both workers.
	onBoth := func(attempt int) func([]openedOn) bool {
		return func(os []openedOn) bool {
			by := map[int]map[string]bool{}
			for _, o := range os {
				if o.attempt >= attempt {
					if by[o.attempt] == nil {
						by[o.attempt] = map[string]bool{}
					}
					by[o.attempt][o.worker] = true
				}
			}
			for _, ws := range by {
				if len(ws) == 2 {
					return true
				}
			}
			return false
		}
	}

	spec := specOf("coordinator")
	coord, err := StartCoordinator(CoordinatorConfig{Graph: GraphOf(spec), TLS: tlsOf("coordinator"), Liveness: Liveness{HeartbeatInterval: 100 * time.Millisecond, Timeout: time.Second}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer coord.Close()
	x := NewExecutor(coord)
	defer x.Close()
	spec.Executor = x

	var wg sync.WaitGroup
	defer wg.Wait()
	worker := func(name string) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		wg.Go(func() {
			RunNode(ctx, NodeConfig{Coordinator: coord.Addr(), Name: name, Slots: 1, TLS: tlsOf(name), Spec: specOf(name), Logger: quiet(), RetryInterval: 50 * time.Millisecond})
		})
		return cancel
	}
	stop1 := worker("worker-1")
	defer func() { stop1() }()
	old2 := worker("worker-2")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	result := make(chan error, 1)
	go func() {
		_, err := runtime.Run(ctx, spec)
		result <- err
	}()
	waitFor("attempt on both workers", onBoth(1))
	mu.Lock()
	first := seen[len(seen)-1].attempt
	mu.Unlock()
	old2() // worker-2's process dies
	stop2 := worker("worker-2")
	defer func() { stop2() }()
	waitFor("redeploy on both workers", onBoth(first+1))
	release.Store(true)
	if err := <-result; err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	workers := map[string]bool{}
	for _, o := range seen {
		if o.run == "" || o.run != seen[0].run {
			t.Fatalf("opened %v: want one run id, in every context", seen)
		}
		if o.lineage != o.run {
			t.Fatalf("opened %v: want the run's id as the lineage of a run that restores nothing, in every context", seen)
		}
		workers[o.worker] = true
	}
	if len(workers) != 2 || workers["coordinator"] {
		t.Fatalf("opened %v: want operators on worker-1 and worker-2 only", seen)
	}
}
