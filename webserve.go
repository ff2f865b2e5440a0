package weir

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/internal/cluster"
	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/internal/web"
	"github.com/weirstream/weir/storage"
)

// effectiveConfig is the configuration /api/v1/config shows: the settings
// the job runs with, defaults filled in where Weir knows them.
type effectiveConfig struct {
	Job               string        `json:"job"`
	Parallelism       int           `json:"parallelism"`
	MaxParallelism    int           `json:"maxParallelism"`
	Mode              string        `json:"mode"`
	Interval          time.Duration `json:"checkpointIntervalNanos"`
	MinPause          time.Duration `json:"checkpointMinPauseNanos"`
	Timeout           time.Duration `json:"checkpointTimeoutNanos"`
	MaxConcurrent     int           `json:"maxConcurrentCheckpoints"`
	TolerableFailures int           `json:"tolerableCheckpointFailures"`
	Retained          int           `json:"checkpointsRetained"`
	// Alignment is "aligned" or "unaligned" (exactly once);
	// AlignedTimeout, when above 0, switches an aligned checkpoint's task
	// to unaligned after aligning that long.
	Alignment         string        `json:"checkpointAlignment"`
	AlignedTimeout    time.Duration `json:"alignedCheckpointTimeoutNanos"`
	RetainOnCancel    bool          `json:"retainOnCancel"`
	Storage           string        `json:"checkpointStorage"`
	Restore           string        `json:"restore,omitempty"`
	Fresh             bool          `json:"fresh,omitempty"`
	StateBackend      string        `json:"stateBackend"`
	Restart           string        `json:"restartStrategy"`
	BatchSize         int           `json:"batchSize"`
	WatermarkInterval time.Duration `json:"watermarkIntervalNanos"`
	// ChannelCapacity is the batches a channel holds; BufferDebloat the
	// debloating target that sizes them below it (0: off).
	ChannelCapacity int           `json:"channelCapacity"`
	BufferDebloat   time.Duration `json:"bufferDebloatNanos"`
	Role            string        `json:"role"`
}

// ErrCancelled is the error of a job cancelled through the API.
var ErrCancelled = errors.New("job cancelled through the API")

// CancelledError is the error of a job cancelled through the API, naming
// who asked (as the request states it, and its address); it is
// ErrCancelled to errors.Is.
type CancelledError struct{ By string }

func (e *CancelledError) Error() string { return ErrCancelled.Error() + " by " + e.By }

// Is makes a CancelledError ErrCancelled.
func (e *CancelledError) Is(target error) bool { return target == ErrCancelled }

