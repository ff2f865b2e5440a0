package main

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/weirstream/weir/examples/wordcount"
	"github.com/weirstream/weir/internal/etcdtest"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestRunHAStopWithSavepointResumeReview: a run with --ha (local, no
// cluster), stopped with a savepoint, says "Resume with:" and a command.
// That command, run as printed, must finish the job exactly-once.
//
// It printed --restore <the savepoint's chk-N directory>, which a process
// with --ha refuses at start ("with --ha, every leader restores the latest
// checkpoint etcd records: --fresh and --restore of a checkpoint do not
// apply"), as a cluster's coordinator did before it printed latest.
func TestRunHAStopWithSavepointResumeReview(t *testing.T) {
	e := etcdtest.Start(t, 1)
	url := "etcd://" + strings.Join(e.Hosts(), ",") + "/weir-test"
	j := newJob(t, 4, 250_000)
	args := []string{"run", "wordcount", "--input", j.input, "--output", j.output, "--checkpoint-dir", j.ckpt, "--parallelism", "2",
		"--checkpoint-interval", "100ms", "--ha", url, "--ha-ttl", "2s", "--log-level", "info", "--progress", "0"}
	run, addr := startWithAPI(t, args)
	if out, err := exec.Command(weirBin, "savepoint", "--stop", "--web", addr, "--token", "s3cret").CombinedOutput(); err != nil {
		t.Fatalf("savepoint --stop: %v\n%s", err, out)
	}
	<-run.done
	resume := regexp.MustCompile(`stopped with savepoint \d+\. Resume with:\n  (.*)`).FindStringSubmatch(run.log.String())
	if run.err != nil || resume == nil {
		t.Fatalf("the stopped run (%v) did not say how to resume:\n%s", run.err, run.log)
	}
	printed := strings.Fields(strings.ReplaceAll(resume[1], "'", ""))
	out, err := exec.Command(weirBin, printed[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("the printed command %q: %v\n%s", resume[1], err, out)
	}
	rep, err := wordcount.Verify(vfs.Default, j.output, j.want, false)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("after resuming with %q: %v\n%s", resume[1], rep, out)
	}
}
