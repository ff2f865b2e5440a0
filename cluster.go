package weir

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/internal/cluster"
	"github.com/weirstream/weir/internal/ha"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/internal/transport"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/storage"
)

// Role is what a process of a job does.
type Role string

const (
	// Local runs the whole job in this process (the default).
	Local Role = ""
	// Coordinator runs the job's checkpoint coordinator and places its
	// tasks on the workers that join it.
	Coordinator Role = "coordinator"
	// Worker runs the tasks the coordinator deploys on it.
	Worker Role = "worker"
)

// defaultCoordinatorListen is where a coordinator listens by default.
const defaultCoordinatorListen = "127.0.0.1:7700"

// ClusterConfig makes a process one of a cluster's: every process runs the
// same job binary and builds the same graph; the coordinator refuses a
// worker that built another.
type ClusterConfig struct {
	Role Role
	// Listen is where the process accepts connections: the coordinator,
	// its workers'; a worker, the coordinator's calls and other workers'
	// data. Default loopback: 127.0.0.1:7700 for the coordinator, any port
	// for a worker.
	Listen string
	// Advertise is the address others reach a worker (or, with HA, a
	// coordinator) at, when it differs from Listen's (default: Listen's
	// address).
	Advertise string
	// Join is the coordinator's host:port (workers).
	Join string
	// Name is the process's name, which its certificate holds; the
	// coordinator's is "coordinator". Workers need one each.
	Name string
	// Slots is how many slots a worker offers (default 1). The job needs as
	// many slots in all as its largest parallelism.
	Slots int
	// Certs is the directory of the cluster's CA and certificates (weir
	// cluster certs --out DIR creates a test cluster's). Required: control
	// and data traffic use mutual TLS.
	Certs string
	// HeartbeatInterval (default 1s) and HeartbeatTimeout (default 5s): a
	// worker silent for the timeout is lost, and the job restarts from its
	// latest checkpoint on the slots left.
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
	// OnListen, if set, hears the coordinator's address once it listens.
	OnListen func(addr string)
	// HA, if set (etcd://host:port[,host:port…][/prefix]), makes the
	// coordinator highly available: any number of coordinator processes
	// of the job start alike and campaign for its leadership in etcd; the
	// leader listens and runs the job, restoring the latest checkpoint
	// etcd records, and the others stand by until its term ends (its
	// process died, was paused or was cut off from etcd for its lease's
	// time to live). Workers join with every coordinator's address
	// (Join "a:7700,b:7700"). Checkpoints complete only in etcd, under the
	// current term (storage.Led).
	HA string
	// HATTL is the leader's lease in etcd, in whole seconds (default 5s):
	// a standby takes over within it after the leader went silent.
	HATTL time.Duration
	// HACACert, HACert and HAKey are PEM files for TLS to etcd, as
	// etcdctl's --cacert, --cert and --key: the CA that signed etcd's
	// certificate (empty: the system's), and this process's client
	// certificate and key. None: plain text.
	HACACert, HACert, HAKey string
}

// haConfig is the configuration of the connection to etcd.
func (c ClusterConfig) haConfig() (ha.Config, error) {
	hc, err := ha.ParseURL(c.HA)
	if err != nil {
		return hc, err
	}
	hc.TTL = c.HATTL
	if hc.TLS, err = ha.LoadTLS(c.HACACert, c.HACert, c.HAKey); err != nil {
		return hc, err
	}
	return hc, hc.Validate()
}

