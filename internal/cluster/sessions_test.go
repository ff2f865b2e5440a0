package cluster

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/cluster/clusterpb/clusterpbconnect"
)

// Sessions against faults and forged reports (found by an outside review
// of issue 19, defects 13 and 17).

// labelled runs worker name like worker, recording its events as
// "registered name(label) s<session>" and "fenced name(label): reason", so
// that two processes of one name can be told apart.
func (c *testCluster) labelled(label, name, addr string) (stop func(), done <-chan error) {
	tc := c.tls(name)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	log := quiet().With("proc", label)
	c.wg.Go(func() {
		errc <- RunWorker(ctx, WorkerConfig{
			Coordinator: addr, Name: name, Slots: 2, DataAddress: "127.0.0.1:1", Graph: jobGraph, TLS: tc, Logger: log,
			RetryInterval: 50 * time.Millisecond,
			Registered: func(w Worker, _ Liveness, _ string) {
				c.record(fmt.Sprintf("registered %s(%s) s%d", name, label, w.Session))
			},
			Fence: func(err error) { c.record(fmt.Sprintf("fenced %s(%s): %v", name, label, err)) },
		})
	})
	return cancel, errc
}

// noneWithin watches the events for d and fails at once if one begins
// with prefix. NB: it observes that something does not happen during a
// bounded period; it synchronises nothing.
func (c *testCluster) noneWithin(prefix string, d time.Duration) {
	c.t.Helper()
	end := time.After(d)
	for {
		c.mu.Lock()
		changed := c.changed
		for _, e := range c.events {
			if strings.HasPrefix(e, prefix) {
				defer c.mu.Unlock()
				c.t.Fatalf("%q happened: events %q", prefix, c.events)
			}
		}
		c.mu.Unlock()
		select {
		case <-changed:
		case <-end:
			return
		}
	}
}

// A restarted worker whose old process's connection stays open (the old
// process is paused, or its host went without a FIN) waits in Register
// until the old session times out, longer than the 3/4 of the timeout
// after which a worker fences. The worker counts its liveness from when
// the coordinator registered it, not from when it sent Register: it keeps
// its session. (It used to fence at once, be declared lost, and wait as
// long in its next Register, for ever.)
func TestRestartedWorkerKeepsTheSessionItWaitedFor(t *testing.T) {
	// NB: the restarted process's Register must arrive within a quarter of
	// the timeout of the old process's last heartbeat to be held longer
	// than 3/4 of it: a long timeout leaves time to start the process.
	live := Liveness{HeartbeatInterval: 100 * time.Millisecond, Timeout: 4 * time.Second}
	c := newCluster(t, live, "worker-1")
	p := newProxy(t, c.coord.Addr())
	stopOld, _ := c.labelled("old", "worker-1", p.ln.Addr().String())
	defer stopOld()
	c.waitFor("registered worker-1(old) s1", 1)
	p.cut.Store(true) // the old process is paused: its connection stays open, silent

	stopNew, _ := c.labelled("new", "worker-1", c.coord.Addr())
	defer stopNew()
	c.waitFor("registered worker-1(new) s2", 1)
	c.noneWithin("fenced worker-1(new)", live.Timeout)
	if ws, _ := c.coord.Workers(); len(ws) != 1 || ws[0].Session != 2 {
		t.Fatalf("workers %+v: want the restarted process's session 2", ws)
	}
}

