package weir_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
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
	env := weir.New(weir.Config{Job: "observed", Checkpoint: weir.CheckpointConfig{Interval: 50 * time.Millisecond},
		Web: "127.0.0.1:0", OnWeb: func(addr string) { addrs <- addr }})
	weir.Sink(weir.Map(weir.Source(env, "numbers", src), "double", func(i int64) int64 { return 2 * i }), "discard", stdio.Print(io.Discard, func(dst []byte, i int64) []byte { return dst }))
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
