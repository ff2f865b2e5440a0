package weir_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/stdio"
)

var sourceRecords = regexp.MustCompile(`weir_records_total\{job="observed",operator="numbers"\} [1-9]`)

// TestWebServesMetricsAndAPI runs a job with Config.Web and reads its
// metrics and API while it runs: records counted, checkpoints completed.
func TestWebServesMetricsAndAPI(t *testing.T) {
	src, err := newRateLimited(2000, 3000)
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
		if len(cs) > 0 && cs[0].Status == "completed" && strings.Contains(m, `weir_checkpoints_total{job="observed",result="completed"}`) &&
			sourceRecords.MatchString(m) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no completed checkpoint and records within a minute:\n%s", m)
		}
		select {
		case err := <-done:
			t.Fatalf("the job ended (%v) before its metrics showed a checkpoint and records:\n%s", err, m)
		case <-time.After(20 * time.Millisecond): // polling what the job serves
		}
	}
	// The timeline of a completed checkpoint: the summing subtasks read two
	// channels each, and say when each one's barrier came.
	var cs []struct{ ID uint64 }
	if err := json.Unmarshal([]byte(read("/api/v1/checkpoints")), &cs); err != nil {
		t.Fatal(err)
	}
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
	if cfg := read("/api/v1/config"); !strings.Contains(cfg, `"mode": "exactly-once"`) || !strings.Contains(cfg, `"role": "local"`) {
		t.Fatalf("config: %s", cfg)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + addr + "/metrics"); err == nil {
		t.Fatal("still serving after the job ended")
	}
}
