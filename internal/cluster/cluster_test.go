package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var jobGraph = Graph{Job: "wordcount", Version: "v1", Operators: []checkpoint.Operator{
	{UID: "source", Kind: "source"}, {UID: "count", Kind: "keyed-process", MaxParallelism: 128}, {UID: "sink", Kind: "sink"},
}}

func TestGraphDiff(t *testing.T) {
	if d := jobGraph.Diff(jobGraph); d != nil {
		t.Fatalf("a graph differs from itself: %v", d)
	}
	other := Graph{Job: "wordcount", Version: "v2", Operators: []checkpoint.Operator{
		{UID: "source", Kind: "keyed-process"}, {UID: "count", Kind: "keyed-process", MaxParallelism: 64}, {UID: "extra", Kind: "sink"},
	}}
	want := []string{
		`no operator "sink"`,
		`operator "count" has max parallelism 64, not 128`,
		`operator "extra", which this job lacks`,
		`operator "source" is a keyed-process, not a source`,
		`version "v2", not "v1"`,
	}
	if got := jobGraph.Diff(other); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("diff:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestMembers(t *testing.T) {
	t0 := time.Unix(1000, 0)
	m := NewMembers(jobGraph, 5*time.Second, 0)
	a, replaced, err := m.Register(Worker{Name: "a", Slots: 2}, jobGraph, t0)
	if err != nil || replaced != nil || a.Session != 1 {
		t.Fatalf("register a: %+v %v %v", a, replaced, err)
	}
	if _, _, err := m.Register(Worker{Name: "b", Slots: 2}, Graph{Job: "other"}, t0); !errors.Is(err, ErrOtherGraph) || !strings.Contains(err.Error(), `job "other"`) {
		t.Fatalf("another graph: %v", err)
	}
	if _, _, err := m.Register(Worker{Name: "b"}, jobGraph, t0); err == nil {
		t.Fatal("a worker without slots registered")
	}
	b, _, _ := m.Register(Worker{Name: "b", Slots: 3}, jobGraph, t0)
	if ws, slots := m.Workers(); len(ws) != 2 || slots != 5 {
		t.Fatalf("workers %v, %d slots", ws, slots)
	}
	if err := m.Heartbeat("a", a.Session, t0.Add(4*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := m.Heartbeat("a", 99, t0); !errors.Is(err, ErrSessionEnded) {
		t.Fatalf("heartbeat of another session: %v", err)
	}
	if lost := m.Expire(t0.Add(5*time.Second - 1)); lost != nil {
		t.Fatalf("lost before the timeout: %v", lost)
	}
	if lost := m.Expire(t0.Add(5 * time.Second)); len(lost) != 1 || lost[0].Name != "b" {
		t.Fatalf("lost %v, want b", lost)
	}
	if err := m.Heartbeat("b", b.Session, t0.Add(6*time.Second)); !errors.Is(err, ErrSessionEnded) {
		t.Fatalf("heartbeat of a lost worker: %v", err)
	}
	var held *NameHeldError
	if _, _, err := m.Register(Worker{Name: "a", Slots: 2}, jobGraph, t0.Add(6*time.Second)); !errors.As(err, &held) || held.Held.Session != a.Session || !errors.Is(err, ErrNameHeld) {
		t.Fatalf("a registered again while its session is live: %v", err)
	}
	a2, replaced, err := m.Register(Worker{Name: "a", Slots: 2}, jobGraph, t0.Add(9*time.Second))
	if err != nil || replaced == nil || replaced.Session != a.Session || a2.Session <= b.Session {
		t.Fatalf("a registered again after its timeout: %+v, replacing %+v, %v", a2, replaced, err)
	}
	if _, ok := m.End("a", a.Session); ok {
		t.Fatal("ended a replaced session")
	}
	if w, ok := m.End("a", a2.Session); !ok || w.Session != a2.Session {
		t.Fatalf("end a's session: %+v %v", w, ok)
	}
	if _, _, err := m.Register(Worker{Name: "a", Slots: 2}, jobGraph, t0.Add(9*time.Second)); err != nil {
		t.Fatalf("a registered after its session ended: %v", err)
	}
}

func TestLivenessValidate(t *testing.T) {
	if err := (Liveness{}).Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (Liveness{HeartbeatInterval: time.Second, Timeout: 1500 * time.Millisecond}).Validate(); err == nil {
		t.Fatal("a timeout under two intervals accepted")
	}
}

// testCluster is a coordinator with workers, over mutual TLS on loopback.
type testCluster struct {
	t     *testing.T
	certs string
	coord *Coordinator

	mu      sync.Mutex
	events  []string      // "registered w #session", "fenced w", "lost w", in order
	changed chan struct{} // closed at the next event
	wg      sync.WaitGroup
}

// writeCerts writes the certificates of a coordinator and of workers names
// into a directory it returns.
func writeCerts(t *testing.T, names ...string) string {
	dir := t.TempDir()
	if err := transport.WriteCerts(dir, append([]string{"coordinator"}, names...), []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	return dir
}

func newCluster(t *testing.T, live Liveness, names ...string) *testCluster {
	dir := writeCerts(t, names...)
	tc, err := transport.LoadTLS(dir, "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	c := &testCluster{t: t, certs: dir, changed: make(chan struct{})}
	c.coord, err = StartCoordinator(CoordinatorConfig{Graph: jobGraph, TLS: tc, Liveness: live, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	stopLost := make(chan struct{})
	c.wg.Go(func() {
		for {
			select {
			case w := <-c.coord.Lost():
				c.record("lost " + w.Name)
			case <-stopLost:
				return
			}
		}
	})
	t.Cleanup(func() {
		close(stopLost)
		c.wg.Wait()
		c.coord.Close()
	})
	return c
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func (c *testCluster) record(e string) {
	c.mu.Lock()
	c.events = append(c.events, e)
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// nth returns the position of the nth event e, or -1, and a channel closed
// at the next event.
func (c *testCluster) nth(e string, n int) (int, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.events {
		if x == e {
			if n--; n == 0 {
				return i, c.changed
			}
		}
	}
	return -1, c.changed
}

func (c *testCluster) has(e string) bool {
	i, _ := c.nth(e, 1)
	return i >= 0
}

// waitFor waits until the nth event e was recorded and returns its
// position.
func (c *testCluster) waitFor(e string, n int) int {
	c.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		i, changed := c.nth(e, n)
		if i >= 0 {
			return i
		}
		select {
		case <-changed:
		case <-deadline:
			c.mu.Lock()
			defer c.mu.Unlock()
			c.t.Fatalf("no %q (#%d) within 20s; events: %v", e, n, c.events)
		}
	}
}

// worker runs worker name (with the certificate of certName) reaching the
// coordinator at addr, until the returned stop is called; its error is
// delivered on the returned channel.
func (c *testCluster) worker(name, certName, addr string, g Graph) (stop func(), done <-chan error) {
	tc, err := transport.LoadTLS(c.certs, certName)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	c.wg.Go(func() {
		errc <- RunWorker(ctx, WorkerConfig{
			Coordinator: addr, Name: name, Slots: 2, DataAddress: "127.0.0.1:1", Graph: g, TLS: tc, Logger: quiet(),
			RetryInterval: 50 * time.Millisecond,
			Registered: func(w Worker, _ Liveness, _ string) {
				c.record("registered " + name)
			},
			Fence: func(error) { c.record("fenced " + name) },
		})
	})
	return cancel, errc
}

func TestWorkersJoinAndImpostorsAreRefused(t *testing.T) {
	c := newCluster(t, Liveness{HeartbeatInterval: 100 * time.Millisecond, Timeout: 5 * time.Second}, "worker-1", "worker-2")
	addr := c.coord.Addr()
	for _, name := range []string{"worker-1", "worker-2"} {
		stop, _ := c.worker(name, name, addr, jobGraph)
		defer stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ws, err := c.coord.WaitForSlots(ctx, 4, time.Second)
	if err != nil || len(ws) != 2 {
		t.Fatalf("workers %v: %v", ws, err)
	}

	_, done := c.worker("worker-3", "worker-1", addr, jobGraph)
	if err := <-done; err == nil || !strings.Contains(err.Error(), `certificate names "worker-1", not worker "worker-3"`) {
		t.Fatalf("a worker speaking for another: %v", err)
	}
	other := jobGraph
	other.Version = "v2"
	_, done = c.worker("worker-2", "worker-2", addr, other)
	if err := <-done; err == nil || !strings.Contains(err.Error(), `version "v2", not "v1"`) {
		t.Fatalf("a worker of another build: %v", err)
	}
	if _, slots := c.coord.Workers(); slots != 4 {
		t.Fatalf("refused workers changed the slots: %d", slots)
	}
}

// proxy forwards TCP connections to target until cut, then drops every
// byte (a silent partition) until healed.
type proxy struct {
	ln     net.Listener
	target string
	cut    atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	p.wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			p.wg.Go(func() { p.pipe(out, in) })
			p.wg.Go(func() { p.pipe(in, out) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.heal()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			dst.Close()
			return
		}
		if !p.cut.Load() {
			dst.Write(buf[:n])
		}
	}
}

// heal ends the partition; the connections it broke are closed.
func (p *proxy) heal() {
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.cut.Store(false)
}

// A worker cut off from the coordinator fences itself before the
// coordinator declares it lost; once the partition heals it registers
// again and its slots count again.
func TestPartitionedWorkerFencesBeforeItIsDeclaredLost(t *testing.T) {
	c := newCluster(t, Liveness{HeartbeatInterval: 250 * time.Millisecond, Timeout: 4 * time.Second}, "worker-1", "worker-2")
	p := newProxy(t, c.coord.Addr())
	stop1, _ := c.worker("worker-1", "worker-1", c.coord.Addr(), jobGraph)
	defer stop1()
	stop2, _ := c.worker("worker-2", "worker-2", p.ln.Addr().String(), jobGraph)
	defer stop2()
	c.waitFor("registered worker-1", 1)
	c.waitFor("registered worker-2", 1)

	p.cut.Store(true)
	fenced := c.waitFor("fenced worker-2", 1)
	lost := c.waitFor("lost worker-2", 1)
	if fenced > lost {
		t.Fatalf("worker-2 was declared lost before it fenced itself: %v", c.events)
	}
	if c.has("lost worker-1") || c.has("fenced worker-1") {
		t.Fatalf("the partition touched worker-1: %v", c.events)
	}
	if _, slots := c.coord.Workers(); slots != 2 {
		t.Fatalf("%d slots during the partition, want worker-1's 2", slots)
	}

	p.heal()
	c.waitFor("registered worker-2", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.coord.WaitForSlots(ctx, 4, time.Second); err != nil {
		t.Fatal(err)
	}
}

// A worker process that restarts and registers again before its timeout
// is reported lost at once: its tasks died with it.
func TestRestartedWorkerIsLostAtOnce(t *testing.T) {
	c := newCluster(t, Liveness{HeartbeatInterval: time.Second, Timeout: time.Minute}, "worker-1")
	stop, _ := c.worker("worker-1", "worker-1", c.coord.Addr(), jobGraph)
	c.waitFor("registered worker-1", 1)
	stop()
	c.waitFor("fenced worker-1", 1)
	stop, _ = c.worker("worker-1", "worker-1", c.coord.Addr(), jobGraph)
	defer stop()
	c.waitFor("lost worker-1", 1)
	c.waitFor("registered worker-1", 2)
	if _, slots := c.coord.Workers(); slots != 2 {
		t.Fatalf("%d slots, want 2", slots)
	}
}

// A restarted coordinator knows no session: its workers fence themselves
// (they cannot reach it, or it answers that their session ended) and
// register with the new one.
func TestWorkersRegisterWithARestartedCoordinator(t *testing.T) {
	c := newCluster(t, Liveness{HeartbeatInterval: 100 * time.Millisecond, Timeout: time.Second}, "worker-1")
	addr := c.coord.Addr()
	stop, _ := c.worker("worker-1", "worker-1", addr, jobGraph)
	defer stop()
	c.waitFor("registered worker-1", 1)

	c.coord.Close()
	c.waitFor("fenced worker-1", 1)
	tc, err := transport.LoadTLS(c.certs, "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	again, err := StartCoordinator(CoordinatorConfig{Graph: jobGraph, Listen: addr, TLS: tc, Liveness: Liveness{HeartbeatInterval: 100 * time.Millisecond, Timeout: time.Second}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if ws, err := again.WaitForSlots(ctx, 2, time.Second); err != nil || len(ws) != 1 || ws[0].Name != "worker-1" {
		t.Fatalf("the new coordinator's workers: %v, %v", ws, err)
	}
	c.waitFor("registered worker-1", 2)
}

// TestMembersKeepACutPairApart: two workers whose data connection failed
// while both answer heartbeats (a data path cut between them) are not both
// placeable for cutTimeouts heartbeat timeouts, or until one registers anew.
func TestMembersKeepACutPairApart(t *testing.T) {
	t0 := time.Unix(1000, 0)
	m := NewMembers(jobGraph, time.Second, 0)
	for _, n := range []string{"a", "b", "c"} {
		if _, _, err := m.Register(Worker{Name: n, Slots: 2}, jobGraph, t0); err != nil {
			t.Fatal(err)
		}
	}
	names := func(ws []Worker) string {
		var s []string
		for _, w := range ws {
			s = append(s, w.Name)
		}
		return strings.Join(s, " ")
	}
	m.Cut("b", "a", t0)
	m.Cut("a", "a", t0) // not a pair
	if ws, slots := m.Placeable(t0.Add(cutTimeouts*time.Second - 1)); names(ws) != "a c" || slots != 4 {
		t.Fatalf("placeable %s (%d slots), want a c (4)", names(ws), slots)
	}
	if ws, _ := m.Workers(); names(ws) != "a b c" {
		t.Fatalf("live workers %s: a cut pair is alive", names(ws))
	}
	if ws, slots := m.Placeable(t0.Add(cutTimeouts * time.Second)); names(ws) != "a b c" || slots != 6 {
		t.Fatalf("after the cut's time: placeable %s (%d slots)", names(ws), slots)
	}
	m.Cut("a", "b", t0)
	m.Cut("b", "c", t0)
	if ws, _ := m.Placeable(t0); names(ws) != "a c" {
		t.Fatalf("with a-b and b-c cut: placeable %s, want a c (b goes, and both its cuts with it)", names(ws))
	}
	if w, ok := m.End("b", 2); !ok || w.Name != "b" {
		t.Fatal("end b")
	}
	if _, _, err := m.Register(Worker{Name: "b", Slots: 2}, jobGraph, t0); err != nil {
		t.Fatal(err)
	}
	if ws, _ := m.Placeable(t0); names(ws) != "a b c" {
		t.Fatalf("after b registered anew: placeable %s", names(ws))
	}
}
