package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/cluster/clusterpb/clusterpbconnect"
	"github.com/weirstream/weir/internal/runtime"
)

// maxHistory is how many checkpoints Status tells of.
const maxHistory = 20

// jobStatus is what the coordinator knows of its job's progress, from the
// driver's events.
type jobStatus struct {
	mu           sync.Mutex
	state        string
	attempt      int
	restoredFrom uint64
	lastFailure  string
	checkpoints  []*clusterpb.CheckpointStatus
}

// Observe records a job event for Status, and the end of the job, which
// the workers are told (see Close); the driver calls it (Spec.OnEvent).
func (c *Coordinator) Observe(e runtime.JobEvent) {
	if e.Kind == runtime.EventFinished {
		c.jobFinished(ending(e))
	}
	s := &c.status
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempt = e.Attempt
	now := c.cfg.Now().UnixMilli()
	switch e.Kind {
	case runtime.EventRunning:
		s.state, s.restoredFrom = "running", uint64(e.RestoredFrom)
	case runtime.EventRestarting:
		s.state, s.lastFailure = "restarting", e.Err.Error()
	case runtime.EventFinished:
		s.state = ending(e)
	case runtime.EventCheckpointCompleted:
		s.add(&clusterpb.CheckpointStatus{Id: uint64(e.ID), State: "completed", DurationMs: e.Duration.Milliseconds(), Bytes: e.Size, Slowest: e.Slowest.String(), AtUnixMs: now})
	case runtime.EventCheckpointAborted:
		cs := &clusterpb.CheckpointStatus{Id: uint64(e.ID), State: "aborted", Reason: e.Reason.String(), AtUnixMs: now}
		if e.Err != nil {
			cs.Reason += ": " + e.Err.Error()
		}
		s.add(cs)
	}
}

// ending says how a job that ended (runtime.EventFinished) did: its input
// done, or stopped with a savepoint.
func ending(e runtime.JobEvent) string {
	if e.ID != 0 {
		return fmt.Sprintf("stopped with savepoint %d", e.ID)
	}
	return "finished"
}

func (s *jobStatus) add(cs *clusterpb.CheckpointStatus) {
	if len(s.checkpoints) == maxHistory {
		s.checkpoints = slices.Delete(s.checkpoints, 0, 1)
	}
	s.checkpoints = append(s.checkpoints, cs)
}

// Status implements the control plane's Status.
func (c *Coordinator) Status(ctx context.Context, _ *connect.Request[clusterpb.StatusRequest]) (*connect.Response[clusterpb.StatusResponse], error) {
	if err := checkAnyRole(ctx, "read the job's status"); err != nil {
		return nil, err
	}
	s := &c.status
	s.mu.Lock()
	resp := &clusterpb.StatusResponse{Job: c.cfg.Graph.Job, State: s.state, Attempt: uint64(s.attempt), RestoredFrom: s.restoredFrom, LastFailure: s.lastFailure,
		Checkpoints: slices.Clone(s.checkpoints)}
	s.mu.Unlock()
	if resp.State == "" {
		resp.State = "waiting for slots"
	}
	resp.Workers = c.WorkerStatus()
	return connect.NewResponse(resp), nil
}

// WorkerStatus returns the registered workers as they stand now, by name:
// suspect or not, their heartbeat's age, the tasks of the running attempt
// placed on them and the slots those take, and what their last heartbeat
// said of their process; and the workers declared lost (of the last
// maxGone) under whose name no process registered since.
func (c *Coordinator) WorkerStatus() []*clusterpb.WorkerStatus {
	c.mu.Lock()
	members := c.members.All()
	ex := c.exec
	gone := slices.Clone(c.gone)
	c.mu.Unlock()
	tasks := map[string][]string{}
	// A slot holds subtask i of every vertex (Place): a worker's tasks
	// take as many slots as they have subtask numbers.
	slots := map[string]map[int]bool{}
	if ex != nil {
		for id, w := range ex.place {
			tasks[w] = append(tasks[w], id.String())
			if slots[w] == nil {
				slots[w] = map[int]bool{}
			}
			slots[w][id.Subtask] = true
		}
	}
	now := c.cfg.Now()
	var out []*clusterpb.WorkerStatus
	for _, m := range members {
		ts := tasks[m.Name]
		slices.Sort(ts)
		out = append(out, &clusterpb.WorkerStatus{Worker: m.Name, Slots: int32(m.Slots), DataAddress: m.DataAddress, Session: m.Session,
			Suspect: m.Suspect, SinceHeartbeatMs: now.Sub(m.Last).Milliseconds(), Tasks: ts, SlotsUsed: int32(len(slots[m.Name])), Process: proto.CloneOf(m.Process)})
	}
	// The lost workers whose name no session holds now, the newest
	// loss of each name.
	listed := map[string]bool{}
	for _, m := range members {
		listed[m.Name] = true
	}
	for _, g := range slices.Backward(gone) {
		if listed[g.Name] {
			continue
		}
		listed[g.Name] = true
		out = append(out, &clusterpb.WorkerStatus{Worker: g.Name, Slots: int32(g.Slots), DataAddress: g.DataAddress, Session: g.Session,
			Lost: true, LostReason: g.why, SinceLostMs: now.Sub(g.at).Milliseconds()})
	}
	slices.SortFunc(out, func(a, b *clusterpb.WorkerStatus) int { return strings.Compare(a.GetWorker(), b.GetWorker()) })
	return out
}