// When the paused old process resumes, it is refused its name (the
// restarted process holds it, alive) and ends; the restarted process keeps
// its session throughout: the name does not flap between them.
func TestPausedOldProcessYieldsItsNameWhenItResumes(t *testing.T) {
	c := newCluster(t, Liveness{HeartbeatInterval: 100 * time.Millisecond, Timeout: 4 * time.Second}, "worker-1") // see above
	p := newProxy(t, c.coord.Addr())
	stopOld, oldDone := c.labelled("old", "worker-1", p.ln.Addr().String())
	defer stopOld()
	c.waitFor("registered worker-1(old) s1", 1)
	p.cut.Store(true) // paused: its connection stays open, silent

	stopNew, newDone := c.labelled("new", "worker-1", c.coord.Addr())
	defer stopNew()
	c.waitFor("registered worker-1(new) s2", 1)
	c.waitFor("lost worker-1", 1)
	p.heal() // resumed
	select {
	case err := <-oldDone:
		if connect.CodeOf(err) != connect.CodeAlreadyExists {
			t.Fatalf("the resumed old process ended with %v; want its name refused", err)
		}
	case err := <-newDone:
		t.Fatalf("the restarted process ended: %v", err)
	case <-time.After(20 * time.Second):
		c.mu.Lock()
		defer c.mu.Unlock()
		t.Fatalf("the resumed old process still runs after 20s: events %q", c.events)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.events {
		if strings.HasPrefix(e, "fenced worker-1(new)") || strings.HasPrefix(e, "registered worker-1(old) s") && e != "registered worker-1(old) s1" {
			t.Fatalf("the name flapped: events %q", c.events)
		}
	}
	if ws, _ := c.coord.Workers(); len(ws) != 1 || ws[0].Session != 2 {
		t.Fatalf("workers %+v: want the restarted process's session 2; events %q", ws, c.events)
	}
}

// reportAs sends worker's Report m with the certificate of certName.
func (c *testCluster) reportAs(certName string, m *clusterpb.ReportRequest) error {
	tr := &http.Transport{TLSClientConfig: c.tls(certName), ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	cl := clusterpbconnect.NewCoordinatorServiceClient(&http.Client{Transport: tr}, "https://"+c.coord.Addr(), rpcOptions)
	_, err := cl.Report(c.t.Context(), connect.NewRequest(m))
	return err
}

// Only a live session's report of an attempt deployed so far makes the
// coordinator suspect a peer. Any worker certificate used to: the accused
// worker's slots vanished until its next heartbeat, and reports sent
// faster than heartbeats kept a job from ever getting its slots.
func TestReportSuspectsAPeerOnlyFromALiveSessionOfADeployedAttempt(t *testing.T) {
	c := newCluster(t, Liveness{HeartbeatInterval: time.Second, Timeout: 5 * time.Second}, "worker-1", "worker-2", "worker-3")
	for _, name := range []string{"worker-1", "worker-2"} {
		stop, _ := c.worker(name, name, c.coord.Addr(), jobGraph)
		defer stop()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	ws, err := c.coord.WaitForSlots(ctx, 4, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	w2 := ws[1].Session
	c.coord.mu.Lock()
	c.coord.deployed = 3 // as if attempts 1 to 3 had been deployed
	c.coord.mu.Unlock()
	accuse := []*clusterpb.TaskReport{{PeerFailed: "worker-1", Error: "planted"}}
	for _, tc := range []struct {
		what string
		cert string
		m    *clusterpb.ReportRequest
	}{
		{"a worker in no session", "worker-3", &clusterpb.ReportRequest{Worker: "worker-3", Session: 12345, Attempt: 2, Reports: accuse}},
		{"a worker in no session, no attempt", "worker-3", &clusterpb.ReportRequest{Worker: "worker-3", Reports: accuse}},
		{"a live worker, of an ended session", "worker-2", &clusterpb.ReportRequest{Worker: "worker-2", Session: w2 + 100, Attempt: 2, Reports: accuse}},
		{"a live session, of an attempt never deployed", "worker-2", &clusterpb.ReportRequest{Worker: "worker-2", Session: w2, Attempt: 777, Reports: accuse}},
		{"a live session, of attempt 0", "worker-2", &clusterpb.ReportRequest{Worker: "worker-2", Session: w2, Reports: accuse}},
	} {
		// Sent again and again, as fast as they are answered: none may
		// take a slot away even for a moment.
		for range 50 {
			err := c.reportAs(tc.cert, tc.m)
			if ws, slots := c.coord.Workers(); slots != 4 {
				t.Fatalf("after a Report by %s (answered %v): workers %+v, %d slots; want both workers, 4 slots", tc.what, err, ws, slots)
			}
		}
	}
	// A live session's report of an attempt deployed (and stopped since:
	// reports come late) makes its peer suspect until its next heartbeat.
	// (It does not keep the two apart: that takes a silent connection in
	// the attempt running; see Members.Cut.)
	err = c.reportAs("worker-2", &clusterpb.ReportRequest{Worker: "worker-2", Session: w2, Attempt: 3, Reports: accuse})
	if ws, slots := c.coord.Workers(); slots != 2 || len(ws) != 1 || ws[0].Name != "worker-2" {
		t.Fatalf("after worker-2's report of attempt 3 (answered %v) that its data connection to worker-1 failed: workers %+v, %d slots; want worker-1 suspect", err, ws, slots)
	}
	if _, err := c.coord.WaitForSlots(ctx, 4, time.Second); err != nil {
		t.Fatalf("worker-1 never answered a heartbeat again: %v", err)
	}
}

// holeProxy forwards TCP connections to target; blackhole makes every
// connection open so far silently drop what it carries, for ever (a
// middlebox that lost its state for them: a NAT or conntrack flush, a
// load balancer's failover), while new connections work.
type holeProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	holes []*atomic.Bool
	conns []net.Conn
	wg    sync.WaitGroup
}

func newHoleProxy(t *testing.T, target string) *holeProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holeProxy{ln: ln}
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
			hole := new(atomic.Bool)
			p.mu.Lock()
			p.holes = append(p.holes, hole)
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					if err != nil {
						dst.Close()
						return
					}
					if !hole.Load() {
						dst.Write(buf[:n])
					}
				}
			}
			p.wg.Go(func() { pipe(out, in) })
			p.wg.Go(func() { pipe(in, out) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *holeProxy) blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range p.holes {
		h.Store(true)
	}
}

// A worker whose connection to the coordinator went silent for good (new
// connections work) fences, and then registers again on a new connection.
// It used to send Register, which had no deadline, on the silent
// connection, and wait there for ever.
func TestWorkerRegistersAgainAfterItsConnectionWentSilent(t *testing.T) {
	c := newCluster(t, Liveness{HeartbeatInterval: 100 * time.Millisecond, Timeout: time.Second}, "worker-1")
	p := newHoleProxy(t, c.coord.Addr())
	stop, _ := c.worker("worker-1", "worker-1", p.ln.Addr().String(), jobGraph)
	defer stop()
	c.waitFor("registered worker-1", 1)
	p.blackhole()
	c.waitFor("fenced worker-1", 1)
	c.waitFor("lost worker-1", 1)
	c.waitFor("registered worker-1", 2)
}
