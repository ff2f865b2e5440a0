package wordcount

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/transport"
)

// testCluster is a coordinator and workers of the word count in this
// process, over loopback TCP with mutual TLS.
type testCluster struct {
	t     *testing.T
	dir   string
	input string
	certs string
	addr  string
	// slow: each counting subtask sleeps a millisecond every slow words,
	// to keep the job running (0: never).
	slow    int
	workers map[string]*testWorker
	events  chan weir.JobEvent
	result  chan error
	// ownStorage gives each worker a checkpoint directory of its own.
	ownStorage bool
	// web is the address of the coordinator's API.
	web string
}

type testWorker struct {
	cancel context.CancelFunc
	done   chan error
}

func (c *testCluster) options(role weir.Role, name string) Options {
	o := Options{
		Input: c.input, Output: filepath.Join(c.dir, "out"), Parallelism: 3,
		Checkpoint: weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: filepath.Join(c.dir, "ckpt"), Retained: 2},
		Restart:    weir.FixedDelay{Delay: 10 * time.Millisecond, MaxAttempts: 20},
		Logger:     testLogger(),
		Cluster: weir.ClusterConfig{
			Role: role, Name: name, Certs: c.certs, Join: c.addr, Listen: "127.0.0.1:0", Slots: 1,
			HeartbeatInterval: 100 * time.Millisecond, HeartbeatTimeout: time.Second,
		},
	}
	if c.ownStorage && role == weir.Worker {
		o.Checkpoint.Dir = filepath.Join(c.dir, name, "ckpt")
	}
	if c.slow > 0 {
		o.BeforeCount = Paced(c.slow)
	}
	return o
}

func startCluster(t *testing.T, lines, slow int, workers ...string) *testCluster {
	return startClusterWith(t, &testCluster{slow: slow}, lines, workers...)
}

func startClusterWith(t *testing.T, c *testCluster, lines int, workers ...string) *testCluster {
	base := t.TempDir()
	corpus(t, base, 3, lines, 7)
	c.t, c.dir, c.input, c.certs = t, base, filepath.Join(base, "in-*.txt"), filepath.Join(base, "certs")
	c.workers, c.events, c.result = map[string]*testWorker{}, make(chan weir.JobEvent, 1024), make(chan error, 1)
	if err := transport.WriteCerts(c.certs, append([]string{"coordinator"}, workers...), []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	o := c.options(weir.Coordinator, "coordinator")
	webs := make(chan string, 1)
	o.Web, o.WebToken, o.OnWeb = "127.0.0.1:0", "s3cret", func(addr string) { webs <- addr }
	listening := make(chan string, 1)
	o.Cluster.OnListen = func(addr string) { listening <- addr }
	o.OnEvent = func(e weir.JobEvent) {
		select {
		case c.events <- e:
		default:
		}
	}
	env, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	go func() {
		_, err := env.Execute(ctx)
		c.result <- err
	}()
	select {
	case c.addr = <-listening:
	case err := <-c.result:
		t.Fatalf("coordinator: %v", err)
	}
	c.web = <-webs // served before it listens for workers
	for _, w := range workers {
		c.startWorker(w)
	}
	t.Cleanup(func() {
		for name := range c.workers {
			c.stopWorker(name)
		}
	})
	return c
}

func (c *testCluster) startWorker(name string) {
	env, err := Build(c.options(weir.Worker, name))
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &testWorker{cancel: cancel, done: make(chan error, 1)}
	c.workers[name] = w
	go func() {
		_, err := env.Execute(ctx)
		w.done <- err
	}()
}

// stopWorker stops a worker as a crash would, as far as its peers can tell:
// its connections drop and it answers nothing more.
func (c *testCluster) stopWorker(name string) {
	w := c.workers[name]
	if w == nil {
		return
	}
	delete(c.workers, name)
	w.cancel()
	if err := <-w.done; err != nil {
		c.t.Errorf("worker %s: %v", name, err)
	}
}

func (c *testCluster) wait() {
	c.t.Helper()
	if err := <-c.result; err != nil {
		c.t.Fatalf("coordinator: %v", err)
	}
}

func (c *testCluster) verify() {
	c.t.Helper()
	files, err := filepath.Glob(c.input)
	if err != nil {
		c.t.Fatal(err)
	}
	want, err := Expected(vfs.Default, files)
	if err != nil {
		c.t.Fatal(err)
	}
	rep, err := Verify(vfs.Default, filepath.Join(c.dir, "out"), want, false)
	if err != nil {
		c.t.Fatal(err)
	}
	if !rep.OK() {
		c.t.Fatalf("output: %s", rep)
	}
}

// waitFor reads job events until one satisfies ok.
func (c *testCluster) waitFor(what string, ok func(weir.JobEvent) bool) weir.JobEvent {
	c.t.Helper()
	for {
		select {
		case e := <-c.events:
			if ok(e) {
				return e
			}
		case err := <-c.result:
			c.t.Fatalf("the job ended (%v) before %s", err, what)
		}
	}
}

// TestClusterWordCount runs the word count on three workers of one slot
// each, its subtasks spread across them and its keyed exchange over the
// network, and checks every count exactly once.
func TestClusterWordCount(t *testing.T) {
	c := startCluster(t, 2000, 0, "worker-1", "worker-2", "worker-3")
	c.wait()
	c.verify()
}

// TestClusterSubtasksInTheAPI: the coordinator's API shows the counters of
// the subtasks on the workers, which their heartbeats carry. Then the job
// stops with a savepoint: the workers' sources stop at its barrier, every
// task commits it and ends, and the output so far holds each count once.
func TestClusterSubtasksInTheAPI(t *testing.T) {
	// Counting sleeps a millisecond every 20 words: the job would run for
	// about 8 s, long after the stop.
	c := startCluster(t, 60_000, 20, "worker-1", "worker-2", "worker-3")
	type subtask struct {
		Task      string
		RecordsIn int64
	}
	var got []subtask
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get("http://" + c.web + "/api/v1/subtasks")
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&got)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		counting := 0
		for _, s := range got {
			if s.RecordsIn > 0 {
				counting++
			}
		}
		if len(got) == 6 && counting == 6 { // 3 reading and 3 counting subtasks
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the coordinator's API shows %+v, want 6 subtasks that took records", got)
		}
		select {
		case err := <-c.result:
			t.Fatalf("the job ended (%v) first; the API showed %+v", err, got)
		case <-time.After(50 * time.Millisecond): // polling the API
		}
	}
	t.Logf("%+v", got)
	req, _ := http.NewRequest(http.MethodPost, "http://"+c.web+"/api/v1/savepoints?stop=true", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("stop with a savepoint: %s %s", resp.Status, body)
	}
	c.wait() // the coordinator returns: the job stopped
	files, err := filepath.Glob(c.input)
	if err != nil {
		t.Fatal(err)
	}
	want, err := Expected(vfs.Default, files)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(vfs.Default, filepath.Join(c.dir, "out"), want, false)
	if err != nil || rep.Lines == 0 || rep.Lost == 0 || rep.Duplicated > 0 || rep.Unexpected > 0 {
		t.Fatalf("after stopping with savepoint (%s): %v %v (want some of the output, once)", body, rep, err)
	}
	t.Logf("stopped with a savepoint: %v", rep)
}

