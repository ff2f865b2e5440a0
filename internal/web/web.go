// Package web serves what an operator looks at: a web UI at /, Prometheus
// metrics at /metrics and a JSON API under /api/v1/, fed by the job's
// events and its subtasks' counters. The process that runs the job's
// driver serves it: the only process in local mode, the coordinator in a
// cluster.
package web

import (
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/internal/transport"
	"github.com/weirstream/weir/operator"
)

// maxHistory bounds the checkpoints and failures the API keeps.
const maxHistory = 100

// Operator is one operator's counters, summed over its subtasks.
type Operator struct {
	UID string `json:"uid"`
	// Records counts records entering the operator, chained behind others
	// in a task or not, or leaving it as a source.
	Records int64 `json:"records"`
	// Late counts records its windows or joins dropped as late.
	Late int64 `json:"lateDropped"`
}

// Checkpoint is one checkpoint of the history, or one in progress.
type Checkpoint struct {
	ID uint64 `json:"id"`
	// Status is completed, aborted, or in_progress (triggered, not yet
	// completed or aborted).
	Status string `json:"status"`
	// At is when it completed or aborted; in progress, when it was
	// triggered.
	At       time.Time `json:"at"`
	Duration float64   `json:"durationSeconds,omitempty"`
	// Triggered is when a completed checkpoint was triggered (At less its
	// Duration); AlignSeconds its longest alignment of a task.
	Triggered    *time.Time `json:"triggered,omitempty"`
	AlignSeconds float64    `json:"alignSeconds,omitempty"`
	Size         int64      `json:"sizeBytes,omitempty"`
	Uploaded     int64      `json:"uploadedBytes,omitempty"`
	SyncPart     float64    `json:"syncSeconds,omitempty"`
	// Slowest is the task that acknowledged last: often a victim
	// downstream of the cause. HeldBy is the task whose input backlog held
	// the checkpoint's barrier longest on the path to the last
	// acknowledgement, HeldFor how long (heldBy); Finalize the time from
	// the last acknowledgement to completion (writing the metadata).
	Slowest  string  `json:"slowestTask,omitempty"`
	HeldBy   string  `json:"heldBy,omitempty"`
	HeldFor  float64 `json:"heldSeconds,omitempty"`
	Finalize float64 `json:"finalizeSeconds,omitempty"`
	Reason   string  `json:"reason,omitempty"`
	Attempt  int     `json:"attempt"`
	// afterStop, of an aborted checkpoint, says what becomes of a job
	// that was to stop with it (checkpoint.Reason.AfterAbortedStop).
	afterStop string
	// restarts and runs, of a completed checkpoint, are the job's restarts
	// and starts when it completed: a stop with it that fails after
	// (awaitStop) restarts it, or, when a leader lost its term, the next
	// term starts it again.
	restarts, runs int
	// Savepoint: kept until deleted by hand.
	Savepoint bool `json:"savepoint"`
	// Location is where its metadata lives: what --restore takes.
	Location string `json:"location,omitempty"`
	// How a completed checkpoint's tasks snapshotted: Alignment is
	// "aligned" (every task, and in at-least-once mode, where nothing
	// blocks), "unaligned" (some task unaligned from its first barrier) or
	// "switched" (some task started aligned and the aligned-checkpoint
	// timeout made it unaligned; with both, switched).
	// Of the AckedTasks that acknowledged, UnalignedTasks were unaligned,
	// SwitchedTasks of them switched. ChannelState is the bytes of channel
	// state (records in flight) it holds, part of Size.
	Alignment      string `json:"alignment,omitempty"`
	AckedTasks     int    `json:"acknowledgedTasks,omitempty"`
	UnalignedTasks int    `json:"unalignedTasks,omitempty"`
	SwitchedTasks  int    `json:"switchedTasks,omitempty"`
	ChannelState   int64  `json:"channelStateBytes,omitempty"`
	// Tasks are the tasks' parts, in the order they acknowledged
	// (/api/v1/checkpoints/{id} only).
	Tasks []TaskTimeline `json:"tasks,omitempty"`
	// In progress: Age is the time since its trigger, as of the answer;
	// of its TotalTasks, AckedTasks acknowledged; Progress is every task's
	// part so far, in task order (/api/v1/checkpoints/{id} only).
	Age        float64        `json:"ageSeconds,omitempty"`
	TotalTasks int            `json:"totalTasks,omitempty"`
	Progress   []TaskProgress `json:"progress,omitempty"`
}

// TaskProgress is one task's part so far in a checkpoint in progress. Its
// State is one of
//
//   - "acknowledged": it wrote its state, Acked seconds after the trigger;
//   - "snapshotting": it is through its barriers (a source: it took the
//     trigger) and takes its snapshot or writes its state;
//   - "aligning": its first barrier came at AlignSince, AlignSeconds ago
//     (snapshotting: when it came, or the trigger), and Barriers of its
//     Channels input channels have theirs; an
//     unaligned snapshot (Alignment) was taken at the first barrier, and
//     waits for the others to complete its channel state;
//   - "waiting": no barrier yet (a source: no trigger).
//
// Alignment says, from the first barrier on, how its snapshot goes:
// "aligned" so far, "unaligned" or "switched" (by the aligned-checkpoint
// timeout). NB: in a cluster a task's progress comes with its worker's
// heartbeats, so it may lag by one; its acknowledgement does not.
type TaskProgress struct {
	Task       string     `json:"task"`
	State      string     `json:"state"`
	Acked      *float64   `json:"ackedSeconds,omitempty"`
	AlignSince *time.Time `json:"alignSince,omitempty"`
	Align      float64    `json:"alignSeconds,omitempty"`
	Barriers   int        `json:"barriersReceived"`
	Channels   int        `json:"inputChannels"`
	Alignment  string     `json:"alignment,omitempty"`
}

// TaskTimeline is one task's part in a completed checkpoint, in seconds
// after the trigger or long: when it acknowledged, how long it aligned
// (first barrier to snapshot), its snapshot's parts, the bytes it wrote,
// and when each input channel's barrier arrived after the first (-1: not
// before the snapshot). Channels names each channel's upstream subtask.
//
// Alignment is how its snapshot went: "aligned", "unaligned" (from its
// first barrier) or "switched" (it aligned for Align, then the
// aligned-checkpoint timeout made it unaligned). ChannelState is the
// bytes of channel state it stored, part of Bytes: the records in flight
// an unaligned snapshot holds, or those a barrier overtook.
//
// NB: an unaligned snapshot is written once its last barrier came; that
// wait is in Acked but in none of Align, Sync and Async.
type TaskTimeline struct {
	Task         string    `json:"task"`
	Acked        float64   `json:"ackedSeconds"`
	Align        float64   `json:"alignSeconds"`
	Sync         float64   `json:"syncSeconds"`
	Async        float64   `json:"asyncSeconds"`
	Bytes        int64     `json:"bytes"`
	Alignment    string    `json:"alignment"`
	ChannelState int64     `json:"channelStateBytes"`
	Arrivals     []float64 `json:"barrierArrivalsSeconds,omitempty"`
	Channels     []string  `json:"channels,omitempty"`
}

// alignment names how a task's snapshot went (TaskTimeline.Alignment).
func alignment(tt runtime.TaskTrace) string {
	switch {
	case tt.Switched:
		return "switched"
	case tt.Unaligned:
		return "unaligned"
	}
	return "aligned"
}

