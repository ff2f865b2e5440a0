package main

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

var savepointOut = regexp.MustCompile(`savepoint (\d+): (\S+)`)

// A cluster goes back to an older savepoint of its own storage (--restore
// <its chk-N directory>), over a newer savepoint. Its coordinator is
// killed after the workers rolled the sink's output back and before any
// checkpoint of that run; started again with --restore latest, it resumes
// the older savepoint (the start recorded its rollback), not the newer
// one whose output is gone, and the job ends exactly once.
func TestClusterRestoresAnOlderSavepoint(t *testing.T) {
	web := []string{"--web", "127.0.0.1:0", "--web-token", "s3cret", "--web-linger", "0"}
	hb := []string{"--heartbeat-interval", "200ms", "--heartbeat-timeout", "2s"}
	j := startClusterJobWith(t, 2, 20_000, []string{"--pace", "16"}, web...)
	names := []string{"worker-1", "worker-2", "worker-3"}
	var workers []*child
	for _, name := range names {
		workers = append(workers, j.worker(t, name))
	}
	var logs []string // every coordinator's, for a failure
	stop := func() (id, path string) {
		t.Helper()
		waitFor(t, "a checkpoint", func() bool { return j.checkpointedSinceRestart() || j.coord.exited() })
		m := webLine.FindStringSubmatch(j.coord.log.String())
		if m == nil || j.coord.exited() {
			t.Fatalf("no API, or the job ended first (the test needs a longer run):\n%s", j.coord.log)
		}
		out, err := exec.Command(weirBin, "savepoint", "--stop", "--web", m[1], "--token", "s3cret").CombinedOutput()
		sp := savepointOut.FindStringSubmatch(string(out))
		if err != nil || sp == nil {
			t.Fatalf("savepoint --stop: %v\n%s", err, out)
		}
		<-j.coord.done
		logs = append(logs, j.coord.log.String())
		for i, w := range workers {
			select {
			case <-w.done:
			case <-time.After(30 * time.Second):
				t.Fatalf("%s did not exit within 30 s of the stop:\n%s", names[i], w.log)
			}
		}
		return sp[1], sp[2]
	}
	restart := func(args ...string) {
		j.coord = startProc(t, j.args("coordinator", append(append([]string{"--listen", j.addr}, hb...), append(web, args...)...)...)...)
		workers = workers[:0]
		for _, name := range names {
			workers = append(workers, j.worker(t, name))
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("coordinator:\n%s", j.coord.log)
			for i, w := range workers {
				t.Logf("%s:\n%s", names[i], w.log)
			}
		}
	})
	a, aPath := stop()
	restart("--restore", "latest")
	b, _ := stop()
	t.Logf("savepoints %s (%s) and %s", a, aPath, b)

	// Back to a, with no checkpoint before the kill.
	restart("--restore", aPath, "--checkpoint-interval", "1h")
	rolled := func() bool {
		n := 0
		for _, w := range workers {
			n += strings.Count(w.log.String(), "rolling back output committed after the restored checkpoint")
		}
		return n == len(names) || j.coord.exited()
	}
	waitFor(t, "the workers' sinks to roll back savepoint "+b+"'s output", rolled)
	if j.coord.exited() {
		t.Fatalf("the coordinator restoring %s ended: %v\n%s", aPath, j.coord.err, j.coord.log)
	}
	j.coord.signal(syscall.SIGKILL)
	<-j.coord.done
	logs = append(logs, j.coord.log.String())
	if j.checkpoints() > 0 {
		t.Fatalf("a checkpoint completed before the kill:\n%s", j.coord.log)
	}
	j.coord = startProc(t, j.args("coordinator", append(append([]string{"--listen", j.addr, "--restore", "latest"}, hb...), web...)...)...)
	j.finish(t, "\nthe earlier coordinators' logs:\n"+strings.Join(logs, "\n----\n"))
	if want := fmt.Sprintf(`msg="restoring checkpoint" job=wordcount checkpoint=%s `, a); !strings.Contains(j.coord.log.String(), want) {
		t.Fatalf("--restore latest after the rollback to %s did not restore it:\n%s", a, j.coord.log)
	}
}
