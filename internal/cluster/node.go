package cluster

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/cluster/clusterpb/clusterpbconnect"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/internal/transport"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/storage"
)

// CoordinatorName is the name the coordinator's certificate holds; a
// worker answers no one else.
const CoordinatorName = "coordinator"

// NodeConfig configures a worker process.
type NodeConfig struct {
	// Coordinator is the coordinator's host:port; Name the worker's, which
	// its certificate names.
	Coordinator string
	Name        string
	Slots       int
	// Listen is where the worker accepts the coordinator's calls and
	// other workers' data connections (default 127.0.0.1:0); Advertise,
	// the address others reach it at (default: the listener's).
	Listen    string
	Advertise string
	TLS       *tls.Config
	// Spec is the job as this process built it; its Storage must be the
	// coordinator's (shared), opened without its lock.
	Spec runtime.Spec
	// Codec is the wire codec of an edge's batches.
	Codec  func(graph.Edge) transport.BatchCodec
	Logger *slog.Logger
	// RetryInterval is the pause between attempts to reach the
	// coordinator (default 200ms).
	RetryInterval time.Duration
	// Operators, if set, reads the counters of the operators this process
	// runs; the heartbeats carry them (WorkerConfig.Operators).
	Operators func() []OperatorCount
	// Incarnation numbers the counters Operators reads: the same as long
	// as they count on (an Environment executing again keeps its
	// counters, and must keep its number, or the coordinator counts
	// them twice); 0: a new one for this call.
	Incarnation uint64
}

// node is a worker process: it runs the tasks the coordinator deploys on
// it, one attempt at a time.
type node struct {
	cfg  NodeConfig
	ctx  context.Context
	log  *slog.Logger
	arr  arrivals
	addr string

	mu sync.Mutex
	// session is the registration in force (0: none, fenced); attempt the
	// newest attempt deployed in it.
	session uint64
	attempt uint64
	// cancelled is the newest attempt of the session the coordinator
	// cancelled, maybe before its deploy here finished: a deploy of it, or
	// of an older one, runs nothing.
	cancelled uint64
	// idle is the coordinator's heartbeat timeout, for the data
	// connections (links.idle).
	idle time.Duration
	run  *nodeRun
	// client reaches the coordinator of the registration (reports go
	// there).
	client clusterpbconnect.CoordinatorServiceClient
	// registered is closed and replaced when a registration takes effect.
	registered chan struct{}
}

// nodeRun is an attempt's part running on a node.
type nodeRun struct {
	session uint64
	attempt uint64
	tasks   *runtime.Tasks
	links   *links
	cancel  context.CancelFunc
	done    chan struct{} // closed when the report forwarder ends
}