func (c ClusterConfig) validate(cfg Config) error {
	switch c.Role {
	case Local:
		return c.validateHA(cfg)
	case Coordinator, Worker:
	default:
		return fmt.Errorf("cluster role %q: want coordinator or worker", c.Role)
	}
	if c.Certs == "" {
		return errors.New("a cluster needs certificates (--certs DIR): control and data traffic use mutual TLS; weir cluster certs --out DIR creates a test cluster's")
	}
	if cfg.Checkpoint.Mode != NoCheckpoints && cfg.Checkpoint.Dir == "" {
		return errors.New("a cluster needs checkpoint storage that every process reaches (--checkpoint-dir a shared directory or s3://bucket/prefix): memory checkpoints live in one process")
	}
	if err := c.validateHA(cfg); err != nil {
		return err
	}
	if c.Role == Worker {
		if c.Join == "" {
			return errors.New("a worker needs the coordinator's address (--join host:port)")
		}
		if c.Name == "" || c.Name == cluster.CoordinatorName {
			return fmt.Errorf("a worker needs a name of its own (--name), which its certificate holds; not %q", c.Name)
		}
		if c.Slots < 0 {
			return fmt.Errorf("a worker offers %d slots; it needs at least 1", c.Slots)
		}
		if listen := transport.LoopbackUnlessNamed(cmp.Or(c.Listen, "127.0.0.1:0")); c.Advertise != "" && isLoopback(listen) && offLoopback(c.Advertise) {
			return fmt.Errorf("the worker listens on loopback (--listen %q) and advertises %s (--advertise), where other processes cannot reach it: listen on the address it advertises, or on every interface (0.0.0.0:PORT)", c.Listen, c.Advertise)
		}
	}
	return cluster.Liveness{HeartbeatInterval: c.HeartbeatInterval, Timeout: c.HeartbeatTimeout}.Validate()
}

// isLoopback reports whether host:port addr names a loopback host.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}

// offLoopback reports whether host:port addr is known to lead elsewhere
// than loopback: an address that is not loopback's, or a name that
// resolves (within a second) to such addresses only. A name that does not
// resolve says nothing.
func offLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || isLoopback(addr) {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if ip.IP.IsLoopback() {
			return false
		}
	}
	return true
}

// validateHA checks the settings of high availability, if on.
func (c ClusterConfig) validateHA(cfg Config) error {
	if c.HA == "" {
		return nil
	}
	switch {
	case c.Role == Worker:
		return fmt.Errorf("--ha is for coordinators and runs in one process: a worker joins the job's coordinators by address (--join host:port,host:port)")
	case cfg.Fresh || cfg.Restore != "" && cfg.Restore != "latest":
		return errors.New("with --ha, every leader restores the latest checkpoint etcd records: --fresh and --restore of a checkpoint do not apply; --restore latest runs on a job that ended (stopped with a savepoint, cancelled, failed). To run a job again from the beginning, delete its keys, etcdctl del --prefix <prefix>/jobs/<job>/, and its checkpoints")
	case cfg.Checkpoint.Mode == NoCheckpoints:
		return errors.New("--ha needs checkpoints: a new leader restores the latest")
	case cfg.Checkpoint.Dir == "":
		return errors.New("--ha needs checkpoint storage that outlives the process (--checkpoint-dir a directory or s3://bucket/prefix): a new leader restores the latest")
	}
	if _, port, err := net.SplitHostPort(cmp.Or(c.Listen, defaultCoordinatorListen)); c.Role == Coordinator && (err != nil || port == "0") {
		return fmt.Errorf("with --ha, --listen needs a fixed host:port, not %q: workers join every coordinator's address, and the leader's is what etcd names", c.Listen)
	}
	_, err := c.haConfig()
	return err
}

