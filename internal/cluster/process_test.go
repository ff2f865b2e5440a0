package cluster

import (
	"bytes"
	"math"
	goruntime "runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/cluster/clusterpb"
)

// TestHeartbeatsCarryTheProcess: a worker's heartbeats carry its memory,
// GC, goroutines, CPU, Go version and uptime over the wire; the
// coordinator keeps the latest per worker and tells them in its status,
// and weir status prints them.
func TestHeartbeatsCarryTheProcess(t *testing.T) {
	c := newCluster(t, Liveness{HeartbeatInterval: 50 * time.Millisecond, Timeout: 5 * time.Second}, "worker-1", "worker-2")
	for _, name := range []string{"worker-1", "worker-2"} {
		stop, _ := c.worker(name, name, c.coord.Addr(), jobGraph)
		defer stop()
	}
	// Wait for a heartbeat of each after a GC cycle, which every reading
	// since counts.
	gcs := self.read(time.Now()).GetGcCycles()
	runtimeGC()
	deadline := time.Now().Add(20 * time.Second)
	var ws []*clusterpb.WorkerStatus
	for {
		ws = c.coord.WorkerStatus()
		heard := 0
		for _, w := range ws {
			if w.GetProcess().GetGcCycles() > gcs {
				heard++
			}
		}
		if heard == 2 && len(ws) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no heartbeat of both workers carried their process after a GC within 20s: %v", ws)
		}
		time.Sleep(10 * time.Millisecond) // polling the coordinator's state
	}
	for _, w := range ws {
		p := w.GetProcess()
		if p.GetHeapBytes() <= 0 || p.GetHeapObjects() <= 0 || p.GetMemoryBytes() < p.GetHeapBytes() || p.GetGoroutines() <= 0 ||
			p.GetGoVersion() == "" || p.GetUptimeNs() <= 0 || p.GetGcPauseNs() <= 0 || p.GetCpuNs() <= 0 {
			t.Errorf("worker %s: process %v", w.GetWorker(), p)
		}
		if w.GetSlots() != 2 || w.GetSlotsUsed() != 0 {
			t.Errorf("worker %s: %d of %d slots used, want 0 of 2 (no attempt runs)", w.GetWorker(), w.GetSlotsUsed(), w.GetSlots())
		}
	}
	var out bytes.Buffer
	PrintStatus(&out, &clusterpb.StatusResponse{Job: "j", State: "running", Workers: ws})
	for _, want := range []string{"HEAP", "GC", "worker-1  2      0     ", " cycles, ", "iB (", "go1."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("weir status prints no %q:\n%s", want, out.String())
		}
	}
}

// TestProcessStatsAreMeasured: the readings are what runtime/metrics
// measures, and the pause histogram's sum is within its buckets.
func TestProcessStatsAreMeasured(t *testing.T) {
	r := newProcessReader()
	before := r.read(time.Now())
	runtimeGC()
	after := r.read(time.Now())
	if after.GetGcCycles() <= before.GetGcCycles() || after.GetGcPauseNs() <= before.GetGcPauseNs() || after.GetGcCpuNs() < before.GetGcCpuNs() {
		t.Fatalf("a GC cycle between two readings: before %v, after %v", before, after)
	}
	h := &metrics.Float64Histogram{Counts: []uint64{1, 2, 3, 1}, Buckets: []float64{math.Inf(-1), 1, 2, 4, math.Inf(1)}}
	if got := histogramSum(h); got != 1*1+2*1.5+3*3+1*4 {
		t.Fatalf("histogramSum = %v", got)
	}
}

func runtimeGC() { goruntime.GC() }

// TestLostWorkersStayListed: a worker declared lost stays in the status,
// marked lost with the reason and no slots used, until a process
// registers under its name again.
func TestLostWorkersStayListed(t *testing.T) {
	c := newCluster(t, Liveness{HeartbeatInterval: 50 * time.Millisecond, Timeout: 500 * time.Millisecond}, "worker-1", "worker-2")
	stop1, _ := c.worker("worker-1", "worker-1", c.coord.Addr(), jobGraph)
	defer stop1()
	stop2, done2 := c.worker("worker-2", "worker-2", c.coord.Addr(), jobGraph)
	c.waitFor("registered worker-1", 1)
	c.waitFor("registered worker-2", 1)
	stop2()
	<-done2
	c.waitFor("lost worker-2", 1)
	ws := c.coord.WorkerStatus()
	if len(ws) != 2 || ws[0].GetWorker() != "worker-1" || ws[0].GetLost() || ws[1].GetWorker() != "worker-2" || !ws[1].GetLost() ||
		!strings.Contains(ws[1].GetLostReason(), "no heartbeat") || ws[1].GetSlotsUsed() != 0 || len(ws[1].GetTasks()) != 0 {
		t.Fatalf("after worker-2 was lost: %v", ws)
	}
	var out bytes.Buffer
	PrintStatus(&out, &clusterpb.StatusResponse{Workers: ws})
	if !strings.Contains(out.String(), "s ago: no heartbeat within the timeout") {
		t.Fatalf("weir status does not say worker-2 was lost:\n%s", out.String())
	}
	stop2, _ = c.worker("worker-2", "worker-2", c.coord.Addr(), jobGraph)
	defer stop2()
	c.waitFor("registered worker-2", 2)
	ws = c.coord.WorkerStatus()
	if len(ws) != 2 || ws[1].GetWorker() != "worker-2" || ws[1].GetLost() {
		t.Fatalf("after worker-2 registered again: %v", ws)
	}
}