// RunNode runs a worker process until ctx ends (nil) or the coordinator
// refuses it.
func RunNode(ctx context.Context, cfg NodeConfig) error {
	if cfg.TLS == nil {
		return errors.New("cluster: the worker needs TLS credentials (weir cluster certs creates a test cluster's)")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Spec.Stats == nil {
		cfg.Spec.Stats = runtime.NewStats() // its heartbeats carry them
	}
	n := &node{cfg: cfg, ctx: ctx, log: cfg.Logger.With("worker", cfg.Name), registered: make(chan struct{})}
	tc := cfg.TLS.Clone()
	tc.NextProtos = []string{"h2", dataProto}
	cfg.Listen = transport.LoopbackUnlessNamed(cfg.Listen)
	ln, err := tls.Listen("tcp", cfg.Listen, tc)
	if err != nil {
		return fmt.Errorf("cluster: worker %s: listen on %s: %w", cfg.Name, cfg.Listen, err)
	}
	n.addr = ln.Addr().String()
	if cfg.Advertise != "" {
		n.addr = cfg.Advertise
	}
	path, h := clusterpbconnect.NewWorkerServiceHandler(n, rpcOptions)
	mux := http.NewServeMux()
	mux.Handle(path, limitBody(withPeer(h)))
	calls := &chanListener{addr: ln.Addr(), conns: make(chan net.Conn), done: make(chan struct{})}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: handshakeTimeout, ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug)}
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(calls) })
	wg.Go(func() { n.accept(ln, calls) })
	defer func() {
		ln.Close()
		calls.Close()
		srv.Close()
		n.stop()
		wg.Wait()
	}()
	tr := &http.Transport{TLSClientConfig: toCoordinator(cfg.TLS), ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	clients := map[string]clusterpbconnect.CoordinatorServiceClient{}
	return RunWorker(ctx, WorkerConfig{
		Coordinator: cfg.Coordinator, Name: cfg.Name, Slots: cfg.Slots, DataAddress: n.addr,
		Graph: GraphOf(cfg.Spec), TLS: cfg.TLS, Logger: cfg.Logger, RetryInterval: cfg.RetryInterval, Stats: cfg.Spec.Stats,
		Operators: cfg.Operators, Incarnation: cmp.Or(cfg.Incarnation, rand.Uint64()), Local: cfg.Spec.Local,
		Registered: func(w Worker, l Liveness, coordinator string) {
			if clients[coordinator] == nil {
				clients[coordinator] = clusterpbconnect.NewCoordinatorServiceClient(&http.Client{Transport: tr}, "https://"+coordinator, rpcOptions)
			}
			n.mu.Lock()
			n.session, n.attempt, n.cancelled, n.idle, n.client = w.Session, 0, 0, l.Timeout, clients[coordinator]
			close(n.registered)
			n.registered = make(chan struct{})
			n.mu.Unlock()
		},
		Fence: func(error) {
			n.mu.Lock()
			n.session = 0
			n.mu.Unlock()
			n.stop()
		},
	})
}

// accept sorts the listener's connections by protocol: the coordinator's
// calls go to the RPC server, data connections to their attempts.
func (n *node) accept(ln net.Listener, calls *chanListener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			tc := c.(*tls.Conn)
			ctx, cancel := context.WithTimeout(n.ctx, handshakeTimeout)
			defer cancel()
			if err := tc.HandshakeContext(ctx); err != nil {
				n.log.Warn("refused a connection", "remote", c.RemoteAddr(), "err", err)
				c.Close()
				return
			}
			cs := tc.ConnectionState()
			if cs.NegotiatedProtocol != dataProto {
				calls.offer(c)
				return
			}
			if p := peerOfCert(cs.PeerCertificates[0]); p.roleErr != nil || p.role != transport.RoleWorker {
				n.log.Warn("refused a data connection: only a worker's certificate may make one", "remote", c.RemoteAddr(), "name", clip(p.name), "role", p.role, "err", p.roleErr)
				c.Close()
				return
			}
			attempt, err := readAttempt(c)
			if err != nil {
				n.log.Warn("refused a data connection", "remote", c.RemoteAddr(), "err", err)
				c.Close()
				return
			}
			n.mu.Lock()
			current := n.attempt
			n.mu.Unlock()
			if err := n.arr.arrive(linkKey{attempt, cs.PeerCertificates[0].Subject.CommonName}, c, current); err != nil {
				n.log.Warn("refused a data connection", "remote", c.RemoteAddr(), "err", err)
			}
		}()
	}
}

// stop stops the running attempt's tasks, if any, and waits for them.
func (n *node) stop() {
	n.mu.Lock()
	r := n.run
	n.run = nil
	n.mu.Unlock()
	if r != nil {
		r.stop()
	}
}

func (r *nodeRun) stop() {
	r.tasks.Stop()
	r.links.close()
	r.cancel()
	<-r.done
}

func (n *node) callerIsCoordinator(ctx context.Context) error {
	return checkCoordinator(ctx)
}

