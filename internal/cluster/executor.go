package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/cluster/clusterpb/clusterpbconnect"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/storage"
)

// callTimeout bounds one call of the coordinator on a worker.
const callTimeout = 30 * time.Second

// Executor runs a job's attempts on the coordinator's workers: it places
// the tasks on their slots, deploys them, carries control messages to them
// and their reports back, and fails the attempt when a worker is lost. It
// is a runtime.Executor.
type Executor struct {
	c   *Coordinator
	log *slog.Logger
	tr  *http.Transport

	mu      sync.Mutex
	clients map[string]clusterpbconnect.WorkerServiceClient // by worker
	probed  map[Worker]bool                                 // sessions that share the storage
	probing map[Worker]context.CancelFunc                   // ends a probe of the session, lost meanwhile
	stop    chan struct{}
	wg      sync.WaitGroup
}

// NewExecutor returns an executor on c's workers; Close it after the run.
func NewExecutor(c *Coordinator) *Executor {
	x := &Executor{c: c, log: c.cfg.Logger, clients: map[string]clusterpbconnect.WorkerServiceClient{}, probed: map[Worker]bool{}, probing: map[Worker]context.CancelFunc{}, stop: make(chan struct{})}
	x.tr = &http.Transport{TLSClientConfig: c.cfg.TLS.Clone(), ForceAttemptHTTP2: true}
	x.wg.Go(x.watchLost)
	return x
}

// Close stops the executor's goroutines.
func (x *Executor) Close() {
	close(x.stop)
	x.wg.Wait()
	x.tr.CloseIdleConnections()
}

// watchLost fails the running attempt when one of its workers is lost.
func (x *Executor) watchLost() {
	for {
		select {
		case w := <-x.c.Lost():
			x.mu.Lock()
			for pw, stop := range x.probing {
				if pw.Name == w.Name && pw.Session == w.Session {
					stop()
				}
			}
			x.mu.Unlock()
			x.c.mu.Lock()
			ex := x.c.exec
			x.c.mu.Unlock()
			if ex != nil {
				if pw, ok := ex.workers[w.Name]; ok && pw.Session == w.Session {
					ex.deploying()
					ex.fail(w.Name, fmt.Errorf("worker %s lost (session %d)", w.Name, w.Session))
				}
			}
		case <-x.stop:
			return
		}
	}
}

// client returns the control client of worker w; its certificate must
// name w.
func (x *Executor) client(w Worker) clusterpbconnect.WorkerServiceClient {
	x.mu.Lock()
	defer x.mu.Unlock()
	key := w.Name + "@" + w.DataAddress
	if cl, ok := x.clients[key]; ok {
		return cl
	}
	tr := x.tr.Clone()
	tr.TLSClientConfig.NextProtos = []string{"h2"}
	tr.TLSClientConfig.InsecureSkipVerify = true // verifyPeer checks the chain and the name
	tr.TLSClientConfig.VerifyConnection = verifyPeer(x.c.cfg.TLS, w.Name)
	cl := clusterpbconnect.NewWorkerServiceClient(&http.Client{Transport: tr}, "https://"+w.DataAddress, rpcOptions)
	x.clients[key] = cl
	return cl
}