// TestClusterLostWorker stops a worker mid-run: the job restarts from its
// latest checkpoint once the worker is back, and the output holds every
// count exactly once.
func TestClusterLostWorker(t *testing.T) {
	c := startCluster(t, 60_000, 200, "worker-1", "worker-2", "worker-3")
	for round := range 2 {
		c.waitFor("a checkpoint", func(e weir.JobEvent) bool { return e.Kind == weir.EventCheckpointCompleted })
		name := fmt.Sprintf("worker-%d", 1+round)
		c.stopWorker(name)
		e := c.waitFor("a restart", func(e weir.JobEvent) bool { return e.Kind == weir.EventRestarting })
		t.Logf("round %d: %s stopped; restarting from checkpoint %d: %v", round, name, e.RestoredFrom, e.Err)
		c.startWorker(name)
	}
	c.wait()
	c.verify()
}

// testLogger logs to stderr when WEIR_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("WEIR_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}

// TestClusterRefusesUnsharedStorage gives each worker a checkpoint
// directory of its own: the coordinator's probe finds that it cannot read
// what a worker wrote, and the job fails at start, saying so, instead of
// at its first restore.
func TestClusterRefusesUnsharedStorage(t *testing.T) {
	c := startClusterWith(t, &testCluster{ownStorage: true}, 100, "worker-1", "worker-2", "worker-3")
	err := <-c.result
	if err == nil || !strings.Contains(err.Error(), "is not shared") {
		t.Fatalf("got %v, want a refusal of storage that is not shared", err)
	}
	t.Log(err)
}

// BenchmarkClusterWordCount runs the benchmark corpus on a coordinator and
// two workers of one slot each in this process (loopback TCP, mutual TLS,
// parallelism 2, checkpoints every second) and reports words per
// CPU-second; weir bench cluster measures the same with a process each.
//
//	go test ./examples/wordcount -run '^$' -bench ClusterWordCount -benchtime 3x -cpuprofile cpu.out
func BenchmarkClusterWordCount(b *testing.B) {
	in := benchCorpus(b)
	var cpu time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		dir := b.TempDir()
		certs := filepath.Join(dir, "certs")
		if err := transport.WriteCerts(certs, []string{"coordinator", "worker-1", "worker-2"}, []string{"127.0.0.1"}, time.Hour); err != nil {
			b.Fatal(err)
		}
		opts := func(role weir.Role, name, join string) Options {
			return Options{Input: filepath.Join(in, "in-*.txt"), Output: filepath.Join(dir, "out"), Parallelism: 2,
				Checkpoint: weir.CheckpointConfig{Interval: time.Second, Dir: filepath.Join(dir, "ckpt")}, Logger: testLogger(),
				Cluster: weir.ClusterConfig{Role: role, Name: name, Join: join, Certs: certs, Listen: "127.0.0.1:0"}}
		}
		listening := make(chan string, 1)
		o := opts(weir.Coordinator, "coordinator", "")
		o.Cluster.OnListen = func(addr string) { listening <- addr }
		coord, err := Build(o)
		if err != nil {
			b.Fatal(err)
		}
		c0 := cpuTime()
		b.StartTimer()
		done := make(chan error, 1)
		go func() {
			_, err := coord.Execute(context.Background())
			done <- err
		}()
		addr := <-listening
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan struct{}, 2)
		for _, name := range []string{"worker-1", "worker-2"} {
			w, err := Build(opts(weir.Worker, name, addr))
			if err != nil {
				b.Fatal(err)
			}
			go func() {
				w.Execute(ctx)
				stopped <- struct{}{}
			}()
		}
		err = <-done
		cancel()
		<-stopped
		<-stopped
		b.StopTimer()
		cpu += cpuTime() - c0
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(benchWords)*float64(b.N)/cpu.Seconds(), "words/cpu-s")
}
