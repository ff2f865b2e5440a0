package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"slices"
	"strconv"
	"time"

	"github.com/weirstream/weir/internal/profiling"
)

// Profiling: net/http/pprof's handlers under /debug/pprof/, and CPU flame
// graphs of this process or, in a cluster, of a worker (through the
// coordinator's control plane), at GET /api/v1/flamegraph. Both need the
// job's token, as mutations do: a profile shows the code and costs CPU.

// handleProfiling adds the profiling endpoints to mux.
func (s *Server) handleProfiling(mux *http.ServeMux) {
	// NB: net/http/pprof's init registers the same handlers on
	// http.DefaultServeMux, which no server of Weir's serves.
	// NB: pprof's handlers take any ?seconds= (profile, trace, and the
	// delta of heap, allocs, block...): bounded as the flame graph's.
	mux.HandleFunc("GET /debug/pprof/", s.profiled(boundedSeconds(pprof.Index)))
	mux.HandleFunc("GET /debug/pprof/cmdline", s.profiled(pprof.Cmdline))
	mux.HandleFunc("GET /debug/pprof/profile", s.profiled(cpuProfile))
	mux.HandleFunc("GET /debug/pprof/symbol", s.profiled(pprof.Symbol))
	mux.HandleFunc("POST /debug/pprof/symbol", s.profiled(pprof.Symbol))
	mux.HandleFunc("GET /debug/pprof/trace", s.profiled(boundedSeconds(pprof.Trace)))
	mux.HandleFunc("GET /api/v1/flamegraph", s.profiled(s.flameGraph))
}

// boundedSeconds lets h run only for a request whose ?seconds=, if any,
// is within the flame graph's bounds (at most profiling.MaxDuration).
func boundedSeconds(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if v := r.URL.Query().Get("seconds"); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f > 0 && f <= profiling.MaxDuration.Seconds()) {
				http.Error(w, fmt.Sprintf("seconds=%q: want more than 0 and at most %d", v, int(profiling.MaxDuration.Seconds())), http.StatusBadRequest)
				return
			}
		}
		h(w, r)
	}
}

// profileSeconds reads a profile's ?seconds= (def without one); it
// answers 400 and says false when they are no whole number within
// profiling's bounds.
func profileSeconds(w http.ResponseWriter, r *http.Request, def time.Duration) (time.Duration, bool) {
	v := r.URL.Query().Get("seconds")
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || profiling.CheckDuration(time.Duration(n)*time.Second) != nil {
		http.Error(w, fmt.Sprintf("seconds=%q: want a whole number of seconds from %d to %d (default %d)", v,
			int(profiling.MinDuration.Seconds()), int(profiling.MaxDuration.Seconds()), int(def.Seconds())), http.StatusBadRequest)
		return 0, false
	}
	return time.Duration(n) * time.Second, true
}

// cpuProfile serves /debug/pprof/profile as net/http/pprof does (30 s by
// default, pprof's format), through profiling.CPU: one taken while a
// flame graph's is (or the reverse) answers 409, not pprof's 500.
func cpuProfile(w http.ResponseWriter, r *http.Request) {
	d, ok := profileSeconds(w, r, profiling.MaxDuration)
	if !ok {
		return
	}
	data, err := profiling.CPU(r.Context(), d)
	switch {
	case errors.Is(err, profiling.ErrBusy):
		http.Error(w, err.Error(), http.StatusConflict)
		return
	case err != nil:
		http.Error(w, fmt.Sprintf("profile: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="profile"`)
	w.Write(data)
}

// FlameGraph is what GET /api/v1/flamegraph answers: a CPU profile as a
// tree of frames, of the process named (Worker; "" this one).
type FlameGraph struct {
	profiling.FlameGraph
	Worker string `json:"worker,omitempty"`
}

// flameGraph serves GET /api/v1/flamegraph?seconds=N&vertex=V&worker=W.
func (s *Server) flameGraph(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d, ok := profileSeconds(w, r, profiling.DefaultDuration)
	if !ok {
		return
	}
	vertex := q.Get("vertex")
	if vertex != "" && !slices.ContainsFunc(s.feeds.Graph.Vertices, func(x Vertex) bool { return x.ID == vertex }) {
		http.Error(w, fmt.Sprintf("vertex=%q is not in the job graph: leave it out for every vertex, or name one that GET /api/v1/graph lists", vertex), http.StatusBadRequest)
		return
	}
	worker := q.Get("worker")
	if worker != "" {
		if s.feeds.Workers == nil || s.control.Profile == nil {
			http.Error(w, fmt.Sprintf("worker=%q: this process has no workers (it runs the job alone); leave worker out to profile it", worker), http.StatusBadRequest)
			return
		}
		if !slices.ContainsFunc(s.feeds.Workers(), func(x Worker) bool { return x.Name == worker && x.State != "lost" }) {
			http.Error(w, fmt.Sprintf("worker=%q is not a live worker of this job (GET /api/v1/workers lists them)", worker), http.StatusNotFound)
			return
		}
	}
	select {
	case s.profiling <- struct{}{}:
		defer func() { <-s.profiling }()
	default:
		http.Error(w, "a flame graph is being profiled already (one at a time); try again when it is done", http.StatusConflict)
		return
	}
	// NB: a client that goes away ends the profile (r.Context()); the
	// bound is the profile's, plus time to reach a worker.
	ctx, cancel := context.WithTimeout(r.Context(), d+profileSlack)
	defer cancel()
	var data []byte
	var err error
	if worker == "" {
		data, err = profiling.CPU(ctx, d)
	} else {
		data, err = s.control.Profile(ctx, worker, d)
	}
	switch {
	case errors.Is(err, profiling.ErrBusy):
		http.Error(w, err.Error(), http.StatusConflict)
		return
	case err != nil && worker == "":
		http.Error(w, fmt.Sprintf("profile %s: %v", processName(worker), err), http.StatusInternalServerError)
		return
	case err != nil:
		http.Error(w, fmt.Sprintf("profile %s: %v", processName(worker), err), http.StatusBadGateway)
		return
	}
	g, err := profiling.Tree(data, vertex)
	if err != nil {
		http.Error(w, fmt.Sprintf("profile %s: %v", processName(worker), err), http.StatusBadGateway)
		return
	}
	writeJSON(w, FlameGraph{FlameGraph: *g, Worker: worker})
}

// profileSlack is how much longer than its duration a flame graph's
// profile may take: reaching a worker and sending the profile back.
const profileSlack = 10 * time.Second

func processName(worker string) string {
	if worker == "" {
		return "this process"
	}
	return "worker " + worker
}
