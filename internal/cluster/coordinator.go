package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/cluster/clusterpb/clusterpbconnect"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/internal/transport"
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
	// one answered (or from when the coordinator took its registration:
	// see heldForHeader), so always before the coordinator declares it
	// lost.
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
	// Operators, if set, gets the operators' counters the workers'
	// heartbeats carry.
	Operators *OperatorCounts
	// Epoch is the coordinator's term of the job's leadership (0 without
	// high availability): its workers' sessions are numbered above every
	// earlier term's (NewMembers).
	Epoch uint64
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
	// via is the connection each worker's session last used: when it
	// closes, the process is gone (see Register).
	via     map[string]*peerConn
	changed chan struct{} // closed and replaced when membership changes
	exec    *execution    // the attempt running, if any
	stopped *execution    // the attempt that stopped last, if any
	ended   uint64        // the attempt that finished the job, if any
	// deployed is the last attempt deployed (or being deployed) so far.
	deployed uint64
	// ending: the job ended (Observe saw runtime.EventFinished), as it
	// says ("finished", or "stopped with savepoint N"), if set; told are
	// the sessions that heard it (see Close). NB: sessions, not names: a
	// process replaced under its name, whose heartbeat is still answered
	// that the job ended, has not told its successor.
	ending string
	told   map[uint64]bool
	status jobStatus
	// awaiting is what WaitForSlots waits for, while it waits: the slots
	// the job needs and the slots the workers offer (need 0: it does not).
	awaiting struct{ need, have int }
	// gone are the workers declared lost, oldest first, at most maxGone:
	// WorkerStatus lists those whose name no session holds now.
	gone []goneWorker

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
	cfg.Listen = transport.LoopbackUnlessNamed(cfg.Listen)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("cluster: listen on %s: %w", cfg.Listen, err)
	}
	c := &Coordinator{
		cfg: cfg, ln: ln, lost: make(chan Worker, 64),
		members: NewMembers(cfg.Graph, cfg.Liveness.Timeout, cfg.Epoch), via: map[string]*peerConn{}, changed: make(chan struct{}),
		told: map[uint64]bool{}, stop: make(chan struct{}),
	}
	path, h := clusterpbconnect.NewCoordinatorServiceHandler(c, rpcOptions)
	mux := http.NewServeMux()
	mux.Handle(path, limitBody(withPeer(h)))
	tc := cfg.TLS.Clone()
	tc.NextProtos = []string{"h2"}
	c.srv = &http.Server{Handler: mux, TLSConfig: tc, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug)}
	trackConns(c.srv)
	c.wg.Go(func() { c.srv.ServeTLS(ln, "", "") })
	c.wg.Go(c.expire)
	return c, nil
}

// Addr is the address workers join at.
func (c *Coordinator) Addr() string { return c.ln.Addr().String() }

// Lost delivers the workers declared lost (no heartbeat within the
// timeout, or a new process took the name after the old one's connection
// closed). The job restarts from its latest checkpoint on the slots left.
// Undelivered reports beyond 64 block the expiry: read them.
func (c *Coordinator) Lost() <-chan Worker { return c.lost }

// Workers returns the live workers and their slots in all.
func (c *Coordinator) Workers() ([]Worker, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members.Workers()
}

// Copies returns, of each subtask, the workers that hold a local copy of
// its state as of checkpoint id.
func (c *Coordinator) Copies(id checkpoint.ID) Copies {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members.Copies(id)
}

// AwaitingSlots reports the slots the job needs and those the workers
// offer while WaitForSlots waits for them; need is 0 when it does not.
func (c *Coordinator) AwaitingSlots() (need, have int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.awaiting.need, c.awaiting.have
}