// Graph is the job graph as it runs: its vertices (chains of operators,
// one task per subtask) and the edges between them.
type Graph struct {
	Vertices []Vertex `json:"vertices"`
	Edges    []Edge   `json:"edges"`
}

// Vertex is a chain of operators run as one task per subtask.
type Vertex struct {
	ID             string          `json:"id"` // its head operator's UID
	Operators      []GraphOperator `json:"operators"`
	Parallelism    int             `json:"parallelism"`
	MaxParallelism int             `json:"maxParallelism"`
}

// GraphOperator is one operator of a vertex's chain, head first.
type GraphOperator struct {
	UID  string `json:"uid"`
	Name string `json:"name"`
	Kind string `json:"kind"`
}

// Edge joins two vertices: forward, hash (by key), rebalance or broadcast;
// port 0 is the upstream's records, above 0 a side output.
type Edge struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Partition string `json:"partition"`
	Port      int    `json:"port,omitempty"`
}

// Subtask is one subtask's counters: totals since its attempt started,
// and rates and time ratios over the last interval of about a second.
type Subtask struct {
	Task       string  `json:"task"`
	Vertex     string  `json:"vertex"`
	Subtask    int     `json:"subtask"`
	Attempt    int     `json:"attempt"`
	State      string  `json:"state"` // running, finished, failed, cancelled
	Uptime     float64 `json:"uptimeSeconds"`
	RecordsIn  int64   `json:"recordsIn"`
	RecordsOut int64   `json:"recordsOut"`
	// Time worked, waiting for input or a timer, and waiting for room
	// downstream, in seconds since the attempt started.
	BusySeconds          float64 `json:"busySeconds"`
	IdleSeconds          float64 `json:"idleSeconds"`
	BackPressuredSeconds float64 `json:"backPressuredSeconds"`
	InPerSecond          float64 `json:"recordsInPerSecond"`
	OutPerSecond         float64 `json:"recordsOutPerSecond"`
	Busy                 float64 `json:"busyRatio"`
	Idle                 float64 `json:"idleRatio"`
	BackPressured        float64 `json:"backPressuredRatio"`
	// Watermark is the event-time watermark (ms since the epoch), absent
	// while there is none.
	Watermark *int64 `json:"watermark,omitempty"`
	// A subtask ending in a sink: the checkpoints it committed, the time
	// the commits took, and the last interval's mean commit time.
	Commits       int64   `json:"sinkCommits,omitempty"`
	CommitSeconds float64 `json:"sinkCommitSeconds,omitempty"`
	CommitLatency float64 `json:"sinkCommitLatencySeconds,omitempty"`
	// InputCapacity is the events each input channel may hold, as buffer
	// debloating sized them; absent until debloating first changed them.
	InputCapacity int `json:"inputCapacity,omitempty"`
	// BytesIn and BytesOut are the bytes sent over the network to and
	// from the subtask's channels to other processes, as frames
	// (batches, barriers, watermarks; headers included). Channels within
	// a process pass batches by reference and count nothing: in one
	// process, and between subtasks of one worker, they stay 0.
	BytesIn  int64 `json:"bytesIn"`
	BytesOut int64 `json:"bytesOut"`
}

// Workers is what GET /api/v1/workers answers: the cluster's workers as
// the coordinator sees them, or, in a process that runs the whole job,
// none and a note saying so.
type Workers struct {
	// Cluster: this process coordinates a cluster's workers.
	Cluster bool     `json:"cluster"`
	Note    string   `json:"note,omitempty"`
	Workers []Worker `json:"workers"`
}

// Worker is a registered worker process of the cluster.
type Worker struct {
	Name        string `json:"name"`
	DataAddress string `json:"dataAddress"`
	// Session numbers its registration (a restarted process gets a new
	// one).
	Session uint64 `json:"session"`
	// Slots it offers; SlotsUsed those the running attempt's tasks take;
	// SlotsFree the others (none once it is lost).
	Slots     int `json:"slots"`
	SlotsUsed int `json:"slotsUsed"`
	SlotsFree int `json:"slotsFree"`
	// HeartbeatAge is the time since its last heartbeat (or its
	// registration).
	HeartbeatAge float64 `json:"heartbeatAgeSeconds"`
	// State is "alive"; "suspect" when a call or a data connection to it
	// failed (it gets no tasks until its next heartbeat); "late" when its
	// last heartbeat is over two intervals old (at the heartbeat timeout
	// it is lost); or "lost": the coordinator declared it lost
	// LostSecondsAgo, for LostReason, and no process has registered under
	// its name since (the last 16 lost are kept).
	State          string   `json:"state"`
	LostReason     string   `json:"lostReason,omitempty"`
	LostSecondsAgo float64  `json:"lostSecondsAgo,omitempty"`
	Tasks          []string `json:"tasks"`
	// Process is what its last heartbeat said of its process; absent
	// before one did.
	Process *Process `json:"process,omitempty"`
}

// Process is a worker process's Go runtime, as its heartbeat read it.
type Process struct {
	// HeapBytes: live and not yet swept heap objects; MemoryBytes: all
	// the memory the Go runtime holds from the system (heap, stacks,
	// runtime structures).
	HeapBytes   int64 `json:"heapBytes"`
	HeapObjects int64 `json:"heapObjects"`
	MemoryBytes int64 `json:"memoryBytes"`
	// GCCycles since it started, the CPU time they took and the time
	// goroutines stood stopped for them (estimated from the runtime's
	// pause histogram).
	GCCycles       int64   `json:"gcCycles"`
	GCCPUSeconds   float64 `json:"gcCpuSeconds"`
	GCPauseSeconds float64 `json:"gcPauseSeconds"`
	Goroutines     int64   `json:"goroutines"`
	// CPUSeconds is the CPU time it used, user and system (0 where the
	// system does not tell).
	CPUSeconds    float64 `json:"cpuSeconds"`
	GoVersion     string  `json:"goVersion"`
	UptimeSeconds float64 `json:"uptimeSeconds"`
}

// Failure is one failure that restarted the job.
type Failure struct {
	At       time.Time `json:"at"`
	Attempt  int       `json:"attempt"`
	Cause    string    `json:"cause"`
	Restores uint64    `json:"restoresCheckpoint"` // 0: from the beginning
	Delay    float64   `json:"delaySeconds"`
	// Final: the failure ended the job (no restart follows).
	Final bool `json:"final,omitempty"`
}

// Restore is an attempt that started from a checkpoint or savepoint.
type Restore struct {
	At         time.Time `json:"at"`
	Attempt    int       `json:"attempt"`
	Checkpoint uint64    `json:"checkpoint"`
	Savepoint  bool      `json:"savepoint"`
	// Location is where it lives (the storage, or the savepoint's path).
	Location string `json:"location,omitempty"`
	// FromParallelism is the most subtasks a vertex had in it, Parallelism
	// the most the job runs now: they differ when the restore rescaled.
	FromParallelism int `json:"fromParallelism"`
	Parallelism     int `json:"parallelism"`
}

