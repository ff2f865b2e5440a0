package weir_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/connector/stdio"
	"github.com/weirstream/weir/operator"
)

var sourceRecords = regexp.MustCompile(`weir_records_total\{job="observed",operator="numbers"\} [1-9]`)

// TestWebServesMetricsAndAPI runs a job with Config.Web and reads its
// metrics and API while it runs: records counted, checkpoints completed.
func TestWebServesMetricsAndAPI(t *testing.T) {
	// NB: 6 s of records, not 1.5: under the race detector on a busy
	// machine the job ended before the test read its state as running.
	src, err := newRateLimited(2000, 12000)
	if err != nil {
		t.Fatal(err)
	}
	addrs := make(chan string, 1)
	env := weir.New(weir.Config{Job: "observed", Parallelism: 2, Checkpoint: weir.CheckpointConfig{Interval: 50 * time.Millisecond},
		Web: "127.0.0.1:0", OnWeb: func(addr string) { addrs <- addr }})
	doubled := weir.Map(weir.Source(env, "numbers", src), "double", func(i int64) int64 { return 2 * i })
	sums := weir.Reduce(weir.KeyBy(doubled, func(i int64) int64 { return i % 4 }), "sum", func(a, b int64) int64 { return a + b })
	weir.Sink(sums, "discard", stdio.Print(io.Discard, func(dst []byte, i int64) []byte { return dst }))
	done := make(chan error, 1)
	go func() {
		_, err := env.Execute(context.Background())
		done <- err
	}()
	var addr string
	select {
	case addr = <-addrs:
	case err := <-done:
		t.Fatalf("the job ended (%v) before it served", err)
	}
	read := func(path string) string {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	// Wait for a checkpoint and records, reading what the job serves.
	deadline := time.Now().Add(time.Minute)
	for {
		var cs []struct{ Status string }
		if err := json.Unmarshal([]byte(read("/api/v1/checkpoints")), &cs); err != nil {
			t.Fatal(err)
		}
		m := read("/metrics")
		// The history follows the checkpoints in progress.
		cs = slices.DeleteFunc(cs, func(c struct{ Status string }) bool { return c.Status == "in_progress" })
		if len(cs) > 0 && cs[0].Status == "completed" && strings.Contains(m, `weir_checkpoints_total{job="observed",result="completed"}`) &&
			sourceRecords.MatchString(m) && strings.Contains(m, `weir_sink_commit_duration_seconds_count{job="observed",subtask="0",vertex="sum"}`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no completed checkpoint, records and sink commits within a minute:\n%s", m)
		}
		select {
		case err := <-done:
			t.Fatalf("the job ended (%v) before its metrics showed a checkpoint and records:\n%s", err, m)
		case <-time.After(20 * time.Millisecond): // polling what the job serves
		}
	}
	// The timeline of a completed checkpoint: the summing subtasks read two
	// channels each, and say when each one's barrier came.
	var cs []struct {
		ID     uint64
		Status string
	}
	if err := json.Unmarshal([]byte(read("/api/v1/checkpoints")), &cs); err != nil {
		t.Fatal(err)
	}
	cs = slices.DeleteFunc(cs, func(c struct {
		ID     uint64
		Status string
	}) bool {
		return c.Status == "in_progress"
	})
	var one struct {
		Tasks []struct {
			Task     string
			Align    float64   `json:"alignSeconds"`
			Arrivals []float64 `json:"barrierArrivalsSeconds"`
		}
	}
	if err := json.Unmarshal([]byte(read(fmt.Sprint("/api/v1/checkpoints/", cs[0].ID))), &one); err != nil {
		t.Fatal(err)
	}
	summing := 0
	for _, tk := range one.Tasks {
		if strings.HasPrefix(tk.Task, "sum#") {
			summing++
			if len(tk.Arrivals) != 2 || tk.Align < 0 || slices.Min(tk.Arrivals) != 0 {
				t.Fatalf("checkpoint %d, task %s: %+v", cs[0].ID, tk.Task, tk)
			}
		}
	}
	if len(one.Tasks) != 4 || summing != 2 {
		t.Fatalf("checkpoint %d's tasks: %+v", cs[0].ID, one.Tasks)
	}
	if job := read("/api/v1/job"); !strings.Contains(job, `"state": "running"`) {
		t.Fatalf("job: %s", job)
	}
	// The settings the job runs with, defaults filled in (issue 22: it
	// said batch size 0 and a watermark interval of 0).
	cfg := read("/api/v1/config")
	for _, want := range []string{`"mode": "exactly-once"`, `"role": "local"`, `"batchSize": 512`, `"watermarkIntervalNanos": 200000000`, `"channelCapacity": 16`, `"bufferDebloatNanos": 0`} {
		if !strings.Contains(cfg, want) {
			t.Fatalf("config says no %s: %s", want, cfg)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + addr + "/metrics"); err == nil {
		t.Fatal("still serving after the job ended")
	}
}

// slowedJob starts a job that serves its API (with token slowedToken), in
// which one operator is slowed on purpose: two sources (unbounded) send
// every record, by one key, to one subtask of "slow", which takes 200µs
// a record (slowSum); "count" reads both subtasks of "slow". It returns
// the API's address and stops the job when the test ends.
func slowedJob(t *testing.T) string {
	t.Helper()
	src, err := newRateLimited(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	addrs := make(chan string, 1)
	env := weir.New(weir.Config{Job: "slowed", Parallelism: 2, BatchSize: 16, Checkpoint: weir.CheckpointConfig{Interval: 100 * time.Millisecond},
		Web: "127.0.0.1:0", WebToken: slowedToken, OnWeb: func(addr string) { addrs <- addr }})
	slow := weir.Reduce(weir.KeyBy(weir.Source(env, "numbers", src), func(int64) int64 { return 0 }), "slow", slowSum)
	counts := weir.Reduce(weir.KeyBy(slow, func(i int64) int64 { return i % 7 }), "count", func(a, b int64) int64 { return a + b })
	weir.Sink(counts, "discard", stdio.Print(io.Discard, func(dst []byte, i int64) []byte { return dst }))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := env.Execute(ctx)
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("the slowed job ended with %v, want cancelled", err)
		}
	})
	select {
	case addr := <-addrs:
		return addr
	case err := <-done:
		done <- err
		t.Fatalf("the job ended (%v) before it served", err)
	}
	return ""
}