// WaitForSlots waits until workers offer at least n slots, logging what it
// waits for every logEvery (default 10s), and returns them.
func (c *Coordinator) WaitForSlots(ctx context.Context, n int, logEvery time.Duration) ([]Worker, error) {
	if logEvery <= 0 {
		logEvery = 10 * time.Second
	}
	tick := time.NewTicker(logEvery)
	defer tick.Stop()
	defer func() {
		c.mu.Lock()
		c.awaiting.need, c.awaiting.have = 0, 0
		c.mu.Unlock()
	}()
	for {
		c.mu.Lock()
		now := c.cfg.Now()
		ws, slots := c.members.Placeable(now)
		until, cut := c.members.NextCutEnd(now)
		changed := c.changed
		if slots < n {
			c.awaiting.need, c.awaiting.have = n, slots
		}
		c.mu.Unlock()
		if slots >= n {
			return ws, nil
		}
		var cutEnds <-chan time.Time // a cut's end makes a worker placeable
		if cut {
			cutEnds = time.After(until.Sub(now))
		}
		select {
		case <-cutEnds:
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
//
// When the job has finished, Close first waits until every live worker has
// heard so, from the answer to its next heartbeat (or registration): a
// worker that hears it exits, while one that only loses the coordinator
// keeps looking for it, as for a coordinator that will be started again.
// It waits 3/4 of the heartbeat timeout at most: a live worker has sent a
// heartbeat by then, or fenced itself.
func (c *Coordinator) Close() error {
	var err error
	c.stopOnce.Do(func() {
		if c.waitUntilTold(c.cfg.Liveness.fenceAfter()) {
			// NB: a worker is told when its call is answered; Close
			// would cut the answer off. Shutdown lets the answers out.
			close(c.stop)
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Liveness.fenceAfter())
			c.srv.Shutdown(ctx)
			cancel()
		} else {
			close(c.stop)
		}
		err = c.srv.Close()
		c.wg.Wait()
	})
	return err
}

// jobFinishedHeader, in the answer to a heartbeat or registration, says
// that the job ended, and how (Coordinator.ending; "true" from a
// coordinator before it said how): the worker has nothing left to do and
// exits.
// NB: a header rather than a field of the answers, so that the generated
// messages (clusterpb) stay as they are.
const jobFinishedHeader = "Weir-Job-Finished"

// jobFinished records that the job ended, as ending says: the workers are
// told so.
func (c *Coordinator) jobFinished(ending string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ending = ending
	c.notify()
}

// finished reports whether the job finished, and if so records that
// session heard it (0: a process that has none yet). c.mu must be held.
func (c *Coordinator) finished(session uint64) bool {
	if c.ending == "" {
		return false
	}
	if session != 0 && !c.told[session] {
		c.told[session] = true
		c.notify()
	}
	return true
}

// waitUntilTold waits, for at most limit, until every live worker, suspect
// or not, has heard that the job finished, if it did; it reports whether
// the job finished.
func (c *Coordinator) waitUntilTold(limit time.Duration) bool {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		c.mu.Lock()
		ended, changed := c.ending != "", c.changed
		waiting := 0
		for _, w := range c.members.All() {
			if !c.told[w.Session] && !c.via[w.Name].closed() {
				waiting++
			}
		}
		c.mu.Unlock()
		if !ended || waiting == 0 {
			return ended
		}
		select {
		case <-changed:
		case <-timer.C:
			c.cfg.Logger.Warn("the job finished, and workers did not hear it before the coordinator exits; they go on looking for a coordinator until they are stopped", "workers", waiting)
			return true
		}
	}
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
		for _, w := range lost {
			delete(c.via, w.Name)
		}
		if len(lost) > 0 {
			c.notify()
		}
		c.mu.Unlock()
		for _, w := range lost {
			c.cfg.Logger.Warn("worker lost: no heartbeat within the timeout", "worker", w.Name, "session", w.Session, "timeout", c.cfg.Liveness.Timeout)
			c.reportLost(w, "no heartbeat within the timeout")
		}
	}
}

// goneWorker is a worker declared lost, when and why.
type goneWorker struct {
	Worker
	at  time.Time
	why string
}

// maxGone bounds the lost workers the coordinator remembers.
const maxGone = 16