// Job is the job's state.
type Job struct {
	Name string `json:"name"`
	// State is created, running, restarting, or once the job ended (End)
	// finished (its input ended), stopped (with a savepoint), cancelled or
	// failed.
	State   string    `json:"state"`
	Started time.Time `json:"started"`
	// Ended is when the job ended, Cause why if it did not finish, and
	// StoppedWith the savepoint it stopped with.
	Ended       *time.Time `json:"ended,omitempty"`
	Cause       string     `json:"cause,omitempty"`
	StoppedWith uint64     `json:"stoppedWith,omitempty"`
	// Now is the server's time of the answer: a page says "… ago" by it,
	// not by its own clock.
	Now time.Time `json:"now"`
	// LastRestore is the newest attempt's restore, if it restored one.
	LastRestore    *Restore   `json:"lastRestore,omitempty"`
	Attempt        int        `json:"attempt"`
	RestoredFrom   uint64     `json:"restoredFrom,omitempty"`
	Restarts       int        `json:"restarts"`
	LastCheckpoint *time.Time `json:"lastCheckpoint,omitempty"`
}

// Control is what the API's mutations do; a nil field refuses its
// mutation.
type Control struct {
	// Token authenticates mutations (Authorization: Bearer <token>);
	// without one they are refused.
	Token string
	// Savepoint triggers a savepoint and returns its id; with stop, the
	// job stops with it (runtime.SavepointRequest).
	Savepoint func(ctx context.Context, stop bool) (uint64, error)
	// Cancel cancels the job (its checkpoints are kept unless the job
	// discards them on cancel); by names who asked, for the job's log and
	// exit message. An error refuses the cancel (409, with its text).
	Cancel func(by string) error
	// Location is where checkpoint id lives, for --restore.
	Location func(id uint64) string
	// Profile takes a CPU profile of worker for d and returns it in
	// pprof's format (profiling.CPU on the worker); nil: none (local).
	// It fails with profiling.ErrBusy while the worker takes another.
	Profile func(ctx context.Context, worker string, d time.Duration) ([]byte, error)
}

// Feeds are what the server reads besides the job's events.
type Feeds struct {
	// Operators reads the operators' counters, at each request or scrape.
	Operators func() []Operator
	// Subtasks reads the subtasks' counters; nil: none.
	Subtasks func() []runtime.SubtaskStats
	Graph    Graph
	// Inputs names the upstream subtask of each input channel of a task,
	// in its gate's order; nil: none named.
	Inputs func(checkpoint.TaskID) []string
	// Pending reads the checkpoints in flight (runtime.Stats.Pending);
	// nil: none.
	Pending func() []checkpoint.PendingCheckpoint
	// Config is the effective configuration /api/v1/config shows.
	Config any
	// Workers reads the cluster's workers at each request or scrape; nil:
	// this process runs the whole job, and has none.
	Workers func() []Worker
	// RestoredBytes reads the bytes of state restores read from local
	// copies and from checkpoint storage (local recovery); nil: local
	// recovery is off here.
	RestoredBytes func() (local, remote int64)
}

// rateInterval is the least time between the two readings the subtasks'
// rates and time ratios are computed from.
const rateInterval = time.Second

// Server holds what the API tells and the metrics' collectors.
type Server struct {
	now     func() time.Time
	feeds   Feeds
	control Control
	reg     *prometheus.Registry

	mu          sync.Mutex
	job         Job
	checkpoints []Checkpoint
	failures    []Failure
	restoreLog  []Restore
	// rates holds the subtasks as of the last reading, with their rates
	// since the one before (at least rateInterval earlier), read at
	// readAt; prev is that earlier reading.
	rates  []Subtask
	readAt time.Time
	prev   map[checkpoint.TaskID]runtime.SubtaskStats
	// settled hears, per savepoint id waited for, the savepoint when it
	// completes or aborts.
	settled map[uint64]chan Checkpoint
	// changed, when not nil, is closed when the job restarts, starts or
	// ends (awaitStop).
	changed chan struct{}
	// runs counts the job's starts (EventRunning): its attempts, and the
	// terms of its leaders.
	runs int
	// profiling holds a token while a flame graph is profiled: one at a
	// time.
	profiling chan struct{}

	completed, aborted, restarts, restores prometheus.Counter
	duration, size, sync, align            prometheus.Histogram
	channelState                           prometheus.Histogram
	// snapshots counts the tasks' snapshots of completed checkpoints by
	// their alignment (TaskTimeline.Alignment).
	snapshots map[string]prometheus.Counter
}

// New returns a server for job.
func New(job string, feeds Feeds, control Control, now func() time.Time) *Server {
	if now == nil {
		now = time.Now
	}
	if feeds.Subtasks == nil {
		feeds.Subtasks = func() []runtime.SubtaskStats { return nil }
	}
	if feeds.Pending == nil {
		feeds.Pending = func() []checkpoint.PendingCheckpoint { return nil }
	}
	s := &Server{now: now, feeds: feeds, control: control, reg: prometheus.NewRegistry(), profiling: make(chan struct{}, 1), job: Job{Name: job, State: "created", Started: now()}}
	labels := prometheus.Labels{"job": job}
	counter := func(name, help string, l prometheus.Labels) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "weir", Name: name, Help: help, ConstLabels: l})
		s.reg.MustRegister(c)
		return c
	}
	histogram := func(name, help string, buckets []float64) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "weir", Name: name, Help: help, ConstLabels: labels, Buckets: buckets})
		s.reg.MustRegister(h)
		return h
	}
	s.completed = counter("checkpoints_total", "Checkpoints by result.", prometheus.Labels{"job": job, "result": "completed"})
	s.aborted = counter("checkpoints_total", "Checkpoints by result.", prometheus.Labels{"job": job, "result": "aborted"})
	s.restarts = counter("restarts_total", "Restarts after a failure.", labels)
	s.restores = counter("restores_total", "Attempts that restored a checkpoint.", labels)
	s.duration = histogram("checkpoint_duration_seconds", "Completed checkpoints, trigger to completion.", prometheus.ExponentialBuckets(0.005, 2, 14))
	s.size = histogram("checkpoint_size_bytes", "Completed checkpoints' state.", prometheus.ExponentialBuckets(1024, 4, 14))
	s.sync = histogram("checkpoint_sync_duration_seconds", "Completed checkpoints' longest synchronous snapshot part (a task stopped for it).", prometheus.ExponentialBuckets(0.0001, 2, 16))
	s.align = histogram("checkpoint_alignment_duration_seconds", "Completed checkpoints' longest barrier alignment of a task (first barrier to snapshot).", prometheus.ExponentialBuckets(0.0001, 2, 18))
	s.channelState = histogram("checkpoint_channel_state_bytes", "Completed checkpoints' channel state: the records in flight they hold (unaligned snapshots, and barriers that overtook records), part of their size.", prometheus.ExponentialBuckets(1024, 4, 14))
	s.snapshots = map[string]prometheus.Counter{}
	for _, a := range []string{"aligned", "unaligned", "switched"} {
		s.snapshots[a] = counter("checkpoint_task_snapshots_total", "Task snapshots of completed checkpoints by alignment: aligned, unaligned from the first barrier, or switched to unaligned by the aligned-checkpoint timeout.",
			prometheus.Labels{"job": job, "alignment": a})
	}
	s.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "weir", Name: "last_checkpoint_age_seconds", ConstLabels: labels,
		Help: "Time since the last completed checkpoint (since the start while there is none)."}, func() float64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		since := s.job.Started
		if s.job.LastCheckpoint != nil {
			since = *s.job.LastCheckpoint
		}
		return s.now().Sub(since).Seconds()
	}))
	s.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "weir", Name: "checkpoints_in_progress", ConstLabels: labels,
		Help: "Checkpoints and savepoints triggered and not yet completed or aborted."}, func() float64 {
		cs, _ := s.inProgressAndHistory(false)
		return float64(len(cs))
	}))
	s.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "weir", Name: "attempt", ConstLabels: labels,
		Help: "The job's current attempt (1 until a restart)."}, func() float64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return float64(s.job.Attempt)
	}))
	if rb := feeds.RestoredBytes; rb != nil {
		for _, source := range []string{"local", "remote"} {
			s.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "weir", Name: "restore_bytes_total", ConstLabels: prometheus.Labels{"job": job, "source": source},
				Help: "Bytes of state restores read, from the local copies of local recovery (source=local) or from checkpoint storage (remote)."}, func() float64 {
				l, r := rb()
				if source == "local" {
					return float64(l)
				}
				return float64(r)
			}))
		}
	}
	s.reg.MustRegister(operatorCollector{s: s, job: job}, jobStateCollector{s: s, job: job}, workerCollector{s: s, job: job},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return s
}