// Liveness is the heartbeat interval and timeout the coordinator tells
// its workers, defaults filled in.
func (c *Coordinator) Liveness() Liveness { return c.cfg.Liveness }

// FetchStatus asks the coordinator at addr how its job stands.
func FetchStatus(ctx context.Context, addr string, tc *tls.Config) (*clusterpb.StatusResponse, error) {
	tr := &http.Transport{TLSClientConfig: toCoordinator(tc), ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	client := clusterpbconnect.NewCoordinatorServiceClient(&http.Client{Transport: tr}, "https://"+addr, rpcOptions)
	resp, err := client.Status(ctx, connect.NewRequest(&clusterpb.StatusRequest{}))
	if err != nil {
		return nil, fmt.Errorf("status of the coordinator at %s: %w", addr, err)
	}
	return resp.Msg, nil
}

// PrintStatus writes a job's status for people.
func PrintStatus(w io.Writer, st *clusterpb.StatusResponse) {
	fmt.Fprintf(w, "job %s: %s, attempt %d", st.GetJob(), st.GetState(), st.GetAttempt())
	if id := st.GetRestoredFrom(); id != 0 {
		fmt.Fprintf(w, " (restored from checkpoint %d)", id)
	}
	fmt.Fprintln(w)
	if f := st.GetLastFailure(); f != "" {
		fmt.Fprintf(w, "last failure: %s\n", f)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tSLOTS\tUSED\tADDRESS\tSESSION\tHEARTBEAT\tHEAP\tMEMORY\tGC\tGOROUTINES\tCPU\tUP\tTASKS")
	for _, ws := range st.GetWorkers() {
		hb := fmt.Sprintf("%.1fs ago", float64(ws.GetSinceHeartbeatMs())/1000)
		if ws.GetSuspect() {
			hb += " (suspect)"
		}
		if ws.GetLost() {
			hb = fmt.Sprintf("lost %.1fs ago: %s", float64(ws.GetSinceLostMs())/1000, ws.GetLostReason())
		}
		tasks := strings.Join(ws.GetTasks(), " ")
		if tasks == "" {
			tasks = "-"
		}
		heap, mem, gc, gr, cpu, up := "-", "-", "-", "-", "-", "-"
		if p := ws.GetProcess(); p != nil {
			heap = fmt.Sprintf("%s (%d objects)", sizeOf(p.GetHeapBytes()), p.GetHeapObjects())
			mem = sizeOf(p.GetMemoryBytes())
			gc = fmt.Sprintf("%d cycles, %v paused, %v CPU", p.GetGcCycles(), time.Duration(p.GetGcPauseNs()).Round(time.Microsecond), time.Duration(p.GetGcCpuNs()).Round(time.Millisecond))
			gr = fmt.Sprint(p.GetGoroutines())
			cpu = time.Duration(p.GetCpuNs()).Round(time.Millisecond).String()
			up = roughly(time.Duration(p.GetUptimeNs())) + " " + p.GetGoVersion()
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ws.GetWorker(), ws.GetSlots(), ws.GetSlotsUsed(), ws.GetDataAddress(), ws.GetSession(), hb,
			heap, mem, gc, gr, cpu, up, tasks)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECKPOINT\tSTATE\tAT\tDURATION\tBYTES\tSLOWEST TASK / REASON")
	for _, c := range st.GetCheckpoints() {
		at := time.UnixMilli(c.GetAtUnixMs()).Format("15:04:05.000")
		what := c.GetSlowest()
		if c.GetState() != "completed" {
			what = c.GetReason()
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%dms\t%d\t%s\n", c.GetId(), c.GetState(), at, c.GetDurationMs(), c.GetBytes(), what)
	}
	tw.Flush()
}

// sizeOf says n bytes in binary units (KiB, MiB, GiB).
func sizeOf(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, suffix := float64(n)/unit, "KiB"
	for _, s := range []string{"MiB", "GiB", "TiB"} {
		if v < unit {
			break
		}
		v, suffix = v/unit, s
	}
	return fmt.Sprintf("%.1f %s", v, suffix)
}

// roughly says d to a tenth of a second below a minute, to a second above.
func roughly(d time.Duration) string {
	if d < time.Minute {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