func (c *Coordinator) reportLost(w Worker, why string) {
	c.mu.Lock()
	if len(c.gone) == maxGone {
		c.gone = slices.Delete(c.gone, 0, 1)
	}
	c.gone = append(c.gone, goneWorker{Worker: w, at: c.cfg.Now(), why: why})
	c.mu.Unlock()
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

// cut keeps workers a and b apart for a while (see Members.Cut): a's data
// connection to b failed.
func (c *Coordinator) cut(a, b Worker) {
	c.mu.Lock()
	c.members.Cut(a.Name, b.Name, c.cfg.Now())
	c.mu.Unlock()
	c.cfg.Logger.Warn("a data connection between two workers went silent: the next attempts place tasks on one of them only, for a while",
		"worker", a.Name, "peer", b.Name, "for", cutTimeouts*c.cfg.Liveness.Timeout)
}

// Register implements the control plane's Register.
//
// A name that a live session holds is refused to a second process: two
// processes given one name would otherwise end each other's session at
// every registration. A restarted process must still get its name back,
// so the claim waits until the held session is proven dead or alive:
// dead when the connection it last used has closed (its process exited)
// or it times out; alive when it answers a heartbeat one heartbeat interval
// or more after the claim arrived. (NB: a process that lost its session
// registers again only after its heartbeats stopped, so its own earlier
// session never proves alive; the interval of grace covers a heartbeat it
// sent before, still on its way. A connection can also close under a
// live process, a network fault; then a duplicate may win the name once,
// and the live process is refused when it registers again.)
//
// A claim can wait up to the heartbeat timeout, longer than the 3/4 of it
// after which a worker fences: the answer says how long it was held (see
// heldForHeader), and the worker counts its liveness from then.
func (c *Coordinator) Register(ctx context.Context, req *connect.Request[clusterpb.RegisterRequest]) (*connect.Response[clusterpb.RegisterResponse], error) {
	m := req.Msg
	began := time.Now() // NB: not cfg.Now: the worker adds heldFor to its own clock's reading
	if err := checkWorker(ctx, m.GetWorker()); err != nil {
		return nil, err
	}
	conn := peerOf(ctx).conn
	want := Worker{Name: m.GetWorker(), Slots: int(m.GetSlots()), DataAddress: clipTo(m.GetDataAddress(), maxNameBytes)}
	g := graphFromProto(m.GetGraph())
	tick := time.NewTicker(c.cfg.Liveness.HeartbeatInterval / 2)
	defer tick.Stop()
	var claimed uint64 // the session the name was held by when the claim began
	var arrived time.Time
	for {
		c.mu.Lock()
		if c.finished(0) {
			// The job finished, before the claim or while it waited for
			// a held name: the worker must hear it, or it looks for the
			// coordinator for ever once this one exits.
			ending := c.ending
			c.mu.Unlock()
			resp := connect.NewResponse(&clusterpb.RegisterResponse{})
			resp.Header().Set(jobFinishedHeader, ending)
			return resp, nil
		}
		now := c.cfg.Now()
		w, replaced, err := c.members.Register(want, g, now)
		var held *NameHeldError
		var why string
		waits := false // this claim begins to wait for the session holding the name
		if errors.As(err, &held) {
			h := held.Held
			switch {
			case c.via[h.Name].closed():
				// Its process's connection is gone: a restarted process
				// takes the name back.
				c.members.End(h.Name, h.Session)
				replaced, why = &h, "its connection closed and a process registered under its name (restarted)"
				w, _, err = c.members.Register(want, g, now)
			case h.Session != claimed:
				claimed, arrived, waits = h.Session, now, true
			case held.Last.Sub(arrived) >= c.cfg.Liveness.HeartbeatInterval:
				err = fmt.Errorf("%w: worker name %q is held by another live process (session %d, which answered a heartbeat %v after this registration arrived): two worker processes were given one name; give each its own --name (and a certificate of that name)",
					ErrNameHeld, clip(h.Name), h.Session, held.Last.Sub(arrived).Round(time.Millisecond))
				held = nil
			}
		} else if replaced != nil {
			why = "it registered again after its timeout"
		}
		if err == nil {
			c.members.SetCopies(w.Name, w.Session, m.GetLocalCopies())
			delete(c.via, w.Name)
			if conn != nil {
				c.via[w.Name] = conn
			}
			c.notify()
		}
		changed := c.changed
		c.mu.Unlock()
		if replaced != nil {
			c.cfg.Logger.Warn("worker lost: "+why, "worker", replaced.Name, "session", replaced.Session)
			c.reportLost(*replaced, why)
		}
		if held != nil && err != nil {
			if waits {
				c.cfg.Logger.Info("worker registering waits for the session holding its name (a restarted process's, or a second process given one name) to close its connection, time out or prove alive",
					"worker", clip(want.Name), "session", held.Held.Session, "timeout", c.cfg.Liveness.Timeout)
			}
			var gone <-chan struct{}
			if pc := c.viaOf(held.Held.Name); pc != nil {
				gone = pc.gone
			}
			select {
			case <-changed:
			case <-tick.C:
			case <-gone:
			case <-ctx.Done():
				return nil, connect.NewError(connect.CodeCanceled, fmt.Errorf("cluster: worker %q: registration abandoned while its name was held by session %d", clip(want.Name), held.Held.Session))
			case <-c.stop:
				return nil, connect.NewError(connect.CodeUnavailable, errors.New("cluster: the coordinator is stopping"))
			}
			continue
		}
		if err != nil {
			c.cfg.Logger.Error("worker refused", "worker", clip(want.Name), "err", err)
			code := connect.CodeFailedPrecondition
			if errors.Is(err, ErrNameHeld) {
				code = connect.CodeAlreadyExists
			}
			return nil, connect.NewError(code, err)
		}
		c.cfg.Logger.Info("worker registered", "worker", w.Name, "slots", w.Slots, "data", w.DataAddress, "session", w.Session)
		resp := connect.NewResponse(&clusterpb.RegisterResponse{
			Session:             w.Session,
			HeartbeatIntervalMs: c.cfg.Liveness.HeartbeatInterval.Milliseconds(),
			TimeoutMs:           c.cfg.Liveness.Timeout.Milliseconds(),
		})
		setHeldFor(resp.Header(), time.Since(began))
		return resp, nil
	}
}

func (c *Coordinator) viaOf(name string) *peerConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.via[name]
}