// probe checks, once per session, that worker w shares the job's
// checkpoint storage: it writes a probe file, which the coordinator reads
// back. Storage it does not share would fail at the first restore, so the
// job fails now, saying so.
func (x *Executor) probe(ctx context.Context, st storage.Storage, w Worker) error {
	x.mu.Lock()
	done := x.probed[w]
	x.mu.Unlock()
	if done || st == nil {
		return nil
	}
	pr, ok := st.(storage.Prober)
	if !ok {
		return operator.Permanent(fmt.Errorf("checkpoint storage %s lives in one process: a cluster needs a shared directory or object storage", st.Describe()))
	}
	token := fmt.Sprintf("%s-%d-%d", w.Name, w.Session, time.Now().UnixNano())
	// A worker declared lost while its probe runs ends the probe (watchLost),
	// as it ends a deploy: the attempt does not wait out the call timeout.
	lctx, lost := context.WithCancel(ctx)
	x.mu.Lock()
	x.probing[w] = lost
	x.mu.Unlock()
	x.c.mu.Lock()
	if !slices.ContainsFunc(x.c.members.Registered(), func(r Worker) bool { return r.Name == w.Name && r.Session == w.Session }) {
		lost() // lost before the probe began
	}
	x.c.mu.Unlock()
	defer func() {
		x.mu.Lock()
		delete(x.probing, w)
		x.mu.Unlock()
		lost()
	}()
	cctx, cancel := context.WithTimeout(lctx, callTimeout)
	defer cancel()
	if _, err := x.client(w).Probe(cctx, connect.NewRequest(&clusterpb.ProbeRequest{Token: token})); err != nil {
		if connect.CodeOf(err) == connect.CodeFailedPrecondition {
			return operator.Permanent(fmt.Errorf("worker %s cannot write to the checkpoint storage: %w", w.Name, err))
		}
		if ctx.Err() == nil && lctx.Err() != nil {
			return fmt.Errorf("probe the checkpoint storage on worker %s: the worker was lost meanwhile (session %d)", w.Name, w.Session)
		}
		if !errors.Is(ctx.Err(), context.Canceled) && unreachable(err) {
			// As a failed deploy: else every restart until the heartbeat
			// timeout picks the worker again, and fails again. (A probe
			// the coordinator gave up on says nothing of the worker.)
			x.c.suspect(w, err)
		}
		return fmt.Errorf("probe the checkpoint storage on worker %s: %w", w.Name, err)
	}
	got, err := pr.ReadProbe(token)
	switch {
	case err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission):
		// A read that failed may pass (storage.Prober): the attempt
		// restarts.
		return fmt.Errorf("read back the probe worker %s wrote to checkpoint storage %s: %w", w.Name, st.Describe(), err)
	case err != nil || string(got) != w.Name:
		return operator.Permanent(fmt.Errorf("checkpoint storage %s is not shared: worker %s wrote %s/%s there, and the coordinator cannot read it back (%v); give every process the same shared directory or object storage",
			st.Describe(), w.Name, storage.ProbeDir, token, err))
	}
	if err := pr.RemoveProbe(token); err != nil {
		x.log.Warn("could not remove a storage probe file", "file", storage.ProbeDir+"/"+token, "err", err)
	}
	x.log.Info("worker shares the checkpoint storage", "worker", w.Name, "storage", st.Describe())
	x.mu.Lock()
	x.probed[w] = true
	x.mu.Unlock()
	return nil
}

