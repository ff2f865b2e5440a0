package cluster

import (
	"math"
	goruntime "runtime"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/weirstream/weir/internal/cluster/clusterpb"
)

// processStart is about when this process started: its worker's uptime
// counts from it.
var processStart = time.Now()

// processMetrics are the runtime/metrics a worker's heartbeats carry.
// NB: runtime/metrics reads them without stopping the world, as
// runtime.ReadMemStats would at every heartbeat.
var processMetrics = []string{
	"/memory/classes/heap/objects:bytes",
	"/gc/heap/objects:objects",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/gc/cycles/total:gc-cycles",
	"/cpu/classes/gc/total:cpu-seconds",
	"/sched/pauses/total/gc:seconds",
	"/sched/goroutines:goroutines",
}

// processReader reads this process's ProcessStats; its samples are
// reused, so a reading allocates little. Safe for concurrent use.
type processReader struct {
	mu      sync.Mutex
	samples []metrics.Sample
}

func newProcessReader() *processReader {
	r := &processReader{samples: make([]metrics.Sample, len(processMetrics))}
	for i, name := range processMetrics {
		r.samples[i].Name = name
	}
	return r
}

// read returns the process's readings as of now.
func (r *processReader) read(now time.Time) *clusterpb.ProcessStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	metrics.Read(r.samples)
	u := func(i int) int64 {
		if r.samples[i].Value.Kind() != metrics.KindUint64 {
			return 0 // not in this Go version
		}
		return int64(r.samples[i].Value.Uint64())
	}
	f := func(i int) float64 {
		if r.samples[i].Value.Kind() != metrics.KindFloat64 {
			return 0
		}
		return r.samples[i].Value.Float64()
	}
	var pause float64
	if r.samples[6].Value.Kind() == metrics.KindFloat64Histogram {
		pause = histogramSum(r.samples[6].Value.Float64Histogram())
	}
	return &clusterpb.ProcessStats{
		HeapBytes: u(0), HeapObjects: u(1), MemoryBytes: u(2) - u(3),
		GcCycles: u(4), GcCpuNs: int64(f(5) * 1e9), GcPauseNs: int64(pause * 1e9),
		Goroutines: u(7), CpuNs: int64(processCPU()), GoVersion: goruntime.Version(),
		UptimeNs: int64(now.Sub(processStart)),
	}
}

// histogramSum estimates the sum of the values h counts: each bucket's
// count times its middle (its finite bound where the other is infinite).
func histogramSum(h *metrics.Float64Histogram) float64 {
	var sum float64
	for i, n := range h.Counts {
		if n == 0 {
			continue
		}
		lo, hi := h.Buckets[i], h.Buckets[i+1]
		var mid float64
		switch {
		case math.IsInf(lo, -1) && math.IsInf(hi, 1):
			continue
		case math.IsInf(lo, -1):
			mid = hi
		case math.IsInf(hi, 1):
			mid = lo
		default:
			mid = (lo + hi) / 2
		}
		sum += float64(n) * mid
	}
	return sum
}