// Deploy implements WorkerService.
func (n *node) Deploy(ctx context.Context, req *connect.Request[clusterpb.DeployRequest]) (*connect.Response[clusterpb.DeployResponse], error) {
	if err := n.callerIsCoordinator(ctx); err != nil {
		return nil, err
	}
	m := req.Msg
	if len(m.GetRunId()) > maxRunIDBytes {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("a deploy with a run id of %d bytes: at most %d", len(m.GetRunId()), maxRunIDBytes))
	}
	n.mu.Lock()
	// The coordinator may deploy before the answer to the registration
	// reaches this worker.
	for n.session < m.GetSession() {
		wait := n.registered
		n.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("a deploy for session %d, which this worker never saw", m.GetSession()))
		}
		n.mu.Lock()
	}
	if m.GetSession() != n.session {
		cur := n.session
		n.mu.Unlock()
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("a deploy for session %d: this worker's session is %d", m.GetSession(), cur))
	}
	if m.GetAttempt() <= max(n.attempt, n.cancelled) {
		cur := n.attempt
		n.mu.Unlock()
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("attempt %d is stale: this worker runs attempt %d (cancelled up to %d)", m.GetAttempt(), cur, n.cancelled))
	}
	n.attempt = m.GetAttempt()
	old, idle := n.run, n.idle
	n.run = nil
	n.mu.Unlock()
	if old != nil {
		old.stop()
	}
	n.arr.forget(m.GetAttempt())

	spec := n.cfg.Spec
	place := placementFromProto(m.GetPlacement())
	addrs := map[string]string{}
	for _, p := range m.GetPeers() {
		addrs[p.GetWorker()] = p.GetDataAddress()
	}
	part := runtime.Part{
		RunID: m.GetRunId(), Attempt: int(m.GetAttempt()), StartOver: m.GetStartOver(),
		Here: func(id checkpoint.TaskID) bool { return place[id] == n.cfg.Name },
		// A run's resources are the coordinator's: the subtasks of one
		// run share output directories across processes.
		Acquire: func(string, func() (io.Closer, error)) error { return nil },
	}
	if id := checkpoint.ID(m.GetCheckpoint()); id != 0 {
		p, err := restorePoint(spec, id)
		if err != nil {
			return nil, connect.NewError(connect.CodeFailedPrecondition, err)
		}
		part.Point = p
	}
	rctx, cancel := context.WithCancel(n.ctx)
	reports := make(chan runtime.Report, 1024)
	r := &nodeRun{session: m.GetSession(), attempt: m.GetAttempt(), cancel: cancel, done: make(chan struct{})}
	r.links = &links{self: n.cfg.Name, attempt: m.GetAttempt(), addrs: addrs, tls: n.cfg.TLS, arr: &n.arr, ctx: rctx, setup: ctx, idle: idle, conns: map[string]*transport.Conn{}}
	first := place.First(n.cfg.Name)
	r.links.failed = func(peer string, err error) {
		select {
		case reports <- runtime.Report{Kind: runtime.ReportFailed, Task: first, Err: fmt.Errorf("worker %s: %w", n.cfg.Name, peerError{peer, err})}:
		case <-rctx.Done():
		}
	}
	part.Remote = remote{links: r.links, codec: n.cfg.Codec, place: place}
	go n.forward(rctx, r, reports)
	tasks, err := runtime.StartTasks(rctx, spec, part, reports)
	if err != nil {
		r.links.close()
		cancel()
		<-r.done
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("worker %s: deploy attempt %d: %w", n.cfg.Name, m.GetAttempt(), err))
	}
	r.tasks = tasks
	n.mu.Lock()
	if n.attempt != r.attempt || n.session != r.session || n.cancelled >= r.attempt { // overtaken by a newer deploy, a fence or a cancel
		n.mu.Unlock()
		r.stop()
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("attempt %d was overtaken", r.attempt))
	}
	n.run = r
	n.mu.Unlock()
	n.log.Info("deployed", "attempt", r.attempt, "tasks", tasks.Len(), "restore", m.GetCheckpoint())
	return connect.NewResponse(&clusterpb.DeployResponse{}), nil
}

// restorePoint finds completed checkpoint id in the job's storage: the
// coordinator names an id, never a path.
func restorePoint(spec runtime.Spec, id checkpoint.ID) (*runtime.RestorePoint, error) {
	scan, err := spec.Storage.Scan()
	if err != nil {
		return nil, err
	}
	for _, m := range scan.Completed {
		if m.ID == id {
			return &runtime.RestorePoint{Metadata: m, Owned: !m.Savepoint, Read: spec.Storage.ReadState, Open: spec.Storage.OpenState, Where: spec.Storage.Describe()}, nil
		}
	}
	return nil, fmt.Errorf("checkpoint %d is not a completed checkpoint in %s: is the storage shared with the coordinator?", id, spec.Storage.Describe())
}