// Heartbeat implements the control plane's Heartbeat.
func (c *Coordinator) Heartbeat(ctx context.Context, req *connect.Request[clusterpb.HeartbeatRequest]) (*connect.Response[clusterpb.HeartbeatResponse], error) {
	if err := checkWorker(ctx, req.Msg.GetWorker()); err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.finished(req.Msg.GetSession()) {
		// The worker's tasks ended: its counts are final. NB: only the
		// current session's: an earlier process's, under the same name,
		// would swap the incarnations back and count them twice.
		w, ok := c.members.workers[req.Msg.GetWorker()]
		current := ok && w.Session == req.Msg.GetSession()
		ending := c.ending
		c.mu.Unlock()
		if current {
			if c.cfg.Stats != nil {
				c.cfg.Stats.Report(statsFromProto(req.Msg.GetStats()))
			}
			c.reportOperators(req.Msg)
		}
		resp := connect.NewResponse(&clusterpb.HeartbeatResponse{})
		resp.Header().Set(jobFinishedHeader, ending)
		return resp, nil
	}
	suspect := c.members.Suspected(req.Msg.GetWorker())
	err := c.members.Heartbeat(req.Msg.GetWorker(), req.Msg.GetSession(), c.cfg.Now())
	if err == nil {
		c.members.SetProcess(req.Msg.GetWorker(), req.Msg.GetSession(), req.Msg.GetProcess())
		c.members.SetCopies(req.Msg.GetWorker(), req.Msg.GetSession(), req.Msg.GetLocalCopies())
		if pc := peerOf(ctx).conn; pc != nil {
			c.via[req.Msg.GetWorker()] = pc
		}
		if suspect {
			c.notify() // its slots count again
		}
	}
	c.mu.Unlock()
	if err != nil {
		return nil, connect.NewError(connect.CodeNotFound, err)
	}
	if c.cfg.Stats != nil {
		c.cfg.Stats.Report(statsFromProto(req.Msg.GetStats()))
	}
	c.reportOperators(req.Msg)
	return connect.NewResponse(&clusterpb.HeartbeatResponse{}), nil
}

