package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/cluster/clusterpb/clusterpbconnect"
	"github.com/weirstream/weir/internal/runtime"
)

// Liveness configures heartbeats. The zero value means the defaults.
type Liveness struct {
	// HeartbeatInterval is how often a worker sends a heartbeat (default
	// 1s).
	HeartbeatInterval time.Duration
	// Timeout is how long the coordinator waits for a worker's heartbeat
	// before it declares the worker lost (default 5s, at least twice the
	// interval). A worker fences itself (stops its tasks) after 3/4 of it
	// without an answered heartbeat, counted from when it sent the last
	// one answered, so always before the coordinator declares it lost.
	Timeout time.Duration
}

func (l Liveness) withDefaults() Liveness {
	if l.HeartbeatInterval == 0 {
		l.HeartbeatInterval = time.Second
	}
	if l.Timeout == 0 {
		l.Timeout = 5 * time.Second
	}
	return l
}

// Validate says what is wrong with the settings, if anything.
func (l Liveness) Validate() error {
	l = l.withDefaults()
	if l.HeartbeatInterval < 0 || l.Timeout < 0 {
		return errors.New("heartbeat interval and timeout must be positive")
	}
	if l.Timeout < 2*l.HeartbeatInterval {
		return fmt.Errorf("heartbeat timeout %v is under twice the interval %v: one late heartbeat would lose a worker", l.Timeout, l.HeartbeatInterval)
	}
	return nil
}

// fenceAfter is how long after sending its last answered heartbeat a
// worker fences itself. The coordinator received that heartbeat after it
// was sent, so it declares the worker lost no earlier than Timeout after
// the send: a quarter of Timeout later than the worker fences.
func (l Liveness) fenceAfter() time.Duration { return l.Timeout * 3 / 4 }

// CoordinatorConfig configures a coordinator's control plane.
type CoordinatorConfig struct {
	Graph Graph
	// Listen is the address to accept workers on (default 127.0.0.1:0:
	// loopback, any port).
	Listen string
	// TLS is the mutual TLS configuration (transport.LoadTLS); required.
	TLS      *tls.Config
	Liveness Liveness
	Logger   *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Stats, if set, gets the subtasks' counters the workers' heartbeats
	// carry.
	Stats *runtime.Stats
}

// Coordinator accepts workers, tracks their liveness and slots, and
// reports the lost ones.
type Coordinator struct {
	cfg  CoordinatorConfig
	ln   net.Listener
	srv  *http.Server
	lost chan Worker

	mu      sync.Mutex
	members *Members
	changed chan struct{} // closed and replaced when membership changes
	exec    *execution    // the attempt running, if any
	ended   uint64        // the attempt that finished the job, if any
	status  jobStatus

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// StartCoordinator listens and serves the control plane until Close.
func StartCoordinator(cfg CoordinatorConfig) (*Coordinator, error) {
	if cfg.TLS == nil {
		return nil, errors.New("cluster: the coordinator needs TLS credentials (weir cluster certs creates a test cluster's)")
	}
	if err := cfg.Liveness.Validate(); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	cfg.Liveness = cfg.Liveness.withDefaults()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("cluster: listen on %s: %w", cfg.Listen, err)
	}
	c := &Coordinator{
		cfg: cfg, ln: ln, lost: make(chan Worker, 64),
		members: NewMembers(cfg.Graph, cfg.Liveness.Timeout), changed: make(chan struct{}),
		stop: make(chan struct{}),
	}
	path, h := clusterpbconnect.NewCoordinatorServiceHandler(c)
	mux := http.NewServeMux()
	mux.Handle(path, withPeer(h))
	tc := cfg.TLS.Clone()
	tc.NextProtos = []string{"h2"}
	c.srv = &http.Server{Handler: mux, TLSConfig: tc, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug)}
	c.wg.Go(func() { c.srv.ServeTLS(ln, "", "") })
	c.wg.Go(c.expire)
	return c, nil
}

// Addr is the address workers join at.
func (c *Coordinator) Addr() string { return c.ln.Addr().String() }

// Lost delivers the workers declared lost (no heartbeat within the
// timeout, or registered again after a restart). The job restarts from its
// latest checkpoint on the slots left. Undelivered reports beyond 64 block
// the expiry: read them.
func (c *Coordinator) Lost() <-chan Worker { return c.lost }

// Workers returns the live workers and their slots in all.
func (c *Coordinator) Workers() ([]Worker, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members.Workers()
}

// WaitForSlots waits until workers offer at least n slots, logging what it
// waits for every logEvery (default 10s), and returns them.
func (c *Coordinator) WaitForSlots(ctx context.Context, n int, logEvery time.Duration) ([]Worker, error) {
	if logEvery <= 0 {
		logEvery = 10 * time.Second
	}
	tick := time.NewTicker(logEvery)
	defer tick.Stop()
	for {
		c.mu.Lock()
		ws, slots := c.members.Workers()
		changed := c.changed
		c.mu.Unlock()
		if slots >= n {
			return ws, nil
		}
		select {
		case <-changed:
		case <-tick.C:
			c.cfg.Logger.Warn("waiting for slots", "need", n, "have", slots, "workers", len(ws), "join", c.Addr())
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster: waiting for %d slots, %d registered: %w", n, slots, context.Cause(ctx))
		}
	}
}

// Close stops serving and waits for the coordinator's goroutines. Closing
// again does nothing.
func (c *Coordinator) Close() error {
	var err error
	c.stopOnce.Do(func() {
		close(c.stop)
		err = c.srv.Close()
		c.wg.Wait()
	})
	return err
}