// jobStates are the states a Job is in (Job.State), which weir_job_state
// labels.
var jobStates = []string{"created", "running", "restarting", "finished", "stopped", "cancelled", "failed"}

var jobStateDesc = prometheus.NewDesc("weir_job_state", "1 for the state the job is in (created, running, restarting; once it ended finished, stopped, cancelled or failed), 0 for the others.", []string{"job", "state"}, nil)

// jobStateCollector exports the job's state as one series per state, 1 for
// the current one: an alert on state="restarting" needs no value mapping.
type jobStateCollector struct {
	s   *Server
	job string
}

func (c jobStateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- jobStateDesc }

func (c jobStateCollector) Collect(ch chan<- prometheus.Metric) {
	state := c.s.jobState().State
	for _, st := range jobStates {
		v := 0.0
		if st == state {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(jobStateDesc, prometheus.GaugeValue, v, c.job, st)
	}
}

func (s *Server) jobState() Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.job
	j.Now = s.now()
	return j
}

// End records how the job ended: state is finished, stopped, cancelled
// or failed; cause says why (failed, cancelled); stoppedWith is the
// savepoint it stopped with. A failure that ends the job is a row of the
// failures too, as the restarts' are. The server keeps answering with the
// final state until it is stopped.
func (s *Server) End(state, cause string, attempt int, stoppedWith uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.job.State, s.job.Cause, s.job.StoppedWith, s.job.Ended = state, cause, stoppedWith, &now
	s.signal()
	if state == "failed" {
		s.failures = appendBounded(s.failures, Failure{At: now, Attempt: max(attempt, s.job.Attempt), Cause: cause, Final: true})
	}
}

// subtasks returns the subtasks' counters, with rates over the last
// interval; a reading younger than rateInterval is not taken again.
func (s *Server) subtasks() []Subtask {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.rates != nil && now.Sub(s.readAt) < rateInterval {
		return s.rates
	}
	reading := s.feeds.Subtasks()
	rates := make([]Subtask, len(reading))
	next := make(map[checkpoint.TaskID]runtime.SubtaskStats, len(reading))
	for i, st := range reading {
		next[st.Task] = st
		r := Subtask{Task: st.Task.String(), Vertex: st.Task.Vertex, Subtask: st.Task.Subtask, Attempt: st.Attempt, State: st.State.String(),
			Uptime: st.Uptime.Seconds(), RecordsIn: st.In, RecordsOut: st.Out,
			BusySeconds: st.Busy().Seconds(), IdleSeconds: st.Idle.Seconds(), BackPressuredSeconds: st.BackPressured.Seconds(),
			Commits: st.Commits, CommitSeconds: st.CommitTime.Seconds(), InputCapacity: st.InputCapacity,
			BytesIn: st.BytesIn, BytesOut: st.BytesOut}
		if st.Watermark != operator.MinTime {
			r.Watermark = &st.Watermark
		}
		// Rates against the previous reading of the same attempt, or
		// since the subtask started. A reading that did not move (a
		// subtask that ended, a lost worker's last report) has none.
		var p runtime.SubtaskStats
		if old, ok := s.prev[st.Task]; ok && old.Attempt == st.Attempt && old.Uptime <= st.Uptime {
			p = old
		}
		if dt := (st.Uptime - p.Uptime).Seconds(); dt > 0 {
			r.InPerSecond, r.OutPerSecond = float64(st.In-p.In)/dt, float64(st.Out-p.Out)/dt
			r.Idle = min((st.Idle-p.Idle).Seconds()/dt, 1)
			r.BackPressured = min((st.BackPressured-p.BackPressured).Seconds()/dt, 1-r.Idle)
			r.Busy = 1 - r.Idle - r.BackPressured
		}
		if n := st.Commits - p.Commits; n > 0 {
			r.CommitLatency = (st.CommitTime - p.CommitTime).Seconds() / float64(n)
		}
		rates[i] = r
	}
	s.rates, s.readAt, s.prev = rates, now, next
	return rates
}

// operatorCollector reads the operators' counters at each scrape.
type operatorCollector struct {
	s   *Server
	job string
}

var (
	recordsDesc = prometheus.NewDesc("weir_records_total", "Records entering an operator (chained behind others in a task or not), or leaving a source.", []string{"job", "operator"}, nil)
	lateDesc    = prometheus.NewDesc("weir_late_records_dropped_total", "Records an operator's windows or joins dropped as late.", []string{"job", "operator"}, nil)
)

var (
	subtaskLabels   = []string{"job", "vertex", "subtask"}
	subtaskInDesc   = prometheus.NewDesc("weir_subtask_records_in_total", "Records a subtask read (a source) or took from its inputs, in its current attempt.", subtaskLabels, nil)
	subtaskOutDesc  = prometheus.NewDesc("weir_subtask_records_out_total", "Records a subtask sent downstream, in its current attempt.", subtaskLabels, nil)
	subtaskBusyDesc = prometheus.NewDesc("weir_subtask_busy_seconds_total", "Time a subtask worked, in its current attempt.", subtaskLabels, nil)
	subtaskIdleDesc = prometheus.NewDesc("weir_subtask_idle_seconds_total", "Time a subtask waited for input or a timer, in its current attempt.", subtaskLabels, nil)
	subtaskBPDesc   = prometheus.NewDesc("weir_subtask_backpressured_seconds_total", "Time a subtask waited for room downstream, in its current attempt.", subtaskLabels, nil)
	subtaskBPRatio  = prometheus.NewDesc("weir_subtask_backpressure_ratio", "The share of the last second a subtask waited for room downstream.", subtaskLabels, nil)
	sinkCommitDesc  = prometheus.NewDesc("weir_sink_commit_duration_seconds", "The time a subtask ending in a sink took to commit a completed checkpoint's output, in its current attempt.", subtaskLabels, nil)
	subtaskCapDesc  = prometheus.NewDesc("weir_subtask_input_capacity", "Events each input channel of a subtask may hold, as buffer debloating sized them to its throughput (absent until debloating first changed it).", subtaskLabels, nil)
	subtaskWMDesc   = prometheus.NewDesc("weir_subtask_watermark_seconds", "A subtask's event-time watermark, in seconds since the epoch (absent while it has none).", subtaskLabels, nil)
	subtaskBInDesc  = prometheus.NewDesc("weir_subtask_bytes_in_total", "Bytes a subtask received over the network from other processes, in its current attempt (channels within a process count none).", subtaskLabels, nil)
	subtaskBOutDesc = prometheus.NewDesc("weir_subtask_bytes_out_total", "Bytes a subtask sent over the network to other processes, in its current attempt (channels within a process count none).", subtaskLabels, nil)
)