// forward sends the attempt's reports to the coordinator, in order, until
// ctx ends.
func (n *node) forward(ctx context.Context, run *nodeRun, reports <-chan runtime.Report) {
	defer close(run.done)
	attempt := run.attempt
	for {
		var batch []runtime.Report
		select {
		case r := <-reports:
			batch = append(batch, r)
		case <-ctx.Done():
			return
		}
	more:
		for len(batch) < 256 {
			select {
			case r := <-reports:
				batch = append(batch, r)
			default:
				break more
			}
		}
		ps := make([]*clusterpb.TaskReport, 0, len(batch))
		for _, r := range batch {
			ps = append(ps, reportToProto(r))
		}
		for _, part := range splitReports(ps, maxMessageBytes-1<<10) {
			req := &clusterpb.ReportRequest{Worker: n.cfg.Name, Session: run.session, Attempt: attempt, Reports: part}
			if !n.report(ctx, req) {
				return
			}
		}
	}
}

// report sends req until the coordinator takes it, and reports whether
// the attempt goes on.
func (n *node) report(ctx context.Context, req *clusterpb.ReportRequest) bool {
	for {
		n.mu.Lock()
		client := n.client
		n.mu.Unlock()
		_, err := client.Report(ctx, connect.NewRequest(req))
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if connect.CodeOf(err) == connect.CodeFailedPrecondition {
			n.log.Warn("the coordinator refused this attempt's reports; stopping its tasks", "attempt", req.GetAttempt(), "err", err)
			go n.cancelAttempt(req.GetAttempt())
			return false
		}
		n.log.Warn("cannot report to the coordinator; retrying", "attempt", req.GetAttempt(), "err", err)
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return false
		}
	}
}

// splitReports splits reports, in order, into messages of at most
// maxBytes. A report larger than that alone (a task's checkpoint handles)
// becomes the task's failure: the coordinator could not read it.
func splitReports(reports []*clusterpb.TaskReport, maxBytes int) [][]*clusterpb.TaskReport {
	var parts [][]*clusterpb.TaskReport
	var part []*clusterpb.TaskReport
	size := 0
	for _, p := range reports {
		n := proto.Size(p) + 8 // with its tag and length
		if n > maxBytes {
			p = &clusterpb.TaskReport{Task: p.GetTask(), Kind: int32(runtime.ReportFailed),
				Error: fmt.Sprintf("its report of checkpoint %d is %d bytes, over the control plane's limit of %d", p.GetCheckpoint(), n, maxBytes)}
			n = proto.Size(p) + 8
		}
		if size+n > maxBytes {
			parts, part, size = append(parts, part), nil, 0
		}
		part = append(part, p)
		size += n
	}
	if len(part) > 0 {
		parts = append(parts, part)
	}
	return parts
}

// cancelAttempt stops attempt's tasks if they still run, and keeps a
// deploy of it still under way from starting them.
func (n *node) cancelAttempt(attempt uint64) {
	n.mu.Lock()
	n.cancelled = max(n.cancelled, attempt)
	r := n.run
	if r == nil || r.attempt != attempt {
		n.mu.Unlock()
		return
	}
	n.run = nil
	n.mu.Unlock()
	r.stop()
}

// Control implements WorkerService.
func (n *node) Control(ctx context.Context, req *connect.Request[clusterpb.ControlRequest]) (*connect.Response[clusterpb.ControlResponse], error) {
	if err := n.callerIsCoordinator(ctx); err != nil {
		return nil, err
	}
	n.mu.Lock()
	r := n.run
	n.mu.Unlock()
	if r == nil || r.attempt != req.Msg.GetAttempt() {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("worker %s does not run attempt %d", n.cfg.Name, req.Msg.GetAttempt()))
	}
	for _, m := range req.Msg.GetMessages() {
		id, c := controlFromProto(m)
		r.tasks.Send(ctx, id, c)
	}
	return connect.NewResponse(&clusterpb.ControlResponse{}), nil
}

