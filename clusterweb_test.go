package weir_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/stdio"
	"github.com/weirstream/weir/internal/browsertest"
	"github.com/weirstream/weir/internal/transport"
)

// webCluster runs a job on a cluster in this process: a coordinator that
// serves the web UI and API (with token, if set) and two workers of one
// slot each, worker-1 and worker-2, at parallelism 2, so that subtask i of
// every vertex runs on worker i+1 and a hash edge crosses between them.
type webCluster struct {
	job   string
	build func(env *weir.Environment) error
	token string
	// checkpoints is the checkpoint interval; heartbeat and timeout the
	// workers' liveness settings.
	checkpoints, heartbeat, timeout time.Duration
}

// start runs the cluster until the test ends, and returns the web
// server's address and a function that stops a worker. Every process
// must end cancelled when the test ends.
func (c webCluster) start(t *testing.T) (string, func(name string)) {
	t.Helper()
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if err := transport.WriteCerts(certs, []string{"coordinator", "worker-1", "worker-2"}, []string{"127.0.0.1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 3)
	warnings := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	execute := func(ctx context.Context, cc weir.ClusterConfig, web string, onWeb func(string)) {
		cc.Certs = certs
		cc.HeartbeatInterval, cc.HeartbeatTimeout = c.heartbeat, c.timeout
		env := weir.New(weir.Config{Job: c.job, Parallelism: 2, Cluster: cc, Web: web, WebToken: c.token, OnWeb: onWeb, Logger: warnings,
			Checkpoint: weir.CheckpointConfig{Dir: filepath.Join(dir, "ckpt"), Interval: c.checkpoints}})
		err := c.build(env)
		if err == nil {
			_, err = env.Execute(ctx)
		}
		if err != nil && cc.Name != "" {
			err = fmt.Errorf("%s: %w", cc.Name, err)
		}
		done <- err
	}
	listening, webAt := make(chan string, 1), make(chan string, 1)
	go execute(ctx, weir.ClusterConfig{Role: weir.Coordinator, Listen: "127.0.0.1:0", OnListen: func(addr string) { listening <- addr }},
		"127.0.0.1:0", func(addr string) { webAt <- addr })
	running := 1
	t.Cleanup(func() {
		cancel()
		deadline := time.After(30 * time.Second)
		for range running {
			select {
			case err := <-done:
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("a process of the cluster ended with %v", err)
				}
			case <-deadline:
				t.Error("the cluster's processes did not end within 30s of the cancel")
				return
			}
		}
	})
	var web, addr string
	for web == "" || addr == "" {
		select {
		case web = <-webAt:
		case addr = <-listening:
		case err := <-done:
			running--
			t.Fatalf("the coordinator ended (%v) before it listened and served", err)
		}
	}
	stop := map[string]context.CancelFunc{}
	for _, name := range []string{"worker-1", "worker-2"} {
		running++
		wctx, cancel := context.WithCancel(ctx)
		stop[name] = cancel
		go execute(wctx, weir.ClusterConfig{Role: weir.Worker, Join: addr, Name: name, Listen: "127.0.0.1:0", Slots: 1}, "", nil)
	}
	return web, func(name string) { stop[name]() }
}

// clusterWithWeb runs an unbounded job on a webCluster: numbers (5,000
// records a second) → by key → sum → discard. A worker is lost 5 s after
// its last heartbeat.
func clusterWithWeb(t *testing.T) (string, func(name string)) {
	t.Helper()
	return webCluster{job: "clustered", checkpoints: 200 * time.Millisecond, heartbeat: 100 * time.Millisecond, timeout: 5 * time.Second,
		build: func(env *weir.Environment) error {
			src, err := newRateLimited(5000, 0)
			if err != nil {
				return err
			}
			sums := weir.Reduce(weir.KeyBy(weir.Source(env, "numbers", src), func(i int64) int64 { return i % 8 }), "sum", func(a, b int64) int64 { return a + b })
			weir.Sink(sums, "discard", stdio.Print(io.Discard, func(dst []byte, i int64) []byte { return dst }))
			return nil
		}}.start(t)
}

type apiWorkers struct {
	Cluster bool
	Note    string
	Workers []struct {
		Name      string
		State     string
		Slots     int
		SlotsUsed int
		SlotsFree int
		Tasks     []string
		Process   *struct{ HeapBytes, GCCycles, Goroutines int64 }
	}
}

type apiSubtask struct {
	Task              string
	Vertex            string
	RecordsIn         int64
	BytesIn, BytesOut int64
}

// TestClusterWebShowsWorkersAndBytes: the coordinator's API lists both
// workers with their slots, tasks and heap, exports them as metrics, and
// says the bytes each subtask's channels carried between the workers:
// those the senders sent are about those the receivers received.
func TestClusterWebShowsWorkersAndBytes(t *testing.T) {
	web, _ := clusterWithWeb(t)
	base := "http://" + web
	deadline := time.Now().Add(time.Minute)
	var ws apiWorkers
	for {
		getJSON(t, base+"/api/v1/workers", &ws)
		ready := 0
		for _, w := range ws.Workers {
			if w.Process != nil && w.Process.HeapBytes > 0 && w.Process.Goroutines > 0 && w.SlotsUsed == 1 && w.SlotsFree == 0 && w.State == "alive" && len(w.Tasks) == 2 {
				ready++
			}
		}
		if ws.Cluster && ready == 2 && len(ws.Workers) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API did not list two running workers with their heap within a minute: %+v", ws)
		}
		time.Sleep(50 * time.Millisecond) // polling what the coordinator serves
	}
	metrics := func(wants ...string) {
		t.Helper()
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		m, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range wants {
			if !strings.Contains(string(m), want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	}
	metrics(`weir_worker_heap_bytes{job="clustered",worker="worker-1"} `, `weir_worker_slots{job="clustered",state="used",worker="worker-2"} 1`,
		`weir_worker_heartbeat_age_seconds{job="clustered",worker="worker-1"} `)
	// The bytes: only the hash edge's channels between the workers carry
	// any (numbers#i sends, sum#j receives); the sums are chained with the
	// discarding sink. The counters of the two
	// workers are read at their own heartbeats, and frames are in flight:
	// the sums agree once the totals dwarf what a heartbeat interval moves.
	var last []apiSubtask
	for {
		getJSON(t, base+"/api/v1/subtasks", &last)
		var in, out int64
		byVertex := map[string][2]int64{}
		for _, s := range last {
			in, out = in+s.BytesIn, out+s.BytesOut
			b := byVertex[s.Vertex]
			byVertex[s.Vertex] = [2]int64{b[0] + s.BytesIn, b[1] + s.BytesOut}
		}
		if out > 256<<10 && in > 0 && math.Abs(float64(out-in)) < 0.05*float64(out) {
			if n := byVertex["numbers"]; n[0] != 0 || n[1] != out {
				t.Fatalf("the sources received %d bytes and sent %d of the %d sent: %+v", n[0], n[1], out, last)
			}
			if s := byVertex["sum"]; s[1] != 0 || s[0] != in {
				t.Fatalf("the sums sent %d bytes and received %d of the %d received: %+v", s[1], s[0], in, last)
			}
			t.Logf("the sources sent %d bytes over the network, the sums received %d", out, in)
			metrics(`weir_subtask_bytes_out_total{job="clustered",subtask="0",vertex="numbers"} `, `weir_subtask_bytes_in_total{job="clustered",subtask="1",vertex="sum"} `)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bytes out and in did not come within 5%% of each other above 256 KiB within a minute: %+v", last)
		}
		time.Sleep(50 * time.Millisecond) // polling what the coordinator serves
	}
}

// TestWebBytesAreZeroInOneProcess: a job in one process has no workers
// (its API says it is no cluster, and its UI shows no Workers section)
// and its channels carry no bytes over the network: every subtask says 0.
func TestWebBytesAreZeroInOneProcess(t *testing.T) {
	ctx := browsertest.Start(t, 2*time.Minute)
	base := "http://" + slowedJob(t)
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(waitCtx, chromedp.Navigate(base+"/"), chromedp.WaitReady(`#workers-section[data-cluster="false"]`)); err != nil {
		t.Fatalf("the UI at %s did not read its workers: %v", base, err)
	}
	hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('workers-section').hidden`))
	if err != nil || !hidden {
		t.Fatalf("the Workers section of a job in one process: hidden %v (%v)", hidden, err)
	}
	var ws apiWorkers
	getJSON(t, base+"/api/v1/workers", &ws)
	if ws.Cluster || len(ws.Workers) != 0 || ws.Note == "" {
		t.Fatalf("workers in one process: %+v", ws)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var ss []apiSubtask
		getJSON(t, base+"/api/v1/subtasks", &ss)
		moved := false
		for _, s := range ss {
			if s.BytesIn != 0 || s.BytesOut != 0 {
				t.Fatalf("subtask %s counts bytes in one process: %+v", s.Task, s)
			}
			moved = moved || s.Vertex == "count" && s.RecordsIn > 0
		}
		if moved {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no records reached count within a minute: %+v", ss)
		}
		time.Sleep(50 * time.Millisecond) // polling what the job serves
	}
}

// TestClusterWorkersInTheWebUI loads the coordinator's UI in headless
// Chromium and finds the Workers section with a row per worker, alive,
// one slot used, a heap above 0; and, in the subtasks of the sums, the
// bytes their channels received from the other worker. Once worker-2
// stops, its row is marked (late, or suspect when worker-1's data
// connection to it failed), then lost, with the reason, once the
// coordinator declares it lost.
func TestClusterWorkersInTheWebUI(t *testing.T) {
	ctx := browsertest.Start(t, 5*time.Minute)
	web, stopWorker := clusterWithWeb(t)
	base := "http://" + web + "/"
	step := func(what string, err error) {
		t.Helper()
		if err == nil {
			return
		}
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		png, _ := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		shot := filepath.Join(browsertest.Artifacts(t), "ui-workers-failure.png")
		os.WriteFile(shot, png, 0o644)
		t.Fatalf("the UI at %s: %s: %v\n(screenshot %s) the page says:\n%s", base, what, err, shot, text)
	}
	// within runs actions that wait for the page, a minute for each step
	// (the cluster runs beside CI's other tests on two cores).
	within := func(actions ...chromedp.Action[chromedp.Void]) error {
		c, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return chromedp.Do(c, actions...)
	}
	step("load it", chromedp.Do(ctx, chromedp.Navigate(base)))
	step("wait for both workers' rows, alive, running the attempt, with their heap", within(
		chromedp.WaitVisible(`#workers-section`),
		chromedp.WaitVisible(`#workers tbody tr[data-worker="worker-1"][data-state="alive"][data-slots-used="1"] td[data-heap-bytes]`),
		chromedp.WaitVisible(`#workers tbody tr[data-worker="worker-2"][data-state="alive"][data-slots-used="1"] td[data-heap-bytes]`)))
	for _, w := range []string{"worker-1", "worker-2"} {
		heap, err := chromedp.Run(ctx, chromedp.Evaluate[float64](fmt.Sprintf(`Number(document.querySelector('#workers tbody tr[data-worker="%s"] td[data-heap-bytes]').dataset.heapBytes)`, w)))
		step("read "+w+"'s heap", err)
		row, err := chromedp.Run(ctx, textOf(fmt.Sprintf(`#workers tbody tr[data-worker="%s"]`, w)))
		step("read "+w+"'s row", err)
		if heap <= 0 || !strings.Contains(row, "1 / 1") || !strings.Contains(row, "iB") || !strings.Contains(row, "go1.") {
			t.Fatalf("%s's row says %q, heap %v bytes; want 1 / 1 slots used and a heap", w, row, heap)
		}
	}
	step("click the sums' vertex for their bytes in", within(
		chromedp.Click(`#graph .vertex[data-id="sum"]`),
		chromedp.WaitVisible(`#subtasks tbody tr[data-task="sum#1"] td[data-bytes="in"]`)))
	pollCtx, cancel := context.WithTimeout(ctx, time.Minute)
	_, err := chromedp.Run(pollCtx, chromedp.Poll[bool](`Number(document.querySelector('#subtasks tbody tr[data-task="sum#1"] td[data-bytes="in"]')?.dataset.value) > 0`,
		chromedp.WithPollingInterval(100*time.Millisecond)))
	cancel()
	step("wait for sum#1's bytes in above 0", err)
	png, err := chromedp.Run(ctx, chromedp.Screenshot(`#workers-section`, chromedp.NodeVisible))
	step("screenshot the workers", err)
	dir := browsertest.Artifacts(t)
	if err := os.WriteFile(filepath.Join(dir, "ui-workers.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	stopWorker("worker-2")
	step("wait for the stopped worker's row to be marked", within(
		chromedp.WaitVisible(`#workers tbody tr[data-worker="worker-2"]:is([data-state="late"], [data-state="suspect"])`)))
	state, err := chromedp.Run(ctx, textOf(`#workers tbody tr[data-worker="worker-2"] td.worker-state`))
	step("read the stopped worker's state", err)
	step("wait for the stopped worker's row to say it was lost", within(
		chromedp.WaitVisible(`#workers tbody tr[data-worker="worker-2"][data-state="lost"]`)))
	lostRow, err := chromedp.Run(ctx, textOf(`#workers tbody tr[data-worker="worker-2"]`))
	step("read the lost worker's row", err)
	if !strings.Contains(lostRow, "no heartbeat within the timeout") {
		t.Fatalf("the lost worker's row says %q, not why it was lost", lostRow)
	}
	png, err = chromedp.Run(ctx, chromedp.Screenshot(`#workers-section`, chromedp.NodeVisible))
	step("screenshot the workers", err)
	if err := os.WriteFile(filepath.Join(dir, "ui-workers-lost.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("worker-2 stopped: %s, then lost; screenshots in %s", state, dir)
}
