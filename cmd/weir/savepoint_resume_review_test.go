package main

import (
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestClusterStopWithSavepointResumeReview: a cluster's coordinator,
// stopped with a savepoint (weir savepoint --stop), says "Resume with:"
// and a command. That command must resume the job: here it is run as
// printed, the workers are started again and register with it, and the
// job finishes exactly-once. The workers, told that the job ended, exit
// saying it stopped with the savepoint.
//
// Found by TestChaosGen (-chaos.first 1): the printed command is the
// coordinator's with --restore <the savepoint's chk-N directory>, which a
// coordinator refuses at start ("a cluster restores checkpoints of its own
// storage (--restore latest)"), though the savepoint is in that storage.
// And the workers logged "the job finished; this worker exits", which
// tells an operator there is nothing to resume: the coordinator told them
// the job finished on runtime.EventFinished, which a stop with a
// savepoint raises too.
func TestClusterStopWithSavepointResumeReview(t *testing.T) {
	j := startClusterJobWith(t, 2, 20_000, []string{"--pace", "16"}, "--web", "127.0.0.1:0", "--web-token", "s3cret", "--web-linger", "0")
	var workers []*child
	for _, name := range []string{"worker-1", "worker-2", "worker-3"} {
		workers = append(workers, j.worker(t, name))
	}
	waitFor(t, "a checkpoint", func() bool { return j.checkpoints() > 0 || j.coord.exited() })
	m := webLine.FindStringSubmatch(j.coord.log.String())
	if m == nil || j.coord.exited() {
		t.Fatalf("no API, or the job ended first (the test needs a longer run):\n%s", j.coord.log)
	}
	if out, err := exec.Command(weirBin, "savepoint", "--stop", "--web", m[1], "--token", "s3cret").CombinedOutput(); err != nil {
		t.Fatalf("savepoint --stop: %v\n%s", err, out)
	}
	<-j.coord.done
	first := j.coord.log.String()
	resume := regexp.MustCompile(`stopped with savepoint \d+\. Resume with:\n  (.*)`).FindStringSubmatch(first)
	if j.coord.err != nil || resume == nil {
		t.Fatalf("the stopped coordinator (%v) did not say how to resume:\n%s", j.coord.err, first)
	}
	args := strings.Fields(strings.ReplaceAll(resume[1], "'", ""))
	// Its address, which the workers know (an operator's is fixed).
	args[slices.Index(args, "--listen")+1] = j.addr
	j.coord = startProc(t, args[1:]...)
	// The workers heard the job end: an operator starts them again.
	stopped := regexp.MustCompile(`msg="the job stopped with savepoint \d+; this worker exits"`)
	for i, w := range workers {
		select {
		case <-w.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("worker-%d did not exit within 30 s of the stop:\n%s", i+1, w.log)
		}
		if log := w.log.String(); !stopped.MatchString(log) || strings.Contains(log, "the job finished") {
			t.Errorf("worker-%d of a job stopped with a savepoint does not say so:\n%s", i+1, log)
		}
		j.worker(t, fmt.Sprintf("worker-%d", i+1))
	}
	select {
	case <-j.coord.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the resumed job did not end within 2 minutes:\n%s", j.coord.log)
	}
	j.finish(t, "\nthe stopped coordinator's log:\n"+first)
	t.Logf("resumed with the printed command: %s", resume[1])
}
