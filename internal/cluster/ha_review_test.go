package cluster

// Outside review of the highly available coordinator (issue 20,
// d35ea82..cd81d43): workers --join a,b,c and sessions numbered from the
// term's epoch. Each test states the defect it shows; they fail on cd81d43.

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/internal/transport"
	"github.com/weirstream/weir/operator"
)

// freezer forwards TCP to target until frozen; then it behaves as a
// process stopped with SIGSTOP whose socket stays open: connections open
// so far carry nothing more, and new ones are accepted (by the kernel)
// but never answered.
type freezer struct {
	ln     net.Listener
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newFreezer(t *testing.T, target string) *freezer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln}
	f.wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, in)
			f.mu.Unlock()
			if f.frozen.Load() {
				continue // held open, never read
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, out)
			f.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					if err != nil {
						if !f.frozen.Load() {
							dst.Close()
						}
						return
					}
					if !f.frozen.Load() {
						dst.Write(buf[:n])
					}
				}
			}
			f.wg.Go(func() { pipe(out, in) })
			f.wg.Go(func() { pipe(in, out) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func (f *freezer) addr() string { return f.ln.Addr().String() }

// joinWorker runs worker-1 with --join addrs; each registration is
// recorded as "registered at <coordinator address>".
func (c *testCluster) joinWorker(addrs string) (stop func()) {
	tc, err := transport.LoadTLS(c.certs, "worker-1")
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.wg.Go(func() {
		RunWorker(ctx, WorkerConfig{
			Coordinator: addrs, Name: "worker-1", Slots: 2, DataAddress: "127.0.0.1:1", Graph: jobGraph, TLS: tc, Logger: quiet(),
			RetryInterval: 50 * time.Millisecond,
			Registered:    func(w Worker, _ Liveness, at string) { c.record("registered at " + at) },
			Fence:         func(error) { c.record("fenced") },
		})
	})
	return cancel
}

// startCoordinator starts another coordinator of the test cluster's job
// (a standby that came to lead), with epoch.
func (c *testCluster) startCoordinator(live Liveness, epoch uint64) *Coordinator {
	co, err := StartCoordinator(CoordinatorConfig{Graph: jobGraph, TLS: c.tls("coordinator"), Liveness: live, Logger: quiet(), Epoch: epoch})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { co.Close() })
	return co
}

// waitWithin waits for event e, or fails the test after d.
func (c *testCluster) waitWithin(e string, d time.Duration, why string) {
	c.t.Helper()
	deadline := time.After(d)
	for {
		n, ch := c.nth(e, 1)
		if n >= 0 {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			c.mu.Lock()
			evs := append([]string(nil), c.events...)
			c.mu.Unlock()
			c.t.Fatalf("no %q within %v: %s (events: %q)", e, d, why, evs)
		}
	}
}

// TestReviewWorkerLeavesAPausedLeaderForTheNext: the leading coordinator
// is paused (SIGSTOP): its port still accepts connections, which are never
// answered. Its term ends, a standby leads at the next address of --join.
// The worker fences, and registers again at the address it was at: the
// Register's timeout (registerTimeout, 2 heartbeat timeouts) is computed
// but never applied, and the TLS handshake has no deadline, so it waits
// for the paused process for ever and never tries the new leader. The
// job is stuck for as long as the old leader is paused.
func TestReviewWorkerLeavesAPausedLeaderForTheNext(t *testing.T) {
	live := Liveness{HeartbeatInterval: 100 * time.Millisecond, Timeout: time.Second}
	c := newCluster(t, live, "worker-1")
	paused := newFreezer(t, c.coord.Addr()) // the old leader, at its address
	next := c.startCoordinator(live, 2)
	stop := c.joinWorker(paused.addr() + "," + next.Addr())
	defer stop()
	c.waitWithin("registered at "+paused.addr(), 10*time.Second, "the first registration")
	paused.frozen.Store(true)
	c.waitWithin("fenced", 10*time.Second, "the worker fences when its heartbeats go unanswered")
	c.waitWithin("registered at "+next.Addr(), 20*time.Second,
		"the worker never registered with the new leader: it waits on the paused one (Register and the TLS handshake have no deadline)")
}

// TestReviewWorkerJoinsPastAPausedCoordinator: a worker (re)started while
// the first address of --join is a paused coordinator never reaches the
// leader at the second: its first Register waits for ever (the designed
// bound, firstRegisterTimeout, is one minute, and is not applied).
func TestReviewWorkerJoinsPastAPausedCoordinator(t *testing.T) {
	live := Liveness{HeartbeatInterval: 100 * time.Millisecond, Timeout: time.Second}
	c := newCluster(t, live, "worker-1")
	paused, err := net.Listen("tcp", "127.0.0.1:0") // accepted by the kernel, never served
	if err != nil {
		t.Fatal(err)
	}
	defer paused.Close()
	stop := c.joinWorker(paused.Addr().String() + "," + c.coord.Addr())
	defer stop()
	c.waitWithin("registered at "+c.coord.Addr(), firstRegisterTimeout+15*time.Second,
		"the worker waits on the paused coordinator, first in --join, past the one-minute bound of a first Register")
}

// TestReviewWorkerObeysADeposedCoordinatorsCancel: "sessions are numbered
// from the epoch up, so workers refuse a deposed coordinator's commands" —
// only Deploy carries a session. Control (triggers, completions, aborts)
// and Cancel carry the attempt alone, and every term numbers its attempts
// from 1. A deposed coordinator that resumes (SIGCONT) and stops its
// attempt 1 (Executor.Stop sends Cancel{Attempt: 1}; its deliver loop
// sends queued Control{Attempt: 1}) reaches a worker that now runs the new
// leader's attempt 1: the worker cancels the new leader's tasks.
func TestReviewWorkerObeysADeposedCoordinatorsCancel(t *testing.T) {
	live := Liveness{HeartbeatInterval: 100 * time.Millisecond, Timeout: time.Second}
	c := newCluster(t, live, "worker-1")
	deposed := NewExecutor(c.coord) // the old term's coordinator (epoch 0 here)
	defer deposed.Close()
	plan, err := graph.NewPlan(graph.Graph{Nodes: []graph.Node{{UID: "probe", Kind: graph.KindSink, Parallelism: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		events []string
	)
	record := func(e string) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	has := func(e string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, x := range events {
			if x == e {
				return true
			}
		}
		return false
	}
	var release atomic.Bool
	spec := runtime.Spec{
		Name: "review", Plan: plan, Mode: runtime.None, Restart: runtime.FixedDelay{Delay: 10 * time.Millisecond, MaxAttempts: 10},
		Logger: quiet(), RunID: "leader-epoch-2",
		Build: func(*runtime.TaskBuild) (*runtime.TaskParts, error) {
			op := &closingProbe{probe: probe{release: &release, seen: func(o openedOn) { record(fmt.Sprintf("opened attempt %d", o.attempt)) }}, closed: func() { record("closed") }}
			return &runtime.TaskParts{Ops: []operator.Operator{op}, Head: op}, nil
		},
	}
	leader, err := StartCoordinator(CoordinatorConfig{Graph: GraphOf(spec), TLS: c.tls("coordinator"), Liveness: live, Logger: quiet(), Epoch: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer leader.Close()
	x := NewExecutor(leader)
	defer x.Close()
	spec.Executor = x
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		RunNode(ctx, NodeConfig{Coordinator: leader.Addr(), Name: "worker-1", Slots: 1, TLS: c.tls("worker-1"), Spec: spec, Logger: quiet(), RetryInterval: 50 * time.Millisecond})
	})
	result := make(chan error, 1)
	wg.Go(func() {
		_, err := runtime.Run(ctx, spec)
		result <- err
	})
	deadline := time.Now().Add(30 * time.Second)
	// NB: on the wire (and to operators) attempts are numbered from the
	// term's epoch up: the leader's (epoch 2) first is 2<<24 | 1.
	first := fmt.Sprintf("opened attempt %d", 2<<sessionBits|1)
	for !has(first) {
		if time.Now().After(deadline) {
			t.Fatal("the leader's attempt 1 never opened")
		}
		time.Sleep(10 * time.Millisecond) // polls the probe's record
	}
	ws, _ := leader.Workers()
	if len(ws) != 1 || ws[0].Session>>sessionBits != 2 {
		t.Fatalf("workers of the leader: %+v", ws)
	}
	// The deposed coordinator stops its own attempt 1, as Executor.Stop
	// does, at the worker's address it knew.
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, cerr := deposed.client(ws[0]).Cancel(cctx, connect.NewRequest(&clusterpb.CancelRequest{Attempt: 1}))
	ccancel()
	time.Sleep(2 * time.Second)
	if has("closed") || has(fmt.Sprintf("opened attempt %d", 2<<sessionBits|2)) {
		t.Errorf("a deposed coordinator's Cancel{Attempt: 1} (answered %v) stopped the current leader's attempt 1 on worker-1 (events %q): Control and Cancel carry no session", cerr, events)
	}
	release.Store(true)
	select {
	case <-result:
	case <-time.After(30 * time.Second):
		t.Error("the leader's run did not end")
	}
}

// closingProbe is a probe that says when it is closed.
type closingProbe struct {
	probe
	closed func()
}

func (p *closingProbe) Close() error {
	p.closed()
	return nil
}

// TestReviewSessionsRunOutWithoutAStepDown: a term numbers at most 2^24-1
// sessions; then Register refuses every worker, saying "a standby takes
// over when it steps down" — but nothing makes the leader step down (and
// a coordinator without --ha, epoch 0, has no standby): no worker can
// ever register again, and the job waits for slots for ever.
func TestReviewSessionsRunOutWithoutAStepDown(t *testing.T) {
	t0 := time.Unix(1000, 0)
	m := NewMembers(jobGraph, time.Second, 0)
	m.session = 1<<sessionBits - 2
	if _, _, err := m.Register(Worker{Name: "a", Slots: 2}, jobGraph, t0); err != nil {
		t.Fatal(err)
	}
	_, _, err := m.Register(Worker{Name: "b", Slots: 2}, jobGraph, t0)
	if err != nil {
		t.Errorf("a coordinator without high availability refuses every registration after %d sessions: %v", 1<<sessionBits-1, err)
		if strings.Contains(err.Error(), "standby") {
			t.Errorf("and blames the lack of a step-down on a standby that does not exist")
		}
	}
}
