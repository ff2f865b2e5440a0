package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/cluster/clusterpb/clusterpbconnect"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/state/local"
)

// WorkerConfig configures a worker's side of the control plane.
type WorkerConfig struct {
	// Coordinator is the coordinator's host:port, or the addresses of a
	// job's coordinators (high availability) separated by commas: the
	// worker registers with the one that answers, the leader (standbys
	// do not listen).
	Coordinator string
	// Name is the worker's name; its certificate must name it.
	Name        string
	Slots       int
	DataAddress string
	Graph       Graph
	// TLS is the mutual TLS configuration (transport.LoadTLS); required.
	TLS    *tls.Config
	Logger *slog.Logger
	// Registered is called with each new registration, the
	// coordinator's liveness settings and its address: the worker may
	// take tasks.
	Registered func(w Worker, l Liveness, coordinator string)
	// Fence stops the worker's tasks, when the worker has lost the
	// coordinator (before the coordinator declares it lost) or its session
	// ended. It returns when they are stopped.
	Fence func(reason error)
	// RetryInterval is the pause between attempts to reach the
	// coordinator (default 200ms).
	RetryInterval time.Duration
	// Stats, if set, are the counters of the subtasks the worker runs;
	// each heartbeat carries them.
	Stats *runtime.Stats
	// Operators, if set, reads the counters of the operators the worker's
	// process ran; each heartbeat carries them, with Incarnation, which
	// numbers the process (OperatorCounts).
	Operators   func() []OperatorCount
	Incarnation uint64
	// Local, if set, is the process's local copies (local recovery):
	// registrations and heartbeats say which it holds, and heartbeats
	// carry the bytes its restores read from them and from checkpoint
	// storage (with Operators' counters, under Incarnation).
	Local *local.Store
}

// jobEnded says that the coordinator answered: the job ended, as how says
// ("finished", or "stopped with savepoint N").
type jobEnded struct{ how string }

func (e *jobEnded) Error() string { return "the job " + e.how }

// endedBy is the end of the job a coordinator's answer tells of, if any.
func endedBy(h http.Header) *jobEnded {
	switch how := h.Get(jobFinishedHeader); how {
	case "":
		return nil
	case "true": // a coordinator that did not say how
		return &jobEnded{how: "finished"}
	default:
		return &jobEnded{how: clip(how)}
	}
}

