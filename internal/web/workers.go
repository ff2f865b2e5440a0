package web

import (
	"github.com/prometheus/client_golang/prometheus"
)

// oneProcess is the note of /api/v1/workers in a process that runs the
// whole job.
const oneProcess = "this process runs the whole job: it has no workers (a cluster's coordinator lists them)"

// workers returns the cluster's workers, or none and a note.
func (s *Server) workers() Workers {
	if s.feeds.Workers == nil {
		return Workers{Note: oneProcess, Workers: []Worker{}}
	}
	ws := s.feeds.Workers()
	if ws == nil {
		ws = []Worker{}
	}
	return Workers{Cluster: true, Workers: ws}
}

var (
	workerLabels    = []string{"job", "worker"}
	workerSlotsDesc = prometheus.NewDesc("weir_worker_slots", "A worker's slots: used by the running attempt's tasks, or free.", []string{"job", "worker", "state"}, nil)
	workerAgeDesc   = prometheus.NewDesc("weir_worker_heartbeat_age_seconds", "Time since a worker's last heartbeat (or registration).", workerLabels, nil)
	workerSuspDesc  = prometheus.NewDesc("weir_worker_suspect", "1 while a worker is suspect (a call or a data connection to it failed; it gets no tasks until its next heartbeat), else 0.", workerLabels, nil)
	workerHeapDesc  = prometheus.NewDesc("weir_worker_heap_bytes", "A worker process's live and not yet swept heap objects, as its last heartbeat said.", workerLabels, nil)
	workerObjDesc   = prometheus.NewDesc("weir_worker_heap_objects", "A worker process's heap objects, as its last heartbeat said.", workerLabels, nil)
	workerMemDesc   = prometheus.NewDesc("weir_worker_memory_bytes", "The memory a worker process's Go runtime holds from the system, as its last heartbeat said.", workerLabels, nil)
	workerGCDesc    = prometheus.NewDesc("weir_worker_gc_cycles_total", "Garbage collections a worker process completed, as its last heartbeat said.", workerLabels, nil)
	workerGCCPUDesc = prometheus.NewDesc("weir_worker_gc_cpu_seconds_total", "CPU time a worker process's garbage collections took (the runtime's estimate), as its last heartbeat said.", workerLabels, nil)
	workerPauseDesc = prometheus.NewDesc("weir_worker_gc_pause_seconds_total", "Time a worker process's goroutines stood stopped for garbage collection (estimated from the runtime's pause histogram), as its last heartbeat said.", workerLabels, nil)
	workerGorDesc   = prometheus.NewDesc("weir_worker_goroutines", "A worker process's goroutines, as its last heartbeat said.", workerLabels, nil)
	workerCPUDesc   = prometheus.NewDesc("weir_worker_cpu_seconds_total", "CPU time a worker process used, user and system, as its last heartbeat said.", workerLabels, nil)
	workerUpDesc    = prometheus.NewDesc("weir_worker_uptime_seconds", "Time since a worker process started, as its last heartbeat said.", workerLabels, nil)
)

// workerCollector exports the cluster's workers at each scrape; nothing
// in a process that runs the whole job.
type workerCollector struct {
	s   *Server
	job string
}

func (c workerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{workerSlotsDesc, workerAgeDesc, workerSuspDesc, workerHeapDesc, workerObjDesc, workerMemDesc, workerGCDesc, workerGCCPUDesc, workerPauseDesc, workerGorDesc, workerCPUDesc, workerUpDesc} {
		ch <- d
	}
}

func (c workerCollector) Collect(ch chan<- prometheus.Metric) {
	if c.s.feeds.Workers == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	for _, w := range c.s.feeds.Workers() {
		if w.State == "lost" {
			continue // its process is gone: so are its series
		}
		gauge(workerSlotsDesc, float64(w.SlotsUsed), c.job, w.Name, "used")
		gauge(workerSlotsDesc, float64(w.SlotsFree), c.job, w.Name, "free")
		gauge(workerAgeDesc, w.HeartbeatAge, c.job, w.Name)
		suspect := 0.0
		if w.State == "suspect" {
			suspect = 1
		}
		gauge(workerSuspDesc, suspect, c.job, w.Name)
		p := w.Process
		if p == nil {
			continue
		}
		gauge(workerHeapDesc, float64(p.HeapBytes), c.job, w.Name)
		gauge(workerObjDesc, float64(p.HeapObjects), c.job, w.Name)
		gauge(workerMemDesc, float64(p.MemoryBytes), c.job, w.Name)
		counter(workerGCDesc, float64(p.GCCycles), c.job, w.Name)
		counter(workerGCCPUDesc, p.GCCPUSeconds, c.job, w.Name)
		counter(workerPauseDesc, p.GCPauseSeconds, c.job, w.Name)
		gauge(workerGorDesc, float64(p.Goroutines), c.job, w.Name)
		counter(workerCPUDesc, p.CPUSeconds, c.job, w.Name)
		gauge(workerUpDesc, p.UptimeSeconds, c.job, w.Name)
	}
}