// executeClustered runs this process's role of the job.
func (e *Environment) executeClustered(ctx context.Context, plan *graph.Plan, spec runtime.Spec) (Result, error) {
	cc := e.cfg.Cluster
	live := cluster.Liveness{HeartbeatInterval: cc.HeartbeatInterval, Timeout: cc.HeartbeatTimeout}
	if cc.Role == Worker {
		tc, err := transport.LoadTLS(cc.Certs, cc.Name)
		if err != nil {
			return Result{}, err
		}
		err = cluster.RunNode(ctx, cluster.NodeConfig{
			Coordinator: cc.Join, Name: cc.Name, Slots: max(cc.Slots, 1), Listen: cc.Listen, Advertise: cc.Advertise,
			TLS: tc, Spec: spec, Codec: e.wireCodec(plan), Logger: spec.Logger,
			Incarnation: e.incarnation, // its counters are the Environment's, over every Execute
			Operators: func() []cluster.OperatorCount {
				ms := e.Metrics()
				out := make([]cluster.OperatorCount, len(ms))
				for i, m := range ms {
					out[i] = cluster.OperatorCount{UID: m.UID, Records: m.Records, Late: m.Late}
				}
				return out
			},
		})
		return Result{}, err
	}
	if err := restoresOwn(spec); err != nil {
		return Result{}, err
	}
	tc, err := transport.LoadTLS(cc.Certs, cluster.CoordinatorName)
	if err != nil {
		return Result{}, err
	}
	ccfg := cluster.CoordinatorConfig{Graph: cluster.GraphOf(spec), Listen: cmp.Or(cc.Listen, defaultCoordinatorListen), TLS: tc, Liveness: live, Logger: spec.Logger, Stats: spec.Stats, Operators: e.clusterOps}
	if cc.HA != "" {
		return e.lead(ctx, spec, cmp.Or(cc.Advertise, ccfg.Listen), func(ctx context.Context, spec runtime.Spec, epoch uint64) (Result, error) {
			ccfg.Epoch = epoch
			return e.coordinate(ctx, ccfg, spec)
		})
	}
	return e.coordinate(ctx, ccfg, spec)
}

// restoresOwn refuses a checkpoint to restore by path (--restore <dir>/chk-N)
// that the cluster's checkpoint storage does not hold: the coordinator
// names the checkpoint to its workers by id, and they read its state from
// that storage.
func restoresOwn(spec runtime.Spec) error {
	p := spec.Start.Point
	if p == nil {
		return nil
	}
	scan, err := spec.Storage.Scan()
	if err != nil {
		return fmt.Errorf("restore %s: %w", p.Where, err)
	}
	if scan.Holds(p.Metadata) {
		return nil
	}
	return fmt.Errorf("restore %s: checkpoint %d is not in the cluster's checkpoint storage %s, whose checkpoints its workers restore: restore it in one process (weir run), or restore one of the cluster's own", p.Where, p.Metadata.ID, spec.Storage.Describe())
}

// coordinate runs the job as its coordinator.
func (e *Environment) coordinate(ctx context.Context, ccfg cluster.CoordinatorConfig, spec runtime.Spec) (Result, error) {
	cc := e.cfg.Cluster
	c, err := cluster.StartCoordinator(ccfg)
	if err != nil {
		return Result{}, err
	}
	defer c.Close()
	spec.Logger.Info("coordinator listening", "job", spec.Name, "addr", c.Addr())
	if cc.OnListen != nil {
		cc.OnListen(c.Addr())
	}
	x := cluster.NewExecutor(c)
	defer x.Close()
	e.running.Store(x)
	defer e.running.CompareAndSwap(x, nil)
	spec.Executor = x
	onEvent := spec.OnEvent
	spec.OnEvent = func(ev runtime.JobEvent) {
		c.Observe(ev)
		if onEvent != nil {
			onEvent(ev)
		}
	}
	return runtime.Run(ctx, spec)
}