// RunWorker registers with the coordinator and keeps the registration
// alive until ctx ends or the coordinator says the job finished, fencing
// and registering again whenever it lapses (a coordinator that is gone
// without saying so may be started again, with --restore latest). It
// returns nil when ctx ends or the job finished, or an error when the
// coordinator refuses the worker.
func RunWorker(ctx context.Context, cfg WorkerConfig) error {
	switch {
	case cfg.TLS == nil:
		return errors.New("cluster: the worker needs TLS credentials (weir cluster certs creates a test cluster's)")
	case cfg.Registered == nil || cfg.Fence == nil:
		return errors.New("cluster: a worker needs Registered and Fence")
	case len(cfg.Name) > maxNameBytes:
		return errNameTooLong(cfg.Name)
	case cfg.Slots < 1:
		return fmt.Errorf("cluster: worker %q offers %d slots; it needs at least 1", cfg.Name, cfg.Slots)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RetryInterval == 0 {
		cfg.RetryInterval = defaultRetryInterval
	}
	tr := &http.Transport{
		TLSClientConfig: toCoordinator(cfg.TLS), ForceAttemptHTTP2: true,
		// A coordinator that is paused (SIGSTOP) accepts connections in
		// its kernel but never answers, and one cut off answers nothing:
		// with several coordinators, the worker moves on to the next
		// soon.
		DialContext:         (&net.Dialer{Timeout: connectTimeout}).DialContext,
		TLSHandshakeTimeout: connectTimeout,
		// A connection that went silent (a middlebox lost its state, the
		// coordinator's host went without a FIN) is found dead by its
		// unanswered pings, and the calls on it fail.
		HTTP2: &http.HTTP2Config{SendPingTimeout: pingAfter, PingTimeout: pingTimeout},
	}
	defer tr.CloseIdleConnections()
	co := coordinators{addrs: strings.Split(cfg.Coordinator, ",")}
	for _, a := range co.addrs {
		co.clients = append(co.clients, clusterpbconnect.NewCoordinatorServiceClient(&http.Client{Transport: tr}, "https://"+a, rpcOptions))
	}
	wait := firstRegisterTimeout
	for {
		w, live, err := register(ctx, &co, cfg, wait, tr.CloseIdleConnections)
		if end, ok := errors.AsType[*jobEnded](err); ok {
			cfg.Logger.Info(end.Error()+"; this worker exits", "worker", cfg.Name, "coordinator", cfg.Coordinator)
			return nil
		}
		if err != nil || ctx.Err() != nil {
			return err
		}
		wait = registerTimeout(live.Liveness)
		if !time.Now().Before(live.fenceAt()) {
			// The answer came after the fence time it allows: the Register
			// was sent long before (during a partition, held in a
			// connection). The session is live from when the coordinator
			// registered it, which the worker cannot tell; a heartbeat
			// answered now says it is.
			err := confirm(ctx, co.client(), w, live)
			if end, ok := errors.AsType[*jobEnded](err); ok {
				// NB: the coordinator counts this worker told, and may be
				// gone by its next call.
				cfg.Logger.Info(end.Error()+"; this worker exits", "worker", cfg.Name, "coordinator", cfg.Coordinator)
				return nil
			}
			if err != nil {
				cfg.Logger.Warn("registered too late to keep the session; registering again", "worker", w.Name, "session", w.Session, "err", err)
				continue
			}
		}
		cfg.Registered(w, live.Liveness, co.addr())
		reason := heartbeats(ctx, co.client(), cfg, w, live)
		if ctx.Err() != nil {
			cfg.Fence(context.Cause(ctx))
			return nil
		}
		if end, ok := errors.AsType[*jobEnded](reason); ok {
			// The coordinator cancelled the last attempt's tasks already;
			// fencing makes sure none is left.
			cfg.Fence(reason)
			cfg.Logger.Info(end.Error()+"; this worker exits", "worker", cfg.Name, "coordinator", cfg.Coordinator, "session", w.Session)
			return nil
		}
		cfg.Logger.Warn("fencing: stopping this worker's tasks", "worker", cfg.Name, "session", w.Session, "reason", reason)
		cfg.Fence(reason)
		// The connection that carried the lapsed session may be silent
		// for good: register on a new one, at the next coordinator first
		// (with --ha, the one that went silent is likely dead or paused,
		// and a Register to a paused one waits out its timeout).
		tr.CloseIdleConnections()
		co.next()
	}
}

const (
	// pingAfter and pingTimeout: a worker's connection to the coordinator
	// on which nothing arrived for pingAfter is pinged, and closed if the
	// ping is not answered within pingTimeout.
	pingAfter   = 5 * time.Second
	pingTimeout = 5 * time.Second
	// firstRegisterTimeout bounds a worker's first Register, before it
	// knows the coordinator's heartbeat timeout. A claim that waits longer
	// is sent again, and waits only for the rest: the held session's
	// timeout runs from its last heartbeat.
	firstRegisterTimeout = time.Minute
	// connectTimeout bounds connecting to a coordinator, its TLS
	// handshake included.
	connectTimeout = 2 * time.Second
	// defaultRetryInterval is the pause after each round of coordinators
	// that could not be reached: a refused connection costs little, and
	// with standby coordinators the new leader is found this soon after
	// it listens (it was 1 s: 0.6-0.85 s of a failover's 5.7 s, kill -9
	// to the new leader's first checkpoint, went on waiting for workers).
	defaultRetryInterval = 200 * time.Millisecond
	// retryWarnEvery bounds the warnings of a worker that cannot reach a
	// coordinator: the first failure, then one this often.
	retryWarnEvery = 10 * time.Second
)

// registerTimeout bounds a Register to a coordinator with liveness l: the
// coordinator may hold it up to l.Timeout (a claim of a name whose
// session is not yet proven dead), and a little more to answer.
func registerTimeout(l Liveness) time.Duration { return 2 * l.Timeout }

// coordinators are the addresses a worker may register at, and the one it
// tries (or registered at).
type coordinators struct {
	addrs   []string
	clients []clusterpbconnect.CoordinatorServiceClient
	cur     int
}

func (c *coordinators) addr() string { return c.addrs[c.cur] }

func (c *coordinators) client() clusterpbconnect.CoordinatorServiceClient { return c.clients[c.cur] }

// next moves on to the next address (the one tried did not answer).
func (c *coordinators) next() { c.cur = (c.cur + 1) % len(c.addrs) }

// register registers, retrying while no coordinator can be reached, trying
// each address in turn; each Register may take timeout. Before it sends
// Register again, it calls closeIdle, so that the retry does not go on a
// silent connection.
func register(ctx context.Context, co *coordinators, cfg WorkerConfig, timeout time.Duration, closeIdle func()) (Worker, *liveness, error) {
	req := &clusterpb.RegisterRequest{Worker: cfg.Name, Slots: int32(cfg.Slots), DataAddress: cfg.DataAddress, Graph: graphToProto(cfg.Graph)}
	if cfg.Local != nil {
		req.LocalCopies = copiesToProto(cfg.Local.Copies())
	}
	var warned time.Time
	for failures := 1; ; failures++ {
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := co.client().Register(rctx, connect.NewRequest(req))
		cancel()
		if err == nil {
			if end := endedBy(resp.Header()); end != nil {
				return Worker{}, nil, end
			}
			m := resp.Msg
			l := Liveness{HeartbeatInterval: time.Duration(m.GetHeartbeatIntervalMs()) * time.Millisecond, Timeout: time.Duration(m.GetTimeoutMs()) * time.Millisecond}
			if err := l.Validate(); err != nil || l.HeartbeatInterval <= 0 {
				return Worker{}, nil, fmt.Errorf("cluster: the coordinator sent heartbeat settings %v/%v: %v", l.HeartbeatInterval, l.Timeout, err)
			}
			w := Worker{Name: cfg.Name, Slots: cfg.Slots, DataAddress: cfg.DataAddress, Session: m.GetSession()}
			cfg.Logger.Info("registered", "worker", w.Name, "coordinator", co.addr(), "session", w.Session)
			// The coordinator registered this worker no earlier than it
			// held the Register after it was sent (see heldForHeader).
			held := min(heldFor(resp.Header()), time.Since(sent))
			return w, &liveness{Liveness: l, lastSent: sent.Add(held)}, nil
		}
		switch connect.CodeOf(err) {
		case connect.CodeFailedPrecondition, connect.CodePermissionDenied, connect.CodeUnauthenticated, connect.CodeAlreadyExists, connect.CodeInvalidArgument:
			return Worker{}, nil, fmt.Errorf("cluster: the coordinator at %s refused worker %q: %w", co.addr(), cfg.Name, err)
		}
		if ctx.Err() != nil {
			return Worker{}, nil, nil
		}
		if time.Since(warned) >= retryWarnEvery {
			warned = time.Now()
			cfg.Logger.Warn("cannot reach the coordinator; retrying", "coordinator", co.addr(), "err", err, "retry", cfg.RetryInterval, "failures", failures)
		}
		if co.next(); co.cur != 0 {
			continue // NB: the next coordinator at once; a pause after each round
		}
		select {
		case <-time.After(cfg.RetryInterval):
		case <-ctx.Done():
			return Worker{}, nil, nil
		}
		closeIdle()
	}
}

// liveness is a worker's view of its session: when it sent the last
// heartbeat that was answered.
type liveness struct {
	Liveness
	lastSent time.Time
}

func (l *liveness) fenceAt() time.Time { return l.lastSent.Add(l.fenceAfter()) }

// confirm sends a heartbeat of session w now, and counts the session's
// liveness from it if it is answered within the fence time. It returns a
// *jobEnded if the answer says the job ended.
func confirm(ctx context.Context, client clusterpbconnect.CoordinatorServiceClient, w Worker, l *liveness) error {
	sent := time.Now()
	hctx, cancel := context.WithTimeout(ctx, l.fenceAfter())
	defer cancel()
	resp, err := client.Heartbeat(hctx, connect.NewRequest(&clusterpb.HeartbeatRequest{Worker: w.Name, Session: w.Session}))
	if err != nil {
		return err
	}
	if end := endedBy(resp.Header()); end != nil {
		return end
	}
	l.lastSent = sent
	return nil
}

// self reads this process's memory, GC and CPU for heartbeats.
var self = newProcessReader()

// heartbeats sends heartbeats until the session lapses, and says why; or
// until ctx ends.
func heartbeats(ctx context.Context, client clusterpbconnect.CoordinatorServiceClient, cfg WorkerConfig, w Worker, l *liveness) error {
	req := &clusterpb.HeartbeatRequest{Worker: w.Name, Session: w.Session}
	var last error
	for {
		wait := min(l.HeartbeatInterval, time.Until(l.fenceAt()))
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
		if !time.Now().Before(l.fenceAt()) {
			return fmt.Errorf("no heartbeat answered for %v (last error: %v)", l.fenceAfter(), last)
		}
		hctx, cancel := context.WithDeadline(ctx, l.fenceAt())
		sent := time.Now()
		if cfg.Stats != nil {
			req.Stats = statsToProto(cfg.Stats.Read(sent))
		}
		if cfg.Operators != nil {
			req.Operators, req.Incarnation = operatorsToProto(cfg.Operators()), cfg.Incarnation
		}
		if cfg.Local != nil {
			r := cfg.Local.Restored()
			req.LocalCopies, req.RestoredLocalBytes, req.RestoredRemoteBytes = copiesToProto(cfg.Local.Copies()), r.LocalBytes, r.RemoteBytes
		}
		req.Process = self.read(sent)
		resp, err := client.Heartbeat(hctx, connect.NewRequest(req))
		cancel()
		switch {
		case err == nil:
			if end := endedBy(resp.Header()); end != nil {
				return end
			}
			l.lastSent = sent
		case connect.CodeOf(err) == connect.CodeNotFound:
			return err
		default:
			last = err
		}
	}
}

func copiesToProto(cs []local.Copy) []*clusterpb.LocalCopy {
	out := make([]*clusterpb.LocalCopy, len(cs))
	for i, c := range cs {
		out[i] = &clusterpb.LocalCopy{Job: c.Job, Task: taskToProto(checkpoint.TaskID{Vertex: c.Vertex, Subtask: c.Subtask}), Checkpoint: uint64(c.Checkpoint)}
	}
	return out
}