// slowedToken is the slowed job's web token.
const slowedToken = "s3cret"

// slowSum is the slowed operator's reducer: it takes 200µs a record, the
// slowness injected, spinning for the first 50µs (so that a CPU profile
// of a few seconds samples it) and sleeping the rest.
//
//go:noinline
func slowSum(a, b int64) int64 {
	start := time.Now()
	for time.Since(start) < 50*time.Microsecond {
	}
	time.Sleep(150 * time.Microsecond)
	return a + b
}

// getJSON decodes what GET url answers into v.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// TestWebShowsTheSlowedOperator: with one subtask of an operator slowed,
// the API shows that subtask busy, the sources feeding it back-pressured,
// and, in a checkpoint's timeline, the tasks downstream blocking the
// channel from the idle subtask while the slowed one's barrier comes late.
func TestWebShowsTheSlowedOperator(t *testing.T) {
	base := "http://" + slowedJob(t)
	type subtask struct {
		Task          string
		State         string
		RecordsIn     int64
		Busy          float64 `json:"busyRatio"`
		BackPressured float64 `json:"backPressuredRatio"`
	}
	type timeline struct {
		Task     string
		Align    float64   `json:"alignSeconds"`
		Arrivals []float64 `json:"barrierArrivalsSeconds"`
		Channels []string
	}
	var lastSubtasks []subtask
	var lastTimeline []timeline
	seenBusy, seenPressure, seenBlocked := false, false, false
	deadline := time.Now().Add(time.Minute)
	for !(seenBusy && seenPressure && seenBlocked) {
		if time.Now().After(deadline) {
			t.Fatalf("within a minute: busy %v, back-pressure %v, blocked channel %v\nsubtasks %+v\nlast timeline %+v", seenBusy, seenPressure, seenBlocked, lastSubtasks, lastTimeline)
		}
		getJSON(t, base+"/api/v1/subtasks", &lastSubtasks)
		busy := ""
		for _, s := range lastSubtasks {
			if s.State != "running" {
				t.Fatalf("subtask %s of the running job is %q", s.Task, s.State)
			}
			if strings.HasPrefix(s.Task, "slow#") && s.RecordsIn > 0 && s.Busy > 0.5 {
				seenBusy, busy = true, s.Task
			}
			if strings.HasPrefix(s.Task, "numbers#") && s.BackPressured > 0.3 {
				seenPressure = true
			}
		}
		var cs []struct {
			ID     uint64
			Status string
		}
		getJSON(t, base+"/api/v1/checkpoints", &cs)
		if len(cs) > 0 && cs[len(cs)-1].Status == "completed" && busy != "" {
			var c struct{ Tasks []timeline }
			getJSON(t, fmt.Sprint(base, "/api/v1/checkpoints/", cs[len(cs)-1].ID), &c)
			lastTimeline = c.Tasks
			for _, tl := range c.Tasks {
				if !strings.HasPrefix(tl.Task, "count#") || len(tl.Channels) != 2 || len(tl.Arrivals) != 2 {
					continue
				}
				late := slices.Index(tl.Channels, busy)
				// The channel from the idle subtask was blocked from its
				// barrier (first) until the slowed one's came, 10 ms or more
				// later.
				if late >= 0 && tl.Arrivals[1-late] == 0 && tl.Arrivals[late] >= 0.01 && tl.Align >= tl.Arrivals[late] {
					seenBlocked = true
				}
			}
		}
		time.Sleep(50 * time.Millisecond) // polling the running job's API
	}
	t.Logf("subtasks %+v\nlast timeline %+v", lastSubtasks, lastTimeline)
}