// Start implements runtime.Executor: it waits for enough slots, places the
// attempt's tasks and deploys them.
func (x *Executor) Start(ctx context.Context, spec runtime.Spec, p runtime.Part, reports chan<- runtime.Report) (runtime.Execution, error) {
	need := 0
	for _, v := range spec.Plan.Vertices {
		need = max(need, v.Parallelism)
	}
	ws, err := x.c.WaitForSlots(ctx, need, 0)
	if err != nil {
		return nil, err
	}
	var copies Copies
	if p.Point != nil {
		copies = x.c.Copies(p.Point.Metadata.ID)
	}
	place, err := Place(spec.Plan, ws, copies)
	if err != nil {
		return nil, err
	}
	for _, w := range ws {
		if err := x.probe(ctx, spec.Storage, w); err != nil {
			return nil, err
		}
	}
	if x.c.cfg.Epoch != 0 && p.Attempt >= 1<<sessionBits {
		return nil, operator.Permanent(fmt.Errorf("cluster: attempt %d: a term of leadership numbers at most %d attempts; restart this coordinator (a standby takes over, and numbers its own)", p.Attempt, 1<<sessionBits-1))
	}
	ectx, cancel := context.WithCancel(ctx)
	deploying, stopDeploying := context.WithCancel(ectx)
	// On the wire, attempts are numbered from the term's epoch up, as
	// sessions are (NewMembers): the runtime of each term counts its
	// attempts from 1, and a worker must not take a data connection of an
	// earlier term's attempt for this one's.
	ex := &execution{x: x, attempt: x.c.cfg.Epoch<<sessionBits | uint64(p.Attempt), place: place, workers: map[string]Worker{}, reports: reports, ctx: ectx, cancel: cancel, deploying: stopDeploying, queues: map[string]chan *clusterpb.ControlMessage{}}
	byWorker := map[string][]string{}
	for id, w := range place {
		byWorker[w] = append(byWorker[w], id.String())
	}
	req := &clusterpb.DeployRequest{Attempt: ex.attempt, StartOver: p.StartOver, RunId: p.RunID}
	if p.Point != nil {
		req.Checkpoint = uint64(p.Point.Metadata.ID)
	}
	for _, w := range ws {
		if _, ok := byWorker[w.Name]; !ok {
			continue
		}
		ex.workers[w.Name] = w
		req.Peers = append(req.Peers, &clusterpb.Peer{Worker: w.Name, DataAddress: w.DataAddress})
		tasks := byWorker[w.Name]
		slices.Sort(tasks)
		x.log.Info("placed tasks", "attempt", p.Attempt, "worker", w.Name, "tasks", strings.Join(tasks, " "))
	}
	req.Placement = placementToProto(place)
	x.c.mu.Lock()
	x.c.exec = ex
	x.c.deployed = max(x.c.deployed, ex.attempt)
	x.c.mu.Unlock()
	// The first deploy that fails fails them all: the others would wait
	// for data connections with its worker.
	dctx, dcancel := context.WithTimeout(deploying, callTimeout)
	errs := make([]error, 0, len(ex.workers))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, w := range ex.workers {
		wg.Go(func() {
			wreq := &clusterpb.DeployRequest{Attempt: req.Attempt, Session: w.Session, Checkpoint: req.Checkpoint, StartOver: req.StartOver, RunId: req.RunId, Placement: req.Placement, Peers: req.Peers}
			_, err := x.client(w).Deploy(dctx, connect.NewRequest(wreq))
			if err == nil || dctx.Err() != nil && connect.CodeOf(err) == connect.CodeCanceled {
				return
			}
			dcancel()
			if unreachable(err) {
				x.c.suspect(w, err)
			}
			mu.Lock()
			errs = append(errs, fmt.Errorf("deploy attempt %d on worker %s: %w", p.Attempt, w.Name, err))
			mu.Unlock()
		})
	}
	wg.Wait()
	dcancel()
	if deploying.Err() != nil && ectx.Err() == nil {
		errs = append(errs, fmt.Errorf("deploy attempt %d: a worker of the attempt was lost meanwhile", p.Attempt))
	}
	if err := errors.Join(errs...); err != nil {
		ex.Stop()
		return nil, err
	}
	for name := range ex.workers {
		q := make(chan *clusterpb.ControlMessage, 4096)
		ex.queues[name] = q
		ex.wg.Go(func() { ex.deliver(name, q) })
	}
	return ex, nil
}

// execution is an attempt running on the workers.
type execution struct {
	x       *Executor
	attempt uint64
	place   Placement
	workers map[string]Worker // those that run its tasks
	reports chan<- runtime.Report
	ctx     context.Context
	cancel  context.CancelFunc
	// deploying ends the deploy calls, for a worker of the attempt lost
	// while they run: the failure it reports is read once Start returns.
	deploying context.CancelFunc
	queues    map[string]chan *clusterpb.ControlMessage
	wg        sync.WaitGroup
	// finished counts the tasks that reported finishing.
	finished atomic.Int64
}

