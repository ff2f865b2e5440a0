package cluster

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/cluster/clusterpb/clusterpbconnect"
	"github.com/weirstream/weir/internal/transport"
)

// lateCoordinator answers Register only after delay (as when the Register
// was held in a partitioned connection), without saying it held it, and
// answers every heartbeat.
type lateCoordinator struct {
	clusterpbconnect.UnimplementedCoordinatorServiceHandler
	delay      time.Duration
	live       Liveness
	heartbeats atomic.Int32
}

func (c *lateCoordinator) Register(ctx context.Context, _ *connect.Request[clusterpb.RegisterRequest]) (*connect.Response[clusterpb.RegisterResponse], error) {
	select {
	case <-time.After(c.delay): // NB: the fault: an answer that comes late
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return connect.NewResponse(&clusterpb.RegisterResponse{Session: 7, HeartbeatIntervalMs: c.live.HeartbeatInterval.Milliseconds(), TimeoutMs: c.live.Timeout.Milliseconds()}), nil
}

func (c *lateCoordinator) Heartbeat(context.Context, *connect.Request[clusterpb.HeartbeatRequest]) (*connect.Response[clusterpb.HeartbeatResponse], error) {
	c.heartbeats.Add(1)
	return connect.NewResponse(&clusterpb.HeartbeatResponse{}), nil
}

// TestLateRegisterAnswerKeepsTheSession: a Register whose answer arrives
// after the fence time it allows (sent during a partition, answered after
// the heal) does not make the worker register and fence itself in the
// same moment: a heartbeat answered at once confirms the session, and the
// worker keeps it (issue 20: it registered and fenced in one millisecond).
func TestLateRegisterAnswerKeepsTheSession(t *testing.T) {
	live := Liveness{HeartbeatInterval: 100 * time.Millisecond, Timeout: time.Second}
	coord := &lateCoordinator{delay: live.Timeout, live: live}
	addr, wtc := serveCoordinator(t, coord)
	var mu sync.Mutex
	var events []string
	registered := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunWorker(ctx, WorkerConfig{
			Coordinator: addr, Name: "worker-1", Slots: 1, DataAddress: "127.0.0.1:1", Graph: jobGraph, TLS: wtc, Logger: quiet(),
			Registered: func(Worker, Liveness, string) {
				mu.Lock()
				events = append(events, "registered")
				mu.Unlock()
				registered <- struct{}{}
			},
			Fence: func(err error) {
				mu.Lock()
				events = append(events, "fenced: "+err.Error())
				mu.Unlock()
			},
		})
	}()
	defer func() { cancel(); <-done }()
	<-registered
	// Heartbeats go on answered for longer than the fence time: no
	// fence in between (before: the worker fenced at once).
	deadline := time.Now().Add(10 * time.Second)
	for n := coord.heartbeats.Load(); coord.heartbeats.Load() < n+10; {
		if time.Now().After(deadline) {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("fewer than 10 heartbeats in 10 s after the registration; events %q", events)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != 1 {
		t.Fatalf("events %q: want one registration, no fence", events)
	}
}

// serveCoordinator serves coord as a coordinator over mutual TLS on
// loopback until the test ends, and returns its address and worker-1's TLS
// configuration.
func serveCoordinator(t *testing.T, coord clusterpbconnect.CoordinatorServiceHandler) (string, *tls.Config) {
	t.Helper()
	dir := t.TempDir()
	if err := transport.WriteCerts(dir, []string{"coordinator", "worker-1"}, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	stc, err := transport.LoadTLS(dir, "coordinator")
	if err != nil {
		t.Fatal(err)
	}
	stc.NextProtos = []string{"h2"}
	path, h := clusterpbconnect.NewCoordinatorServiceHandler(coord)
	mux := http.NewServeMux()
	mux.Handle(path, h)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, TLSConfig: stc}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	wtc, err := transport.LoadTLS(dir, "worker-1")
	if err != nil {
		t.Fatal(err)
	}
	return ln.Addr().String(), wtc
}