// reportOperators takes the operators' counters, and the bytes restores
// read, that a heartbeat carries.
func (c *Coordinator) reportOperators(m *clusterpb.HeartbeatRequest) {
	restored := Restored{LocalBytes: m.GetRestoredLocalBytes(), RemoteBytes: m.GetRestoredRemoteBytes()}
	if c.cfg.Operators != nil && (len(m.GetOperators()) > 0 || restored != Restored{}) {
		c.cfg.Operators.report(m.GetWorker(), m.GetIncarnation(), operatorsFromProto(m.GetOperators()), restored)
	}
}

// Report implements the control plane's Report.
func (c *Coordinator) Report(ctx context.Context, req *connect.Request[clusterpb.ReportRequest]) (*connect.Response[clusterpb.ReportResponse], error) {
	m := req.Msg
	if err := checkWorker(ctx, m.GetWorker()); err != nil {
		return nil, err
	}
	c.mu.Lock()
	ex, stopped, ended, deployed := c.exec, c.stopped, c.ended, c.deployed
	live, _ := c.members.Workers()
	reporter, _, held := c.members.Held(m.GetWorker())
	c.mu.Unlock()
	// A peer whose data connection failed is suspect even when the report
	// comes too late for its attempt: the next one must not be placed on it.
	// (After the job's last attempt, workers close their connections.)
	// NB: only a live session's report of an attempt deployed so far
	// accuses a peer. Any holder of a worker certificate can send a
	// Report, and a suspect worker's slots count for nothing until its next
	// heartbeat: accusations sent faster than heartbeats would keep the
	// job from ever getting its slots.
	credible := held && reporter.Session == m.GetSession() && m.GetAttempt() >= 1 && m.GetAttempt() <= deployed && m.GetAttempt() != ended
	// The reported attempt may have stopped already: another of the
	// reporter's tasks failed on the same connection, in an earlier Report.
	reported := ex
	if reported == nil || reported.attempt != m.GetAttempt() {
		reported = stopped
	}
	for _, p := range m.GetReports() {
		if !credible {
			break
		}
		for _, w := range live {
			if w.Name == p.GetPeerFailed() {
				c.suspect(w, errors.New(clipTo(p.GetError(), maxErrorBytes)))
				// NB: a cut only from a connection that went silent (a
				// peer that closes it, as every attempt's end does, is
				// none), in the attempt reported, between two of its
				// workers.
				if p.GetPeerSilent() && reported != nil && reported.attempt == m.GetAttempt() &&
					reported.workers[reporter.Name].Session == reporter.Session && reported.workers[w.Name].Session == w.Session {
					c.cut(reporter, w)
				}
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

// heldForHeader, in the answer to a Register, says for how many whole
// milliseconds the coordinator held the registration before it took it
// (a claim of a held name waits for the holder's fate, up to the
// heartbeat timeout). The coordinator registered the worker at or after
// the time the worker sent Register plus that; the worker counts its
// liveness from then, so a long claim does not fence it on arrival.
// NB: part of the control-plane protocol, in a header rather than a field
// of RegisterResponse because clusterpb is generated (by protoc, not at
// hand); a worker that finds no header counts from when it sent Register.
const heldForHeader = "Weir-Held-Ms"

func setHeldFor(h http.Header, d time.Duration) {
	h.Set(heldForHeader, strconv.FormatInt(d.Milliseconds(), 10))
}

// heldFor reads heldForHeader; zero if it is missing or malformed.
func heldFor(h http.Header) time.Duration {
	ms, err := strconv.ParseInt(h.Get(heldForHeader), 10, 64)
	if err != nil || ms < 0 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}