// serveWeb starts the metrics and API server Config.Web asks for, feeding
// it the driver's events and letting it trigger savepoints and cancel the
// job (cancel); stop stops it.
func (e *Environment) serveWeb(spec *runtime.Spec, cancel context.CancelCauseFunc) (srv *web.Server, stop func(), err error) {
	cc, _ := spec.Checkpoint.Normalize() // validated by spec()
	runs := spec.WithDefaults()
	storage := "memory"
	if spec.Storage != nil {
		storage = spec.Storage.Describe()
	}
	alignment := "aligned"
	if cc.Unaligned {
		alignment = "unaligned"
	}
	role := string(e.cfg.Cluster.Role)
	if role == "" {
		role = "local"
	}
	ec := effectiveConfig{
		Job: e.cfg.Job, Parallelism: e.cfg.Parallelism, MaxParallelism: e.cfg.MaxParallelism, Mode: runs.Mode.String(),
		Interval: cc.Interval, MinPause: cc.MinPause, Timeout: cc.Timeout, MaxConcurrent: cc.MaxConcurrent,
		TolerableFailures: cc.TolerableFailures, Retained: cc.Retained, Alignment: alignment, AlignedTimeout: cc.AlignedTimeout,
		RetainOnCancel: cc.RetainOnCancel, Storage: storage,
		Restore: e.cfg.Restore, Fresh: e.cfg.Fresh, StateBackend: fmt.Sprint(e.cfg.StateBackend.Kind), Restart: fmt.Sprint(runs.Restart),
		BatchSize: runs.BatchSize, WatermarkInterval: runs.WatermarkInterval, ChannelCapacity: runs.ChannelCapacity, BufferDebloat: runs.BufferDebloat, Role: role,
	}
	now := spec.Now
	if now == nil {
		now = time.Now
	}
	stats := runtime.NewStats()
	spec.Stats = stats
	feeds := web.Feeds{
		Operators: func() []web.Operator {
			ms := e.Metrics()
			ops := make([]web.Operator, len(ms))
			for i, m := range ms {
				ops[i] = web.Operator{UID: m.UID, Records: m.Records, Late: m.Late}
			}
			return ops
		},
		Subtasks: func() []runtime.SubtaskStats { return stats.Read(now()) },
		Pending:  stats.Pending,
		Graph:    webGraph(spec.Plan),
		Inputs:   inputNames(spec.Plan),
		Config:   ec,
	}
	switch st := spec.Local; {
	case st != nil:
		feeds.RestoredBytes = func() (int64, int64) {
			r := st.Restored()
			return r.LocalBytes, r.RemoteBytes
		}
	case e.clusterOps != nil && e.cfg.LocalRecovery:
		// A coordinator's: what its workers' heartbeats say.
		feeds.RestoredBytes = func() (int64, int64) {
			r := e.clusterOps.Restored()
			return r.LocalBytes, r.RemoteBytes
		}
	}
	if e.cfg.Cluster.Role == Coordinator {
		feeds.Workers = func() []web.Worker {
			x := e.running.Load()
			if x == nil {
				return nil // between terms of leadership, or not started yet
			}
			return webWorkers(x.Coordinator().WorkerStatus(), x.Coordinator().Liveness())
		}
	}
	srv = web.New(e.cfg.Job, feeds, e.webControl(spec, cancel), now)
	addr, stop, err := web.Serve(e.cfg.Web, srv.Handler())
	if err != nil {
		return nil, nil, err
	}
	spec.Logger.Info("serving the web UI, metrics and the API", "job", e.cfg.Job, "ui", "http://"+addr+"/", "metrics", "http://"+addr+"/metrics", "api", "http://"+addr+"/api/v1/job")
	if e.cfg.OnWeb != nil {
		e.cfg.OnWeb(addr)
	}
	onEvent := spec.OnEvent
	spec.OnEvent = func(ev runtime.JobEvent) {
		srv.Observe(ev)
		if onEvent != nil {
			onEvent(ev)
		}
	}
	return srv, stop, nil
}

// endWeb tells the web server how the job ended, and stops it, or with
// Config.WebLinger leaves it answering for that long (WaitForWeb).
func (e *Environment) endWeb(srv *web.Server, stop func(), res Result, err error) {
	state, cause := "finished", ""
	switch {
	case err == nil && res.StoppedWith != 0:
		state = "stopped"
	case err == nil:
	case errors.Is(err, ErrCancelled) || errors.Is(err, context.Canceled):
		state, cause = "cancelled", err.Error()
	default:
		state, cause = "failed", err.Error()
	}
	srv.End(state, cause, res.Attempts, uint64(res.StoppedWith))
	if e.cfg.WebLinger <= 0 {
		stop()
		return
	}
	lingering.mu.Lock()
	defer lingering.mu.Unlock()
	lingering.servers = append(lingering.servers, lingeringServer{until: time.Now().Add(e.cfg.WebLinger), stop: stop})
}

// lingering holds the web servers of ended jobs that answer on
// (Config.WebLinger).
var lingering struct {
	mu      sync.Mutex
	servers []lingeringServer
}

type lingeringServer struct {
	until time.Time
	stop  func()
}