// decliningSink records the values it is given and declines the snapshot
// after decline is set, once.
type decliningSink struct {
	operator.Base
	seen    *sync.Map
	decline *atomic.Bool
}

func (s *decliningSink) Write(v int64) error {
	s.seen.Store(v, true)
	return nil
}

func (s *decliningSink) Snapshot(checkpoint.ID) (operator.Async, error) {
	if s.decline.CompareAndSwap(true, false) {
		return nil, errors.New("declined on purpose")
	}
	return nil, nil
}

// TestStopWithAnAbortedSavepointRunsOn: when the savepoint to stop with is
// aborted (a sink declines it), the API says so, the sources go on, and
// the job reads all its input.
func TestStopWithAnAbortedSavepointRunsOn(t *testing.T) {
	const n = 4000
	src, err := newRateLimited(2000, n)
	if err != nil {
		t.Fatal(err)
	}
	var seen sync.Map
	var decline atomic.Bool
	addrs := make(chan string, 1)
	env := weir.New(weir.Config{Job: "runs-on", Parallelism: 2, Checkpoint: weir.CheckpointConfig{Interval: time.Hour},
		Web: "127.0.0.1:0", WebToken: "s3cret", OnWeb: func(addr string) { addrs <- addr }})
	weir.Sink(weir.Source(env, "numbers", src), "record", func() weir.SinkWriter[int64] { return &decliningSink{seen: &seen, decline: &decline} })
	type result struct {
		res weir.Result
		err error
	}
	done := make(chan result, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // the sources, stuck, would never end it
	defer cancel()
	go func() {
		res, err := env.Execute(ctx)
		done <- result{res, err}
	}()
	addr := <-addrs
	decline.Store(true)
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/api/v1/savepoints?stop=true", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(body), "the job runs on") {
		t.Fatalf("stop with a savepoint a sink declines: %s %s", resp.Status, body)
	}
	r := <-done
	if r.err != nil || r.res.StoppedWith != 0 {
		t.Fatalf("the job ended with %v, stopped with savepoint %d: want it to read all its input", r.err, r.res.StoppedWith)
	}
	count := 0
	seen.Range(func(any, any) bool { count++; return true })
	if count != n {
		t.Fatalf("the sink saw %d of the %d records", count, n)
	}
}