func (c operatorCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{recordsDesc, lateDesc, subtaskInDesc, subtaskOutDesc, subtaskBusyDesc, subtaskIdleDesc, subtaskBPDesc, subtaskBPRatio, subtaskWMDesc, subtaskCapDesc, sinkCommitDesc, subtaskBInDesc, subtaskBOutDesc} {
		ch <- d
	}
}

func (c operatorCollector) Collect(ch chan<- prometheus.Metric) {
	for _, op := range c.s.feeds.Operators() {
		ch <- prometheus.MustNewConstMetric(recordsDesc, prometheus.CounterValue, float64(op.Records), c.job, op.UID)
		ch <- prometheus.MustNewConstMetric(lateDesc, prometheus.CounterValue, float64(op.Late), c.job, op.UID)
	}
	for _, st := range c.s.subtasks() {
		l := []string{c.job, st.Vertex, strconv.Itoa(st.Subtask)}
		ch <- prometheus.MustNewConstMetric(subtaskInDesc, prometheus.CounterValue, float64(st.RecordsIn), l...)
		ch <- prometheus.MustNewConstMetric(subtaskOutDesc, prometheus.CounterValue, float64(st.RecordsOut), l...)
		ch <- prometheus.MustNewConstMetric(subtaskBusyDesc, prometheus.CounterValue, st.BusySeconds, l...)
		ch <- prometheus.MustNewConstMetric(subtaskIdleDesc, prometheus.CounterValue, st.IdleSeconds, l...)
		ch <- prometheus.MustNewConstMetric(subtaskBPDesc, prometheus.CounterValue, st.BackPressuredSeconds, l...)
		ch <- prometheus.MustNewConstMetric(subtaskBPRatio, prometheus.GaugeValue, st.BackPressured, l...)
		ch <- prometheus.MustNewConstMetric(subtaskBInDesc, prometheus.CounterValue, float64(st.BytesIn), l...)
		ch <- prometheus.MustNewConstMetric(subtaskBOutDesc, prometheus.CounterValue, float64(st.BytesOut), l...)
		if st.Commits > 0 {
			ch <- prometheus.MustNewConstSummary(sinkCommitDesc, uint64(st.Commits), st.CommitSeconds, nil, l...)
		}
		if st.InputCapacity > 0 {
			ch <- prometheus.MustNewConstMetric(subtaskCapDesc, prometheus.GaugeValue, float64(st.InputCapacity), l...)
		}
		if st.Watermark != nil {
			ch <- prometheus.MustNewConstMetric(subtaskWMDesc, prometheus.GaugeValue, float64(*st.Watermark)/1000, l...)
		}
	}
}

// Observe records a job event; the driver calls it (Spec.OnEvent).
func (s *Server) Observe(e runtime.JobEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.job.Attempt = max(s.job.Attempt, e.Attempt)
	switch e.Kind {
	case runtime.EventRunning:
		s.job.State, s.job.RestoredFrom, s.job.LastRestore = "running", uint64(e.RestoredFrom), nil
		s.runs++
		s.signal()
		if e.RestoredFrom != 0 {
			s.restores.Inc()
			r := Restore{At: now, Attempt: e.Attempt, Checkpoint: uint64(e.RestoredFrom), Savepoint: e.RestoredSavepoint,
				Location: e.RestoredWhere, FromParallelism: e.RestoredParallelism}
			for _, v := range s.feeds.Graph.Vertices {
				r.Parallelism = max(r.Parallelism, v.Parallelism)
			}
			s.job.LastRestore = &r
			s.restoreLog = appendBounded(s.restoreLog, r)
		}
	case runtime.EventRestarting:
		s.job.State = "restarting"
		s.job.Restarts++
		s.restarts.Inc()
		cause := ""
		if e.Err != nil {
			cause = e.Err.Error()
		}
		s.failures = appendBounded(s.failures, Failure{At: now, Attempt: e.Attempt, Cause: cause, Restores: uint64(e.RestoredFrom), Delay: e.Duration.Seconds()})
		s.signal()
	case runtime.EventFinished:
		s.job.State = "finished"
		s.signal()
	case runtime.EventCheckpointCompleted:
		s.completed.Inc()
		s.duration.Observe(e.Duration.Seconds())
		s.size.Observe(float64(e.Size))
		s.sync.Observe(e.SyncPart.Seconds())
		c := Checkpoint{ID: uint64(e.ID), Status: "completed", At: now, Duration: e.Duration.Seconds(), Size: e.Size,
			Uploaded: e.Uploaded, SyncPart: e.SyncPart.Seconds(), Slowest: e.Slowest.String(), Attempt: e.Attempt, Savepoint: e.Savepoint,
			AckedTasks: len(e.Tasks), restarts: s.job.Restarts, runs: s.runs}
		if len(e.Tasks) > 0 {
			c.Alignment = "aligned"
		}
		var align time.Duration
		for _, tt := range e.Tasks {
			align = max(align, tt.Align)
			c.ChannelState += tt.ChannelState
			if tt.Unaligned {
				c.UnalignedTasks++
				c.Alignment = "unaligned"
			}
			if tt.Switched {
				c.SwitchedTasks++
			}
			s.snapshots[alignment(tt)].Inc()
		}
		if c.SwitchedTasks > 0 {
			c.Alignment = "switched"
		}
		triggered := now.Add(-e.Duration)
		c.Triggered, c.AlignSeconds = &triggered, align.Seconds()
		s.align.Observe(align.Seconds())
		s.channelState.Observe(float64(c.ChannelState))
		s.job.LastCheckpoint = &now
		if s.control.Location != nil {
			c.Location = s.control.Location(c.ID)
		}
		for _, tt := range e.Tasks {
			tl := TaskTimeline{Task: tt.Task.String(), Acked: tt.Acked.Seconds(), Align: tt.Align.Seconds(), Sync: tt.Sync.Seconds(), Async: tt.Async.Seconds(), Bytes: tt.Bytes,
				Alignment: alignment(tt), ChannelState: tt.ChannelState}
			for _, a := range tt.Arrivals {
				// NB: the runtime says "never" with -1 ns; the API with -1 s.
				if a < 0 {
					tl.Arrivals = append(tl.Arrivals, -1)
				} else {
					tl.Arrivals = append(tl.Arrivals, a.Seconds())
				}
			}
			if s.feeds.Inputs != nil {
				tl.Channels = s.feeds.Inputs(tt.Task)
			}
			c.Tasks = append(c.Tasks, tl)
		}
		c.HeldBy, c.HeldFor = heldBy(c.Tasks)
		if len(c.Tasks) > 0 {
			c.Finalize = max(c.Duration-slices.MaxFunc(c.Tasks, func(a, b TaskTimeline) int { return cmp.Compare(a.Acked, b.Acked) }).Acked, 0)
		}
		s.checkpoints = appendBounded(s.checkpoints, c)
		s.settle(c)
	case runtime.EventCheckpointAborted:
		s.aborted.Inc()
		reason := e.Reason.String()
		if e.Err != nil {
			reason += ": " + e.Err.Error()
		}
		c := Checkpoint{ID: uint64(e.ID), Status: "aborted", At: now, Reason: reason, Attempt: e.Attempt, afterStop: e.Reason.AfterAbortedStop()}
		s.checkpoints = appendBounded(s.checkpoints, c)
		s.settle(c)
	}
}