// lead campaigns for the job's leadership in etcd as name, and runs the
// job (run: as its coordinator, or in this process) whenever it leads,
// until the job ends under its term or ctx ends. A term that is lost stops
// the run at once (nothing it did after its lease could end counts:
// storage.Led), and the process stands by again.
//
// A job that ended (finished, stopped with a savepoint, cancelled, failed)
// is not run again by later terms; a process started with --restore latest
// after it ended reopens it, unless it finished, and runs it on from its
// latest checkpoint.
func (e *Environment) lead(ctx context.Context, spec runtime.Spec, name string, run func(context.Context, runtime.Spec, uint64) (Result, error)) (Result, error) {
	hc, err := e.cfg.Cluster.haConfig()
	if err != nil {
		return Result{}, err
	}
	client, err := ha.Dial(hc)
	if err != nil {
		return Result{}, err
	}
	defer client.Close()
	store := spec.Storage
	log := spec.Logger.With("job", spec.Name, "candidate", name)
	if err := reach(ctx, client, spec.Name, hc, log); err != nil {
		return Result{}, err
	}
	// The job's end as it was before this process started: the one that
	// --restore latest reopens.
	var atStart ha.Ended
	if e.cfg.Restore == "latest" {
		rctx, cancel := context.WithTimeout(ctx, hc.TTL)
		atStart, err = client.Ended(rctx, spec.Name)
		cancel()
		if err != nil {
			return Result{}, err
		}
	}
	var startFailures int
	defer e.leading.Store(false)
	for {
		e.leading.Store(false)
		log.Info("standing by: campaigning for the job's leadership", "etcd", hc.Endpoints)
		l, err := client.Campaign(ctx, spec.Name, name)
		if ctx.Err() != nil {
			return Result{}, context.Cause(ctx)
		}
		if err != nil {
			log.Warn("the campaign failed; campaigning again", "err", err)
			if err := reach(ctx, client, spec.Name, hc, log); err != nil {
				return Result{}, err
			}
			continue
		}
		log.Info("leading the job", "epoch", l.Epoch, "etcd", l.Namespace())
		e.leading.Store(true)
		ectx, ecancel := context.WithTimeout(ctx, l.TTL())
		before, err := l.Ended(ectx)
		reopen := err == nil && before.Revision != 0 && before.Revision == atStart.Revision && before.Outcome != ha.Finished
		if ctx.Err() != nil {
			// Stopped while taking over, before the run. Cancelled through
			// the API, the job ended (unless it had already): record it, or
			// a standby would run it again.
			ecancel()
			var endErr error
			if cause := context.Cause(ctx); errors.Is(cause, ErrCancelled) && (err != nil || before.Revision == 0 || reopen) {
				endErr = recordEnd(l, "cancelled: "+cause.Error(), log)
			}
			e.resign(l, log)
			return Result{}, errors.Join(context.Cause(ctx), endErr)
		}
		if err == nil && reopen {
			log.Info("the job ended under an earlier leader; --restore latest runs it on from its latest checkpoint", "ended", before.Outcome)
			err = l.Reopen(ectx, before.Revision)
		}
		if err != nil || before.Revision != 0 && !reopen {
			l.Resign(ectx)
		}
		ecancel()
		switch {
		case err != nil:
			log.Warn("could not read or reopen the job's end; standing by again", "err", err)
			continue
		case before.Revision == 0 || reopen:
		case before.Outcome == ha.Finished:
			log.Info("the job finished under an earlier leader; this coordinator exits")
			return Result{}, nil
		case strings.HasPrefix(before.Outcome, ha.Stopped):
			log.Info("the job stopped under an earlier leader (" + before.Outcome + "); this coordinator exits: " + runOn(e.cfg.Restore))
			return Result{}, nil
		default:
			return Result{}, fmt.Errorf("job %s ended under an earlier leader: %s (%s)", spec.Name, before.Outcome, runOn(e.cfg.Restore))
		}
		rctx, cancel := context.WithCancelCause(ctx)
		go func() {
			select {
			case <-l.Lost():
				log.Warn("the job's leadership is lost: stopping the run", "epoch", l.Epoch, "why", l.Err())
				e.leading.Store(false)
				cancel(l.Err())
			case <-rctx.Done():
			}
		}()
		term := spec
		term.Storage = storage.Led(store, l)
		term.Start = runtime.Start{Latest: true, AllowNonRestoredState: spec.Start.AllowNonRestoredState}
		term.NoRunLocks = true // NB: the term is the run's lock; a paused leader would hold these
		// A run stopped (SIGTERM, a rolling restart) leaves its
		// checkpoints to the standby that takes over.
		term.Checkpoint.RetainOnCancel = true
		res, err := run(rctx, term, uint64(l.Epoch))
		e.leading.Store(false) // the run is over: nothing here takes a cancel or a savepoint
		cancel(nil)
		if lost := l.Err(); lost != nil {
			log.Warn("deposed: the job's leadership was lost; the run stopped, and this coordinator stands by", "epoch", l.Epoch, "why", lost, "run", err)
			if res.Attempts > 0 {
				startFailures = 0 // the run got going: its start failed no more
			}
			continue
		}
		// The job ended under this term when it finished, stopped with a
		// savepoint, was cancelled through the API, or failed for good:
		// once an attempt ran (its restart strategy gave up, or the
		// failure was permanent), or at start on what every leader would
		// find (a checkpoint that does not fit the job, or is damaged).
		// The standbys must not run it again. A run stopped by this
		// process's own signal, or that failed at start on what may pass
		// (storage that could not be read), leaves the job to the next
		// leader.
		var outcome string
		switch cause := context.Cause(ctx); {
		case err == nil && res.StoppedWith != 0:
			outcome = fmt.Sprintf("%s %d", ha.Stopped, res.StoppedWith)
		case err == nil:
			outcome = ha.Finished
		case errors.Is(cause, ErrCancelled):
			outcome = "cancelled: " + cause.Error()
		case ctx.Err() == nil && (res.Attempts > 0 || failsEveryLeader(err)):
			outcome = "failed: " + err.Error()
		}
		var endErr error
		if outcome != "" {
			endErr = recordEnd(l, outcome, log)
		}
		e.resign(l, log)
		// NB: storage that another etcd namespace leads is this process's
		// configuration, not the job's end.
		if outcome != "" || ctx.Err() != nil || errors.Is(err, storage.ErrLedElsewhere) {
			return res, errors.Join(err, endErr)
		}
		startFailures++
		delay := min(startRetry<<min(startFailures-1, 6), maxStartRetry)
		log.Warn("the run failed at start; standing by again", "epoch", l.Epoch, "failures", startFailures, "retry", delay, "err", err)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return res, err
		}
	}
}