// Send implements runtime.Execution.
func (ex *execution) Send(ctx context.Context, id checkpoint.TaskID, m runtime.Control) {
	q := ex.queues[ex.place[id]]
	if q == nil {
		return
	}
	select {
	case q <- controlToProto(id, m):
	case <-ctx.Done():
	case <-ex.ctx.Done():
	}
}

// deliver sends worker's control messages in order, those that piled up
// in one call.
func (ex *execution) deliver(worker string, q chan *clusterpb.ControlMessage) {
	x := ex.x
	cl := x.client(ex.workers[worker])
	for {
		req := &clusterpb.ControlRequest{Attempt: ex.attempt}
		select {
		case m := <-q:
			req.Messages = append(req.Messages, m)
		case <-ex.ctx.Done():
			return
		}
	more:
		for len(req.Messages) < 1024 {
			select {
			case m := <-q:
				req.Messages = append(req.Messages, m)
			default:
				break more
			}
		}
		cctx, cancel := context.WithTimeout(ex.ctx, callTimeout)
		_, err := cl.Control(cctx, connect.NewRequest(req))
		cancel()
		if err != nil && ex.ctx.Err() == nil {
			if unreachable(err) {
				x.c.suspect(ex.workers[worker], err)
			}
			ex.fail(worker, fmt.Errorf("control messages to worker %s: %w", worker, err))
			return
		}
	}
}

// fail reports the attempt failed because of worker.
func (ex *execution) fail(worker string, err error) {
	task := ex.place.First(worker)
	select {
	case ex.reports <- runtime.Report{Kind: runtime.ReportFailed, Task: task, Err: err}:
	case <-ex.ctx.Done():
	}
}

// Stop implements runtime.Execution: it cancels the attempt on every
// worker and returns when they have stopped its tasks, or could not be
// reached.
func (ex *execution) Stop() {
	ex.cancel()
	ex.wg.Wait()
	x := ex.x
	x.c.mu.Lock()
	if x.c.exec == ex {
		x.c.exec = nil
		x.c.stopped = ex
	}
	if ex.finished.Load() == int64(len(ex.place)) {
		// The job ended: workers closing their data connections now is
		// no failure.
		x.c.ended = ex.attempt
	}
	// NB: a suspect worker too: it is alive, and suspected just when an
	// attempt fails (a data connection to it failed, a call timed out).
	// But one that does not answer is waited for no longer than the
	// heartbeat timeout: by then it is declared lost, and fences itself.
	live := x.c.members.Registered()
	suspect := map[string]bool{}
	for _, w := range live {
		suspect[w.Name] = x.c.members.Suspected(w.Name)
	}
	x.c.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range ex.workers {
		if !slices.Contains(live, w) {
			continue // lost: it fenced itself
		}
		timeout := callTimeout
		if suspect[w.Name] {
			timeout = min(timeout, x.c.cfg.Liveness.Timeout)
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			if _, err := x.client(w).Cancel(ctx, connect.NewRequest(&clusterpb.CancelRequest{Attempt: ex.attempt})); err != nil {
				x.log.Warn("could not cancel the attempt on a worker; it fences itself when it loses the coordinator", "worker", w.Name, "attempt", ex.attempt, "err", err)
			}
		})
	}
	wg.Wait()
}

// accept takes a worker's reports of attempt, refusing those of another
// attempt or of tasks the worker does not run.
func (ex *execution) accept(ctx context.Context, worker string, rs []runtime.Report) error {
	for _, r := range rs {
		if ex.place[r.Task] != worker {
			return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("worker %s reported for task %s, which it does not run", worker, r.Task))
		}
	}
	for _, r := range rs {
		if r.Kind == runtime.ReportFinished {
			ex.finished.Add(1)
		}
		select {
		case ex.reports <- r:
		case <-ex.ctx.Done():
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("attempt %d has stopped", ex.attempt))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// unreachable reports whether a call the coordinator did not cancel failed
// to reach its worker (refused, reset, timed out), rather than being
// answered with an error.
func unreachable(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeUnknown, connect.CodeCanceled:
		return true
	}
	return false
}