// settle tells whoever waits for c that it settled; s.mu is held.
func (s *Server) settle(c Checkpoint) {
	if ch, ok := s.settled[c.ID]; ok {
		ch <- c
		delete(s.settled, c.ID)
	}
}

// signal tells whoever waits in awaitStop that the job restarted or
// ended; s.mu is held.
func (s *Server) signal() {
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
}

// awaitStop waits, once savepoint c to stop with completed, until the job
// ended, and says why it did not stop with c ("" if it did): the tasks
// commit c and end, and should one fail first (a sink's commit), the job
// restarts from c and runs on, which the caller must hear (as Flink's
// stop-with-savepoint fails then); so too when it starts again in a new
// leader's term. It gives up when ctx ends.
func (s *Server) awaitStop(ctx context.Context, c Checkpoint) (string, error) {
	for {
		s.mu.Lock()
		j, failures := s.job, s.failures
		switch {
		case j.Ended != nil && (j.State == "stopped" || j.State == "finished"), j.Ended == nil && j.State == "finished":
			s.mu.Unlock()
			return "", nil
		case j.Ended != nil:
			s.mu.Unlock()
			return fmt.Sprintf("the job %s: %s", j.State, j.Cause), nil
		case j.Restarts > c.restarts:
			s.mu.Unlock()
			cause := ""
			if len(failures) > 0 {
				cause = failures[len(failures)-1].Cause
			}
			return fmt.Sprintf("a task failed before the job ended (%s), and it restarts from its latest checkpoint and runs on: stop it again", cause), nil
		case s.runs > c.runs:
			// A leader that lost its term ends its run with no event; the
			// next term's starts.
			s.mu.Unlock()
			return fmt.Sprintf("the job started again before it ended (a new leader's term), from checkpoint %d, and runs on: stop it again", j.RestoredFrom), nil
		}
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// await returns a channel that hears when savepoint id settles.
func (s *Server) await(id uint64) <-chan Checkpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan Checkpoint, 1)
	if i := slices.IndexFunc(s.checkpoints, func(c Checkpoint) bool { return c.ID == id }); i >= 0 {
		ch <- s.checkpoints[i] // it settled already
		return ch
	}
	if s.settled == nil {
		s.settled = map[uint64]chan Checkpoint{}
	}
	s.settled[id] = ch
	return ch
}

func appendBounded[T any](s []T, v T) []T {
	if len(s) == maxHistory {
		s = slices.Delete(s, 0, 1)
	}
	return append(s, v)
}

// inProgressAndHistory returns the checkpoints in flight (Feeds.Pending),
// newest first, as of now, with tasks each with its tasks' progress (the
// subtasks' BarrierProgress); and the history, read under the same lock
// as the ids it leaves out of the first: a checkpoint completing in
// between is in one of them only (the driver tells its completion before
// it publishes what is in flight).
func (s *Server) inProgressAndHistory(tasks bool) (inProgress, history []Checkpoint) {
	pending := s.feeds.Pending()
	s.mu.Lock()
	now, attempt := s.now(), s.job.Attempt
	history = slices.Clone(s.checkpoints)
	s.mu.Unlock()
	if len(pending) == 0 {
		return nil, history
	}
	var settled []uint64
	for _, c := range history {
		settled = append(settled, c.ID)
	}
	var barriers map[checkpoint.TaskID]runtime.BarrierProgress
	if tasks {
		stats := s.feeds.Subtasks()
		barriers = make(map[checkpoint.TaskID]runtime.BarrierProgress, len(stats))
		for _, st := range stats {
			barriers[st.Task] = st.Barrier
		}
	}
	out := make([]Checkpoint, 0, len(pending))
	for _, p := range slices.Backward(pending) {
		if slices.Contains(settled, uint64(p.ID)) {
			continue
		}
		triggered := p.Triggered
		c := Checkpoint{ID: uint64(p.ID), Status: "in_progress", At: triggered, Triggered: &triggered, Attempt: attempt, Savepoint: p.Savepoint,
			Age: max(now.Sub(triggered), 0).Seconds(), AckedTasks: p.Acknowledged(), TotalTasks: len(p.Tasks)}
		if tasks {
			for _, pt := range p.Tasks {
				c.Progress = append(c.Progress, progress(p, pt, barriers[pt.Task], now))
			}
		}
		out = append(out, c)
	}
	return out, history
}

// progress is task pt's part so far in checkpoint p, from its
// acknowledgement or else from its progress through its newest checkpoint.
func progress(p checkpoint.PendingCheckpoint, pt checkpoint.PendingTask, b runtime.BarrierProgress, now time.Time) TaskProgress {
	tp := TaskProgress{Task: pt.Task.String(), State: "waiting"}
	switch {
	case pt.Acknowledged:
		acked := max(pt.At.Sub(p.Triggered), 0).Seconds()
		tp.State, tp.Acked = "acknowledged", &acked
		return tp
	case b.ID < p.ID:
		return tp // no barrier of p yet (b is of an older checkpoint)
	case b.ID > p.ID:
		// It went on to a newer checkpoint: it is through p's barriers
		// (they come in order) and writes its state. NB: unaligned, a
		// channel may bring the newer one's barrier before another brings
		// p's: the task is still aligning p then, and this says not.
		tp.State = "snapshotting"
		return tp
	}
	tp.State, tp.Barriers, tp.Channels = "aligning", b.Barriers, b.Channels
	if b.Done || b.Channels == 0 {
		// A source snapshots as it takes the trigger: it has no
		// barriers to wait for.
		tp.State = "snapshotting"
	}
	if !b.Since.IsZero() {
		since := b.Since
		tp.AlignSince, tp.Align = &since, max(now.Sub(since), 0).Seconds()
	}
	tp.Alignment = "aligned"
	switch {
	case b.Switched:
		tp.Alignment = "switched"
	case b.Unaligned:
		tp.Alignment = "unaligned"
	}
	return tp
}