// recordEnd records in etcd that the job ended (ha.Leadership.End, which
// retries an answer that did not arrive while the term lasts). An error
// says that a standby runs the job on: the process must not report the
// end as done.
func recordEnd(l *ha.Leadership, outcome string, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), l.TTL())
	defer cancel()
	err := l.End(ctx, outcome)
	if errors.Is(err, ha.ErrUnknownOutcome) {
		// An earlier try may have recorded it (ctx may have ended).
		rctx, rcancel := context.WithTimeout(context.Background(), l.TTL())
		if ended, rerr := l.Ended(rctx); rerr == nil && ended.Outcome == outcome {
			err = nil
		}
		rcancel()
	}
	if err != nil {
		err = fmt.Errorf("the job's end (%s) could not be recorded in etcd, so a standby runs it on from its latest checkpoint: %w", outcome, err)
		log.Error("the job's end is not recorded", "err", err)
		return err
	}
	return nil
}

// resign ends the term at once, for a standby to take over without
// waiting for the lease; this process stands by from then on.
func (e *Environment) resign(l *ha.Leadership, log *slog.Logger) {
	e.leading.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), l.TTL())
	defer cancel()
	if err := l.Resign(ctx); err != nil {
		log.Warn("could not resign the leadership; it ends with its lease", "err", err)
	}
}

