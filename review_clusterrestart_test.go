package weir_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/stdio"
	"github.com/weirstream/weir/internal/transport"
)

// TestClusterWorkerRestartsUnderItsName: worker-1 of a running cluster is
// killed and a new process (a new Environment) joins under its name. All
// along, /metrics scrapes (no duplicate series), the operators' counts on
// the coordinator never go down and never exceed what the worker
// processes counted (the replaced process's counts kept once, not
// twice), and afterwards /api/v1/workers lists worker-1 once, alive, in a
// new session.
func TestClusterWorkerRestartsUnderItsName(t *testing.T) { testWorkerRestart(t, false) }

// TestClusterWorkerEnvironmentExecutesAgain: as
// TestClusterWorkerRestartsUnderItsName, but the worker's process stays:
// its Environment, whose Execute returned when it was stopped, executes
// again under the same name. Its operators' counters are the
// Environment's, from its first Execute on; each RunNode draws a new
// incarnation, so the coordinator keeps the first run's counts as a
// replaced process's and adds the same counts again with the second's.
func TestClusterWorkerEnvironmentExecutesAgain(t *testing.T) { testWorkerRestart(t, true) }

func testWorkerRestart(t *testing.T, reuse bool) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if err := transport.WriteCerts(certs, []string{"coordinator", "worker-1", "worker-2"}, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	warnings := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	var mu sync.Mutex
	var workerEnvs []*weir.Environment
	envs := map[string]*weir.Environment{}
	execute := func(ctx context.Context, cc weir.ClusterConfig, web string, onWeb func(string)) {
		defer wg.Done()
		cc.Certs = certs
		cc.HeartbeatInterval, cc.HeartbeatTimeout = 100*time.Millisecond, 3*time.Second
		mu.Lock()
		env := envs[cc.Name]
		mu.Unlock()
		if env == nil || !reuse || cc.Role != weir.Worker {
			env = weir.New(weir.Config{Job: "clustered", Parallelism: 2, Cluster: cc, Web: web, OnWeb: onWeb, Logger: warnings,
				Checkpoint: weir.CheckpointConfig{Dir: filepath.Join(dir, "ckpt"), Interval: 200 * time.Millisecond}})
			src, err := newRateLimited(2000, 0)
			if err != nil {
				t.Error(err)
				return
			}
			sums := weir.Reduce(weir.KeyBy(weir.Source(env, "numbers", src), func(i int64) int64 { return i % 8 }), "sum", func(a, b int64) int64 { return a + b })
			weir.Sink(sums, "discard", stdio.Print(io.Discard, func(dst []byte, i int64) []byte { return dst }))
			// Published once built: the test reads its Metrics meanwhile.
			if cc.Role == weir.Worker {
				mu.Lock()
				workerEnvs = append(workerEnvs, env)
				envs[cc.Name] = env
				mu.Unlock()
			}
		}
		if _, err := env.Execute(ctx); err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
			t.Logf("%s ended: %v", cc.Role, err)
		}
	}
	listening, webAt := make(chan string, 1), make(chan string, 1)
	wg.Add(1)
	go execute(ctx, weir.ClusterConfig{Role: weir.Coordinator, Listen: "127.0.0.1:0", OnListen: func(addr string) { listening <- addr }},
		"127.0.0.1:0", func(addr string) { webAt <- addr })
	addr, base := <-listening, "http://"+<-webAt
	worker := func(name string) context.CancelFunc {
		wctx, cancel := context.WithCancel(ctx)
		wg.Add(1)
		go execute(wctx, weir.ClusterConfig{Role: weir.Worker, Join: addr, Name: name, Listen: "127.0.0.1:0", Slots: 1}, "", nil)
		return cancel
	}
	stop1 := worker("worker-1")
	worker("worker-2")

	last := map[string]int64{}
	check := func() {
		t.Helper()
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics: %s %s", resp.Status, body)
		}
		var ops []struct {
			UID     string
			Records int64
		}
		getJSON(t, base+"/api/v1/operators", &ops)
		// What every worker process counted, read after the coordinator's
		// sums: those lag by a heartbeat, never lead.
		truth := map[string]int64{}
		mu.Lock()
		for _, e := range workerEnvs {
			for _, m := range e.Metrics() {
				truth[m.UID] += m.Records
			}
		}
		mu.Unlock()
		for _, o := range ops {
			if o.Records < last[o.UID] {
				t.Fatalf("operator %s went down from %d to %d records", o.UID, last[o.UID], o.Records)
			}
			if o.Records > truth[o.UID] {
				t.Fatalf("operator %s: the coordinator counts %d records, the worker processes %d in all", o.UID, o.Records, truth[o.UID])
			}
			last[o.UID] = o.Records
		}
	}
	type apiW struct {
		Name    string
		State   string
		Session uint64
	}
	workers := func() []apiW {
		var ws struct{ Workers []apiW }
		getJSON(t, base+"/api/v1/workers", &ws)
		return ws.Workers
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for !ok() {
			check()
			if time.Now().After(deadline) {
				t.Fatalf("not within a minute: %s; workers %+v", what, workers())
			}
			time.Sleep(50 * time.Millisecond) // polling what the coordinator serves
		}
		check()
	}
	var session1 uint64
	waitFor("both workers alive and the sums counting", func() bool {
		ws := workers()
		alive := 0
		for _, w := range ws {
			if w.State == "alive" {
				alive++
			}
			if w.Name == "worker-1" {
				session1 = w.Session
			}
		}
		return alive == 2 && last["sum"] > 1000
	})
	stop1()
	waitFor("worker-1 lost", func() bool {
		for _, w := range workers() {
			if w.Name == "worker-1" && w.State == "lost" {
				return true
			}
		}
		return false
	})
	before := last["sum"]
	worker("worker-1")
	waitFor("worker-1 back, and the sums counting again", func() bool {
		n := 0
		for _, w := range workers() {
			if w.Name == "worker-1" {
				n++
				if w.State != "alive" || w.Session == session1 {
					return false
				}
			}
		}
		if n > 1 {
			t.Fatalf("worker-1 listed %d times: %+v", n, workers())
		}
		return n == 1 && last["sum"] > before+2000
	})
	if ws := workers(); len(ws) != 2 {
		t.Fatalf("workers after the restart: %+v, want worker-1 and worker-2", ws)
	}
}