// Handler serves the web UI at /, /metrics and the API:
//
//	GET /api/v1/job          the job's state
//	GET /api/v1/jobs         the jobs this process runs (one)
//	GET /api/v1/jobs/{job}   that job's state; 404 for another name
//	GET /api/v1/checkpoints  those in progress, newest first, then the
//	                         last 100 completed or aborted, oldest first
//	GET /api/v1/checkpoints/{id}  one of them with its tasks' timeline,
//	                         or in progress each task's part so far
//	GET /api/v1/failures     the last 100 failures, oldest first
//	GET /api/v1/operators    the operators' counters
//	GET /api/v1/graph        the job graph: vertices and edges
//	GET /api/v1/subtasks     every subtask's counters, rates and time
//	                         ratios (?vertex=ID: one vertex's)
//	GET /api/v1/workers      the cluster's workers: slots, heartbeat,
//	                         memory and GC (cluster false, none, in a
//	                         process that runs the whole job)
//	GET /api/v1/config       the effective configuration
//	POST /api/v1/savepoints  trigger a savepoint (202, its id; the token);
//	                         ?stop=true: the job stops with it (its
//	                         sources emit nothing after it; it commits
//	                         and ends); answers when the job ended
//	                         (409 if it restarted instead)
//	POST /api/v1/cancel      cancel the job (202; the token)
//	GET /api/v1/flamegraph   a CPU flame graph (the token): ?seconds=N
//	                         (1-30, default 5), ?vertex=ID (its tasks'
//	                         samples only), ?worker=NAME (a worker's,
//	                         through the coordinator); 409 while another
//	                         is taken
//	GET /debug/pprof/...     net/http/pprof (the token)
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	s.handleProfiling(mux)
	uiHandler(mux)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /api/v1/job", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, s.jobState()) })
	mux.HandleFunc("GET /api/v1/jobs", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, []Job{s.jobState()}) })
	mux.HandleFunc("GET /api/v1/jobs/{job}", func(w http.ResponseWriter, r *http.Request) {
		j := s.jobState()
		if r.PathValue("job") != j.Name {
			http.Error(w, fmt.Sprintf("no job %q here: this process runs job %q", r.PathValue("job"), j.Name), http.StatusNotFound)
			return
		}
		writeJSON(w, j)
	})
	mux.HandleFunc("GET /api/v1/checkpoints", func(w http.ResponseWriter, _ *http.Request) {
		cs, history := s.inProgressAndHistory(false)
		cs = append(cs, history...)
		for i := range cs {
			cs[i].Tasks = nil
		}
		writeJSON(w, cs)
	})
	mux.HandleFunc("GET /api/v1/checkpoints/summary", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		cs := slices.Clone(s.checkpoints)
		s.mu.Unlock()
		writeJSON(w, summarize(cs))
	})
	mux.HandleFunc("GET /api/v1/checkpoints/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
		if err != nil {
			http.Error(w, fmt.Sprintf("checkpoint id %q: want a number", r.PathValue("id")), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		i := slices.IndexFunc(s.checkpoints, func(c Checkpoint) bool { return c.ID == id })
		var c Checkpoint
		if i >= 0 {
			c = s.checkpoints[i]
		}
		s.mu.Unlock()
		if i < 0 {
			// Both read at once: one completing since is in one of them.
			inProgress, history := s.inProgressAndHistory(true)
			for _, p := range append(history, inProgress...) {
				if p.ID == id {
					c, i = p, 0
					break
				}
			}
		}
		if i < 0 {
			http.Error(w, fmt.Sprintf("checkpoint %d is not among the last %d", id, maxHistory), http.StatusNotFound)
			return
		}
		writeJSON(w, c)
	})
	mux.HandleFunc("GET /api/v1/restores", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		rs := slices.Clone(s.restoreLog)
		s.mu.Unlock()
		writeJSON(w, rs)
	})
	mux.HandleFunc("GET /api/v1/failures", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		fs := slices.Clone(s.failures)
		s.mu.Unlock()
		writeJSON(w, fs)
	})
	mux.HandleFunc("GET /api/v1/operators", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, s.feeds.Operators()) })
	mux.HandleFunc("GET /api/v1/graph", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, s.feeds.Graph) })
	mux.HandleFunc("GET /api/v1/subtasks", func(w http.ResponseWriter, r *http.Request) {
		all := s.subtasks()
		v := r.URL.Query().Get("vertex")
		if v == "" {
			writeJSON(w, all)
			return
		}
		if !slices.ContainsFunc(s.feeds.Graph.Vertices, func(x Vertex) bool { return x.ID == v }) {
			http.Error(w, fmt.Sprintf("vertex %q is not in the job graph (GET /api/v1/graph lists them)", v), http.StatusNotFound)
			return
		}
		writeJSON(w, slices.DeleteFunc(slices.Clone(all), func(x Subtask) bool { return x.Vertex != v }))
	})
	mux.HandleFunc("GET /api/v1/workers", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, s.workers()) })
	mux.HandleFunc("GET /api/v1/config", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, s.feeds.Config) })
	mux.HandleFunc("POST /api/v1/savepoints", s.mutation(func(w http.ResponseWriter, r *http.Request) {
		if s.control.Savepoint == nil {
			http.Error(w, "this process takes no savepoints", http.StatusNotImplemented)
			return
		}
		var stop bool
		if v := r.URL.Query().Get("stop"); v != "" {
			var err error
			if stop, err = strconv.ParseBool(v); err != nil {
				http.Error(w, fmt.Sprintf("stop=%q: want true or false", v), http.StatusBadRequest)
				return
			}
		}
		id, err := s.control.Savepoint(r.Context(), stop)
		if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		if !stop {
			s.mu.Lock()
			attempt := s.job.Attempt
			s.mu.Unlock()
			writeJSONStatus(w, http.StatusAccepted, Checkpoint{ID: id, Status: "triggered", At: s.now(), Attempt: attempt, Savepoint: true})
			return
		}
		// Stop with a savepoint: answer once it completed and the job,
		// which commits it, ended.
		var c Checkpoint
		select {
		case c = <-s.await(id):
		case <-r.Context().Done():
			return
		}
		if c.Status != "completed" {
			http.Error(w, fmt.Sprintf("savepoint %d was aborted (%s): %s", id, c.Reason, c.afterStop), http.StatusConflict)
			return
		}
		why, err := s.awaitStop(r.Context(), c)
		if err != nil {
			return
		}
		if why != "" {
			http.Error(w, fmt.Sprintf("savepoint %d completed (%s), but the job did not stop with it: %s", id, c.Location, why), http.StatusConflict)
			return
		}
		c.Tasks = nil
		writeJSONStatus(w, http.StatusAccepted, c)
	}))
	mux.HandleFunc("POST /api/v1/cancel", s.mutation(func(w http.ResponseWriter, r *http.Request) {
		if s.control.Cancel == nil {
			http.Error(w, "this process cannot cancel the job", http.StatusNotImplemented)
			return
		}
		if err := s.control.Cancel(requester(r)); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		writeJSONStatus(w, http.StatusAccepted, map[string]string{"job": s.job.Name, "state": "cancelling"})
	}))
	return mux
}

// mutation lets h run only for a request that carries the token, while
// the job has not ended (the UI may linger after it: WebLinger).
func (s *Server) mutation(h http.HandlerFunc) http.HandlerFunc {
	return s.withToken("mutations are off: start the job with a token (--web-token) to allow them",
		"a mutation needs the job's token: Authorization: Bearer <token>", func(w http.ResponseWriter, r *http.Request) {
			s.mu.Lock()
			name, state, ended := s.job.Name, s.job.State, s.job.Ended
			s.mu.Unlock()
			if ended != nil {
				http.Error(w, fmt.Sprintf("job %s %s at %s: it takes no more requests", name, state, ended.Format(time.RFC3339)), http.StatusConflict)
				return
			}
			h(w, r)
		})
}