// runOn says how to run on a job that ended, to a process started with
// --restore restore that found it ended.
func runOn(restore string) string {
	const how = "to run it on from its latest checkpoint, start its coordinators with --restore latest, and its workers"
	if restore == "latest" {
		return "it ended after this process started, so --restore latest does not reopen it; " + how + " again"
	}
	return how
}

// failsEveryLeader reports whether err, of a run that failed at start,
// would fail every leader's the same way.
func failsEveryLeader(err error) bool {
	return operator.IsPermanent(err) || errors.Is(err, checkpoint.ErrMismatch) || errors.Is(err, checkpoint.ErrCorrupt) ||
		errors.Is(err, checkpoint.ErrVersion) || errors.Is(err, checkpoint.ErrStateDamaged)
}

// startRetry is how long a process whose run failed at start waits before
// it campaigns again (another may lead meanwhile); it doubles with each
// failure in a row, up to maxStartRetry.
const (
	startRetry    = 5 * time.Second
	maxStartRetry = 5 * time.Minute
)

// reach waits until etcd answers, warning every time it does not: a
// coordinator that cannot reach etcd would otherwise campaign in silence.
func reach(ctx context.Context, client *ha.Client, job string, hc ha.Config, log *slog.Logger) error {
	for tries := 1; ; tries++ {
		err := client.Reachable(ctx, job, max(hc.TTL, 5*time.Second))
		if err == nil || ctx.Err() != nil {
			return context.Cause(ctx)
		}
		hint := "is it up, and do --ha-cacert, --ha-cert and --ha-key match it? (an etcd that requires TLS does not answer plain text)"
		if hc.TLS != nil {
			hint = "is it up, and do --ha-cacert, --ha-cert and --ha-key match it?"
		}
		log.Warn("cannot reach etcd; trying again: "+hint, "etcd", hc.Endpoints, "tries", tries, "err", err)
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// wireCodec returns the codec of the batches on an edge of plan: the
// records of its upstream node's output port.
func (e *Environment) wireCodec(plan *graph.Plan) func(graph.Edge) runtime.BatchCodec {
	return func(edge graph.Edge) runtime.BatchCodec {
		from := plan.Vertices[edge.From]
		return e.nodes[from.Nodes[len(from.Nodes)-1]].wire[edge.Port].codec
	}
}

// chainCodec is the codec of the records node n emits on its main output.
func (e *Environment) chainCodec(n int) runtime.BatchCodec { return e.nodes[n].wire[0].codec }

// wire is how the records of a node's output port are encoded, on a
// cluster's channels and in channel state.
type wire struct {
	codec runtime.BatchCodec
	// faithful says why the codec cannot carry every record unchanged
	// (codec.Faithful), or nil.
	faithful func() error
}

func wireOf[T any]() wire {
	c := codec.For[T]()
	// Described as a key's (typeOf): a record in flight is read back by
	// its bytes, a JSON field's name and type count.
	return wire{codec: runtime.Typed(runtime.Batches(c), typeOf(c, c, true)), faithful: codec.Faithful[T]}
}

// checkWire refuses a job whose records would cross a channel or be stored
// changed: on a cluster, or with channel state (unaligned checkpoints, or
// aligned ones a timeout may switch).
func (e *Environment) checkWire(plan *graph.Plan) error {
	cc := e.cfg.Checkpoint
	var why string
	switch {
	case e.cfg.Cluster.Role != Local:
		why = "a cluster's channels carry them"
	case cc.Mode == ExactlyOnce && (cc.Alignment == Unaligned || cc.AlignedTimeout > 0):
		why = "unaligned checkpoints store those in flight"
	default:
		return nil
	}
	for _, edge := range plan.Edges {
		from := plan.Vertices[edge.From]
		n := e.nodes[from.Nodes[len(from.Nodes)-1]]
		if err := n.wire[edge.Port].faithful(); err != nil {
			return fmt.Errorf("operator %q emits records its codec cannot carry unchanged, and %s: %w", n.UID, why, err)
		}
	}
	return nil
}