// Cancel implements WorkerService.
func (n *node) Cancel(ctx context.Context, req *connect.Request[clusterpb.CancelRequest]) (*connect.Response[clusterpb.CancelResponse], error) {
	if err := n.callerIsCoordinator(ctx); err != nil {
		return nil, err
	}
	n.cancelAttempt(req.Msg.GetAttempt())
	return connect.NewResponse(&clusterpb.CancelResponse{}), nil
}

// Probe implements WorkerService.
func (n *node) Probe(ctx context.Context, req *connect.Request[clusterpb.ProbeRequest]) (*connect.Response[clusterpb.ProbeResponse], error) {
	if err := n.callerIsCoordinator(ctx); err != nil {
		return nil, err
	}
	pr, ok := n.cfg.Spec.Storage.(storage.Prober)
	if !ok {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("worker %s: checkpoint storage %s cannot be shared", n.cfg.Name, n.cfg.Spec.Storage.Describe()))
	}
	if err := pr.WriteProbe(req.Msg.GetToken(), []byte(n.cfg.Name)); err != nil {
		// Only storage this worker may not write to fails the job for
		// good (storage.Prober); a full disk, an I/O error or a slow
		// object store may pass, and the attempt restarts, as after a
		// checkpoint's write that failed so. NB: not Unavailable, which
		// the coordinator takes for a worker it could not reach
		// (unreachable), and makes suspect: this one answered.
		code := connect.CodeAborted
		if errors.Is(err, fs.ErrPermission) || errors.Is(err, storage.ErrNoBucket) {
			code = connect.CodeFailedPrecondition
		}
		return nil, connect.NewError(code, fmt.Errorf("worker %s: %w", n.cfg.Name, err))
	}
	return connect.NewResponse(&clusterpb.ProbeResponse{}), nil
}

// remote opens a worker's ends of channels to tasks on other workers.
type remote struct {
	links *links
	codec func(graph.Edge) transport.BatchCodec
	place Placement
}

func (r remote) Output(ch uint64, e graph.Edge, to checkpoint.TaskID) (runtime.OutputChannel, error) {
	c, err := r.links.conn(r.place[to])
	if err != nil {
		return nil, err
	}
	return c.Output(ch, r.codec(e))
}

func (r remote) Input(ch uint64, e graph.Edge, from checkpoint.TaskID, capacity int, ready chan<- struct{}) (runtime.InputChannel, error) {
	c, err := r.links.conn(r.place[from])
	if err != nil {
		return nil, err
	}
	return c.Input(ch, r.codec(e), capacity, ready)
}