func (c *Coordinator) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *Coordinator) expire() {
	tick := time.NewTicker(c.cfg.Liveness.HeartbeatInterval / 2)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
		case <-c.stop:
			return
		}
		c.mu.Lock()
		lost := c.members.Expire(c.cfg.Now())
		if len(lost) > 0 {
			c.notify()
		}
		c.mu.Unlock()
		for _, w := range lost {
			c.cfg.Logger.Warn("worker lost: no heartbeat within the timeout", "worker", w.Name, "session", w.Session, "timeout", c.cfg.Liveness.Timeout)
			c.reportLost(w)
		}
	}
}

func (c *Coordinator) reportLost(w Worker) {
	select {
	case c.lost <- w:
	case <-c.stop:
	}
}

// suspect takes worker w's slots away until it answers a heartbeat again
// (see Members.Suspect).
func (c *Coordinator) suspect(w Worker, why error) {
	c.mu.Lock()
	ok := c.members.Suspect(w.Name, w.Session)
	c.mu.Unlock()
	if ok {
		c.cfg.Logger.Warn("worker suspect: it gets no tasks until it answers a heartbeat", "worker", w.Name, "session", w.Session, "why", why)
	}
}

// Register implements the control plane's Register.
func (c *Coordinator) Register(ctx context.Context, req *connect.Request[clusterpb.RegisterRequest]) (*connect.Response[clusterpb.RegisterResponse], error) {
	m := req.Msg
	if err := checkPeer(ctx, m.GetWorker()); err != nil {
		return nil, err
	}
	c.mu.Lock()
	w, replaced, err := c.members.Register(Worker{Name: m.GetWorker(), Slots: int(m.GetSlots()), DataAddress: m.GetDataAddress()}, graphFromProto(m.GetGraph()), c.cfg.Now())
	if err == nil {
		c.notify()
	}
	c.mu.Unlock()
	if err != nil {
		c.cfg.Logger.Error("worker refused", "worker", m.GetWorker(), "err", err)
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	}
	if replaced != nil {
		c.cfg.Logger.Warn("worker lost: it registered again (restarted)", "worker", w.Name, "session", replaced.Session)
		c.reportLost(*replaced)
	}
	c.cfg.Logger.Info("worker registered", "worker", w.Name, "slots", w.Slots, "data", w.DataAddress, "session", w.Session)
	return connect.NewResponse(&clusterpb.RegisterResponse{
		Session:             w.Session,
		HeartbeatIntervalMs: c.cfg.Liveness.HeartbeatInterval.Milliseconds(),
		TimeoutMs:           c.cfg.Liveness.Timeout.Milliseconds(),
	}), nil
}

// Heartbeat implements the control plane's Heartbeat.
func (c *Coordinator) Heartbeat(ctx context.Context, req *connect.Request[clusterpb.HeartbeatRequest]) (*connect.Response[clusterpb.HeartbeatResponse], error) {
	if err := checkPeer(ctx, req.Msg.GetWorker()); err != nil {
		return nil, err
	}
	c.mu.Lock()
	suspect := c.members.Suspected(req.Msg.GetWorker())
	err := c.members.Heartbeat(req.Msg.GetWorker(), req.Msg.GetSession(), c.cfg.Now())
	if suspect && err == nil {
		c.notify() // its slots count again
	}
	c.mu.Unlock()
	if err != nil {
		return nil, connect.NewError(connect.CodeNotFound, err)
	}
	if c.cfg.Stats != nil {
		c.cfg.Stats.Report(statsFromProto(req.Msg.GetStats()))
	}
	return connect.NewResponse(&clusterpb.HeartbeatResponse{}), nil
}

type peerKey struct{}

// withPeer puts the name the client's certificate holds into the request's
// context: a worker may speak only for itself.
func withPeer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "a client certificate is required", http.StatusUnauthorized)
			return
		}
		name := r.TLS.PeerCertificates[0].Subject.CommonName
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), peerKey{}, name)))
	})
}

func checkPeer(ctx context.Context, claimed string) error {
	if name, _ := ctx.Value(peerKey{}).(string); name != claimed {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("cluster: the certificate names %q, not worker %q", name, claimed))
	}
	return nil
}

// Report implements the control plane's Report.
func (c *Coordinator) Report(ctx context.Context, req *connect.Request[clusterpb.ReportRequest]) (*connect.Response[clusterpb.ReportResponse], error) {
	m := req.Msg
	if err := checkPeer(ctx, m.GetWorker()); err != nil {
		return nil, err
	}
	c.mu.Lock()
	ex, ended := c.exec, c.ended
	live, _ := c.members.Workers()
	c.mu.Unlock()
	// A peer whose data connection failed is suspect even when the report
	// comes too late for its attempt: the next one must not be placed on it.
	// (After the job's last attempt, workers close their connections.)
	for _, p := range m.GetReports() {
		if m.GetAttempt() == ended {
			break
		}
		for _, w := range live {
			if w.Name == p.GetPeerFailed() {
				c.suspect(w, errors.New(p.GetError()))
			}
		}
	}
	if ex == nil || ex.attempt != m.GetAttempt() || ex.workers[m.GetWorker()].Session != m.GetSession() {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("attempt %d of session %d is not the job's current attempt", m.GetAttempt(), m.GetSession()))
	}
	rs := make([]runtime.Report, 0, len(m.GetReports()))
	for _, p := range m.GetReports() {
		r, err := reportFromProto(p)
		if err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("worker %s: %w", m.GetWorker(), err))
		}
		rs = append(rs, r)
	}
	if err := ex.accept(ctx, m.GetWorker(), rs); err != nil {
		return nil, err
	}
	return connect.NewResponse(&clusterpb.ReportResponse{}), nil
}