// profiled lets h, which profiles the process, run only for a request that
// carries the token.
func (s *Server) profiled(h http.HandlerFunc) http.HandlerFunc {
	return s.withToken("profiling is off: start the job with a token (--web-token) to allow it",
		"profiling needs the job's token: Authorization: Bearer <token>", endsWithServer(h))
}

// stoppingKey is the key of the context, in a request's (Serve's base
// context), that Serve's stop cancels.
type stoppingKey struct{}

// endsWithServer ends h's request context when Serve's stop begins: a
// profile must not run on (up to 30 s, holding the process's CPU
// profiler) after the job ended, nor hold the stop for Shutdown's bound.
func endsWithServer(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		stopping, ok := r.Context().Value(stoppingKey{}).(context.Context)
		if !ok {
			h(w, r)
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(stopping, cancel)()
		h(w, r.WithContext(ctx))
	}
}

// withToken lets h run only for a request that carries the token; it
// answers off (403) when there is no token, needToken (401) to a request
// without one, and 401, saying so, to a request with another.
func (s *Server) withToken(off, needToken string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.control.Token == "" {
			http.Error(w, off, http.StatusForbidden)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(s.control.Token)) != 1 {
			w.Header().Set("WWW-Authenticate", "Bearer")
			msg := needToken
			if ok {
				msg = "the token given does not match the job's --web-token"
			}
			http.Error(w, msg, http.StatusUnauthorized)
			return
		}
		h(w, r)
	}
}

// writeJSON answers v as JSON; an empty list is [], never null.
func writeJSON(w http.ResponseWriter, v any) { writeJSONStatus(w, http.StatusOK, v) }

// writeJSONStatus answers v as JSON with status code. NB: the header is
// set before the status is written, after which it would be ignored.
func writeJSONStatus(w http.ResponseWriter, code int, v any) {
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Slice && rv.IsNil() {
		v = []struct{}{}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// Serve listens on addr and serves h until stop is called. It returns the
// address it listens on. An address without a host (":8081") is loopback:
// every interface must be asked for ("0.0.0.0:8081"). On loopback it
// serves only requests that name a loopback host (LoopbackHostsOnly).
func Serve(addr string, h http.Handler) (bound string, stop func(), err error) {
	if addr == "" {
		return "", nil, errors.New("web: an address to listen on is required (127.0.0.1:8081, or 127.0.0.1:0 for any port)")
	}
	addr = transport.LoopbackUnlessNamed(addr)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("web: listen on %s: %w", addr, err)
	}
	if ip := ln.Addr().(*net.TCPAddr).IP; ip.IsLoopback() {
		h = LoopbackHostsOnly(h)
	}
	stopping, stopped := context.WithCancel(context.Background())
	base := context.WithValue(context.Background(), stoppingKey{}, stopping)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return base }}
	srv.RegisterOnShutdown(stopped) // profiles end (endsWithServer)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	}, nil
}

// LoopbackHostsOnly refuses requests whose Host is not a loopback name
// (localhost, 127.0.0.0/8, ::1): a page of another site whose name an
// attacker points at 127.0.0.1 (DNS rebinding) must not read the API of a
// server listening on loopback. Browsers send the name they resolved; a
// name that resolves here is never trusted.
func LoopbackHostsOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if hp, _, err := net.SplitHostPort(host); err == nil {
			host = hp
		}
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		if ip := net.ParseIP(host); !(strings.EqualFold(host, "localhost") || ip != nil && ip.IsLoopback()) {
			http.Error(w, fmt.Sprintf("host %q is not this server's: it listens on loopback and answers requests for localhost, 127.0.0.1 or [::1] only (a name pointed at loopback may be DNS rebinding); to serve other names, listen on another address with --web", r.Host), http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Summary is the spread of the completed checkpoints among the last
// maxHistory, as Flink's checkpoint summary: durations, sizes, the longest
// alignment of a task and the longest synchronous part, each in min, mean,
// max and p99.
type Summary struct {
	Completed int    `json:"completed"`
	Aborted   int    `json:"aborted"`
	Duration  Spread `json:"durationSeconds"`
	Size      Spread `json:"sizeBytes"`
	Align     Spread `json:"alignSeconds"`
	SyncPart  Spread `json:"syncSeconds"`
}

// Spread is the min, mean, max and 99th percentile (nearest rank) of a
// quantity; all 0 without values.
type Spread struct {
	Min  float64 `json:"min"`
	Mean float64 `json:"mean"`
	Max  float64 `json:"max"`
	P99  float64 `json:"p99"`
}

func summarize(cs []Checkpoint) Summary {
	var sum Summary
	var dur, size, align, sync []float64
	for _, c := range cs {
		if c.Status != "completed" {
			sum.Aborted++
			continue
		}
		sum.Completed++
		dur, size = append(dur, c.Duration), append(size, float64(c.Size))
		align, sync = append(align, c.AlignSeconds), append(sync, c.SyncPart)
	}
	sum.Duration, sum.Size, sum.Align, sum.SyncPart = spread(dur), spread(size), spread(align), spread(sync)
	return sum
}

func spread(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	slices.Sort(xs)
	var total float64
	for _, x := range xs {
		total += x
	}
	rank := int(math.Ceil(0.99*float64(len(xs)))) - 1
	return Spread{Min: xs[0], Mean: total / float64(len(xs)), Max: xs[len(xs)-1], P99: xs[rank]}
}

// heldBy follows a completed checkpoint's critical path back from the task
// that acknowledged last: through each task's input channel whose barrier
// came last, to the upstream subtask that sent it, up to a source. On each
// hop the barrier waited in the receiver's input, behind the records queued
// ahead of it, from when the sender forwarded it (its snapshot) to when it
// arrived; a source waited from the trigger to its snapshot. The task
// where that wait was longest held the checkpoint: it is the slow one, not
// the tasks downstream that only waited for it. Times are the timeline's:
// a task snapshots at Acked less its Async and Sync parts, its first
// barrier came Align before that.
func heldBy(tasks []TaskTimeline) (string, float64) {
	if len(tasks) == 0 {
		return "", 0
	}
	byTask := make(map[string]TaskTimeline, len(tasks))
	for _, t := range tasks {
		byTask[t.Task] = t
	}
	snap := func(t TaskTimeline) float64 { return t.Acked - t.Async - t.Sync }
	t := slices.MaxFunc(tasks, func(a, b TaskTimeline) int { return cmp.Compare(a.Acked, b.Acked) })
	held, wait := "", -1.0
	for range tasks { // a path visits each task at most once
		first := snap(t) - t.Align
		last, up := -1, ""
		for i, a := range t.Arrivals {
			if a >= 0 && i < len(t.Channels) && (last < 0 || a > t.Arrivals[last]) {
				last, up = i, t.Channels[i]
			}
		}
		u, ok := byTask[up]
		if last < 0 || !ok {
			// A source (or a task whose upstream is not known): it waited
			// from the trigger.
			if first > wait {
				held, wait = t.Task, first
			}
			break
		}
		if w := first + t.Arrivals[last] - snap(u); w > wait {
			held, wait = t.Task, w
		}
		t = u
	}
	return held, max(wait, 0)
}
