package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/weirstream/weir/internal/web"
)

var progressLine = regexp.MustCompile(`weir:\s+[\d.]+s\s+lines \d+`)

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// startCluster runs the word count over files×lines lines on a
// coordinator (its API on a free port, lingering after the job, printing
// progress every 200 ms) and three workers, all given flags; it returns
// the job and the API's address.
func startCluster(t *testing.T, files, lines int, flags ...string) (*clusterJob, string) {
	t.Helper()
	j := startClusterJobWith(t, files, lines, flags, "--web", "127.0.0.1:0", "--web-linger", "1m", "--progress", "200ms")
	for i := 1; i <= 3; i++ {
		j.worker(t, fmt.Sprintf("worker-%d", i))
	}
	var addr string
	waitFor(t, "the coordinator's API", func() bool {
		if m := webLine.FindStringSubmatch(j.coord.log.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	return j, addr
}

func waitFinished(t *testing.T, j *clusterJob) {
	t.Helper()
	waitFor(t, "the job to finish", func() bool {
		return strings.Contains(j.coord.log.String(), "wordcount finished") || j.coord.exited()
	})
	if !strings.Contains(j.coord.log.String(), "wordcount finished") {
		t.Fatalf("the job did not finish: %v\n%s", j.coord.err, j.coord.log)
	}
}

// TestClusterFinishedJobReview: a cluster's word count (coordinator
// and three workers, all with --progress 200ms) runs to its end.
//
// progress: the coordinator prints the job's progress, from its workers'
// counts; it took --progress and printed nothing, and so did the workers,
// which now take no --progress.
//
// subtasks: once the job finished, GET /api/v1/subtasks still answers
// every subtask "running", with the counts of the last heartbeat before
// the end (the lines' recordsIn short of the input's lines), and a rate.
func TestClusterFinishedJobReview(t *testing.T) {
	const files, lines = 2, 100_000
	j, addr := startCluster(t, files, lines, "--pace", "256")
	waitFinished(t, j)

	t.Run("progress", func(t *testing.T) {
		if !progressLine.MatchString(j.coord.log.String()) {
			t.Errorf("the coordinator, given --progress 200ms, printed no progress line with the lines' count over the run; its log:\n%s", j.coord.log)
		}
	})

	t.Run("subtasks", func(t *testing.T) {
		var sts []web.Subtask
		body := get(t, "http://"+addr+"/api/v1/subtasks")
		if err := json.Unmarshal([]byte(body), &sts); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		var linesIn int64
		for _, s := range sts {
			if s.State == "running" {
				t.Errorf("subtask %s: state running (%.0f records/s) after the job finished", s.Task, s.InPerSecond)
			}
			if s.Vertex == "lines" {
				linesIn += s.RecordsIn
			}
		}
		if linesIn != files*lines {
			t.Errorf("the lines subtasks' recordsIn sum to %d after the job finished; the input has %d lines", linesIn, files*lines)
		}
	})
}