// WaitForWeb waits while the web servers of jobs that ended in this process
// linger (Config.WebLinger), or until ctx ends, and stops them. announce,
// if set, hears how long it will wait, when it waits at all. A program
// calls it before it exits, so that an open page can show how its job
// ended.
func WaitForWeb(ctx context.Context, announce func(time.Duration)) {
	lingering.mu.Lock()
	servers := lingering.servers
	lingering.servers = nil
	lingering.mu.Unlock()
	var until time.Time
	for _, s := range servers {
		if s.until.After(until) {
			until = s.until
		}
	}
	if d := time.Until(until); d > 0 && ctx.Err() == nil {
		if announce != nil {
			announce(d.Round(time.Second))
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	for _, s := range servers {
		s.stop()
	}
}

// webGraph is the plan as the API shows it.
func webGraph(plan *graph.Plan) web.Graph {
	g := web.Graph{Edges: []web.Edge{}}
	for _, vx := range plan.Vertices {
		v := web.Vertex{ID: vx.ID, Parallelism: vx.Parallelism, MaxParallelism: vx.MaxParallelism}
		for _, i := range vx.Nodes {
			n := plan.Graph.Nodes[i]
			v.Operators = append(v.Operators, web.GraphOperator{UID: n.UID, Name: n.Name, Kind: n.Kind})
		}
		g.Vertices = append(g.Vertices, v)
	}
	for _, ed := range plan.Edges {
		g.Edges = append(g.Edges, web.Edge{From: plan.Vertices[ed.From].ID, To: plan.Vertices[ed.To].ID, Partition: ed.Partition.String(), Port: ed.Port})
	}
	return g
}

// inputNames names the upstream subtask of each input channel of a task.
func inputNames(plan *graph.Plan) func(checkpoint.TaskID) []string {
	vertex := map[string]int{}
	for v, vx := range plan.Vertices {
		vertex[vx.ID] = v
	}
	return func(t checkpoint.TaskID) []string {
		v, ok := vertex[t.Vertex]
		if !ok {
			return nil
		}
		var names []string
		for _, u := range plan.InputChannels(v, t.Subtask) {
			names = append(names, checkpoint.TaskID{Vertex: plan.Vertices[u.Vertex].ID, Subtask: u.Subtask}.String())
		}
		return names
	}
}

// standingBy is an error while this process stands by (--ha): the job
// runs under the leader, which alone can cancel it or take its savepoints.
func (e *Environment) standingBy() error {
	if e.cfg.Cluster.HA == "" || e.leading.Load() {
		return nil
	}
	return errors.New("this process stands by: the job runs under its leader (high availability), whose web API takes cancels and savepoints; weir status names the coordinators")
}

// awaitingSlots is an error while this process coordinates a job that
// waits for its workers' slots.
func (e *Environment) awaitingSlots() error {
	x := e.running.Load()
	if x == nil {
		return nil
	}
	c := x.Coordinator()
	if need, have := c.AwaitingSlots(); need > 0 {
		return fmt.Errorf("savepoint: the job is not running: its coordinator waits for its workers' slots (%d of the %d it needs); start workers that join %s (weir worker --join), or see weir status", have, need, c.Addr())
	}
	return nil
}

// webControl is what the API's mutations do to this job.
func (e *Environment) webControl(spec *runtime.Spec, cancel context.CancelCauseFunc) web.Control {
	requests := make(chan runtime.SavepointRequest)
	spec.Savepoints = requests
	st := spec.Storage
	ctl := web.Control{
		Token: e.cfg.WebToken,
		Cancel: func(by string) error {
			if err := e.standingBy(); err != nil {
				return err
			}
			e.cfg.Logger.Warn("job cancelled through the API", "by", by)
			cancel(&CancelledError{By: by})
			return nil
		},
		Savepoint: func(ctx context.Context, stopJob bool) (uint64, error) {
			if err := e.standingBy(); err != nil {
				return 0, err
			}
			// The job takes requests while it runs; one that starts or
			// restarts takes it within moments. A coordinator waiting
			// for its workers' slots may wait for ever: it says so at
			// once.
			ctx, stop := context.WithTimeout(ctx, 10*time.Second)
			defer stop()
			poll := time.NewTicker(50 * time.Millisecond)
			defer poll.Stop()
			reply := make(chan runtime.SavepointReply, 1)
			for {
				if err := e.awaitingSlots(); err != nil {
					return 0, err
				}
				select {
				case requests <- runtime.SavepointRequest{Stop: stopJob, Reply: reply}:
					r := <-reply // the driver answers at once
					return uint64(r.ID), r.Err
				case <-poll.C:
				case <-ctx.Done():
					return 0, errors.New("savepoint: the job is not running: it took no request within 10s (it starts or restarts: weir status says which); try again once it runs")
				}
			}
		},
		Location: func(id uint64) string {
			if st == nil {
				return ""
			}
			loc := storage.CheckpointLocation(st.Describe(), "", checkpoint.ID(id))
			if vfs.Root(e.cfg.Checkpoint.FS) == vfs.Default {
				// The CLI that asks may run in another directory.
				loc = storage.AbsoluteLocation(loc)
			}
			return loc
		},
	}
	if e.cfg.Cluster.Role == Coordinator {
		// The coordinator's executor comes and goes with its terms (--ha):
		// between them there are no workers to profile.
		ctl.Profile = func(ctx context.Context, worker string, d time.Duration) ([]byte, error) {
			x := e.running.Load()
			if x == nil {
				return nil, fmt.Errorf("worker %s: this coordinator runs no job now (it stands by)", worker)
			}
			return x.Profile(ctx, worker, d)
		}
	}
	return ctl
}

// webWorkers are the coordinator's workers as the API shows them: one
// whose last heartbeat is over two intervals old is late; those lost
// since are listed too.
func webWorkers(ws []*clusterpb.WorkerStatus, live cluster.Liveness) []web.Worker {
	out := make([]web.Worker, 0, len(ws))
	for _, w := range ws {
		age := time.Duration(w.GetSinceHeartbeatMs()) * time.Millisecond
		state := "alive"
		switch {
		case w.GetLost():
			state = "lost"
		case w.GetSuspect():
			state = "suspect"
		case age > 2*live.HeartbeatInterval:
			state = "late"
		}
		ww := web.Worker{Name: w.GetWorker(), DataAddress: w.GetDataAddress(), Session: w.GetSession(),
			Slots: int(w.GetSlots()), SlotsUsed: int(w.GetSlotsUsed()), SlotsFree: max(int(w.GetSlots()-w.GetSlotsUsed()), 0),
			HeartbeatAge: age.Seconds(), State: state, Tasks: w.GetTasks(), LostReason: w.GetLostReason(),
			LostSecondsAgo: (time.Duration(w.GetSinceLostMs()) * time.Millisecond).Seconds()}
		if ww.State == "lost" {
			ww.SlotsFree = 0 // its process is gone, and its slots with it
		}
		if ww.Tasks == nil {
			ww.Tasks = []string{}
		}
		if p := w.GetProcess(); p != nil {
			ww.Process = &web.Process{HeapBytes: p.GetHeapBytes(), HeapObjects: p.GetHeapObjects(), MemoryBytes: p.GetMemoryBytes(),
				GCCycles: p.GetGcCycles(), GCCPUSeconds: time.Duration(p.GetGcCpuNs()).Seconds(), GCPauseSeconds: time.Duration(p.GetGcPauseNs()).Seconds(),
				Goroutines: p.GetGoroutines(), CPUSeconds: time.Duration(p.GetCpuNs()).Seconds(), GoVersion: p.GetGoVersion(),
				UptimeSeconds: time.Duration(p.GetUptimeNs()).Seconds()}
		}
		out = append(out, ww)
	}
	return out
}