// chanListener is a net.Listener fed with connections accepted elsewhere.
type chanListener struct {
	addr  net.Addr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (l *chanListener) offer(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		c.Close()
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }

func taskToProto(id checkpoint.TaskID) *clusterpb.TaskID {
	return &clusterpb.TaskID{Vertex: id.Vertex, Subtask: int32(id.Subtask)}
}

func taskFromProto(t *clusterpb.TaskID) checkpoint.TaskID {
	return checkpoint.TaskID{Vertex: t.GetVertex(), Subtask: int(t.GetSubtask())}
}

// controlToProto is the control message m to task id, as the coordinator
// sends it to the task's worker. NB: every field of runtime.Control must
// cross (TestWireRoundTrip draws them all): a dropped one once made
// workers promote every barrier at once.
func controlToProto(id checkpoint.TaskID, m runtime.Control) *clusterpb.ControlMessage {
	p := &clusterpb.ControlMessage{Task: taskToProto(id), Kind: int32(m.Kind), Checkpoint: uint64(m.ID),
		EndOfInput: m.EndOfInput, Stop: m.Stop, Aligned: m.Aligned, Completed: uint64(m.Completed)}
	if !m.Triggered.IsZero() {
		p.TriggeredUnixNanos = m.Triggered.UnixNano()
	}
	return p
}

// controlFromProto is the task a control message goes to, and the message.
func controlFromProto(p *clusterpb.ControlMessage) (checkpoint.TaskID, runtime.Control) {
	m := runtime.Control{Kind: runtime.ControlKind(p.GetKind()), ID: checkpoint.ID(p.GetCheckpoint()),
		EndOfInput: p.GetEndOfInput(), Stop: p.GetStop(), Aligned: p.GetAligned(), Completed: checkpoint.ID(p.GetCompleted())}
	if n := p.GetTriggeredUnixNanos(); n != 0 {
		m.Triggered = time.Unix(0, n)
	}
	return taskFromProto(p.GetTask()), m
}

func reportToProto(r runtime.Report) *clusterpb.TaskReport {
	p := &clusterpb.TaskReport{Task: taskToProto(r.Task), Kind: int32(r.Kind), Checkpoint: uint64(r.ID),
		SyncNanos: int64(r.Sync), AlignNanos: int64(r.Align), AsyncNanos: int64(r.Async),
		Unaligned: r.Unaligned, Switched: r.Switched, ChannelStateBytes: r.ChannelState}
	for _, a := range r.Arrivals {
		p.ArrivalNanos = append(p.ArrivalNanos, int64(a))
	}
	if len(r.Handles) > 0 {
		p.HandlesJson, _ = json.Marshal(r.Handles) // plain data: cannot fail
	}
	if r.Err != nil {
		// NB: proto3 strings must be UTF-8; a text quoting raw bytes (a
		// record that did not parse) would make the report unsendable,
		// retried for ever.
		p.Error = strings.ToValidUTF8(r.Err.Error(), "\uFFFD")
		p.Permanent = runtime.IsPermanent(r.Err)
		p.StateDamaged = runtime.DamagedState(r.Err)
		var pe peerError
		if errors.As(r.Err, &pe) {
			p.PeerFailed = pe.peer
			p.PeerSilent = errors.Is(pe.err, transport.ErrPeerSilent)
		}
	}
	return p
}

// damagedError is a worker's failure of damaged state: its text as the
// worker's task wrote it, and errors.Is checkpoint.ErrStateDamaged, so
// the driver falls back to the previous checkpoint as in one process.
type damagedError struct{ error }

func (damagedError) Is(target error) bool { return target == checkpoint.ErrStateDamaged }

func reportFromProto(p *clusterpb.TaskReport) (runtime.Report, error) {
	r := runtime.Report{Task: taskFromProto(p.GetTask()), Kind: runtime.ReportKind(p.GetKind()), ID: checkpoint.ID(p.GetCheckpoint()),
		Sync: time.Duration(p.GetSyncNanos()), Align: time.Duration(p.GetAlignNanos()), Async: time.Duration(p.GetAsyncNanos()),
		Unaligned: p.GetUnaligned(), Switched: p.GetSwitched(), ChannelState: p.GetChannelStateBytes()}
	for _, a := range p.GetArrivalNanos() {
		r.Arrivals = append(r.Arrivals, time.Duration(a))
	}
	if r.Kind < runtime.ReportAck || r.Kind > runtime.ReportReplayed {
		return r, fmt.Errorf("report of kind %d", p.GetKind())
	}
	// The web UI and metrics sum and label these; a nonsense value
	// would show as a negative size or a switch that never happened.
	if r.ChannelState < 0 {
		return r, fmt.Errorf("report of task %s: channel state of %d bytes", r.Task, r.ChannelState)
	}
	if r.Switched && !r.Unaligned {
		return r, fmt.Errorf("report of task %s: switched to unaligned but not unaligned", r.Task)
	}
	if len(p.GetHandlesJson()) > 0 {
		if err := json.Unmarshal(p.GetHandlesJson(), &r.Handles); err != nil {
			return r, fmt.Errorf("report of task %s: handles: %w", r.Task, err)
		}
	}
	if p.GetError() != "" {
		r.Err = errors.New(clipTo(p.GetError(), maxErrorBytes))
		if p.GetStateDamaged() {
			r.Err = damagedError{r.Err}
		}
		if p.GetPermanent() {
			r.Err = operator.Permanent(r.Err)
		}
	}
	return r, nil
}
