package main

import (
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/etcdtest"
)

// freePorts returns n loopback addresses with ports free a moment ago.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, ln.Addr().String())
		defer ln.Close()
	}
	return addrs
}

// leads reports whether coordinator c leads now: it said it leads, and
// not since that it was deposed.
func leads(c *child) bool {
	log := c.log.String()
	i := strings.LastIndex(log, `msg="leading the job"`)
	return i >= 0 && !strings.Contains(log[i:], `msg="deposed`) && !c.exited()
}

// TestClusterHAKill9Leader runs Nexmark q5 on three coordinators with
// --ha (one etcd) and three workers, and kills the leading coordinator
// with SIGKILL five times, each after the leader completed a checkpoint;
// each killed one is started again at its address and stands by. No
// person or script restarts the job: a standby takes over, restores the
// latest checkpoint etcd records, and the workers register with it. The
// results must be exactly those of a run in one process, and every
// coordinator exits 0 once the job finished.
func TestClusterHAKill9Leader(t *testing.T) {
	e := etcdtest.Start(t, 1)
	dir := t.TempDir()
	job := func(role, out string, extra ...string) []string {
		return append([]string{role, "nexmark", "--query", "q5", "--events", "300k", "--rate", "2000", "--throttle", "8000", "--output", filepath.Join(dir, out),
			"--checkpoint-dir", filepath.Join(dir, "ckpt-"+out), "--parallelism", "3", "--checkpoint-interval", "100ms", "--log-level", "info"}, extra...)
	}
	golden := job("run", "golden")
	golden[slices.Index(golden, "--throttle")+1] = "0"
	if out, err := exec.Command(weirBin, golden...).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := committedSorted(t, filepath.Join(dir, "golden"))
	certs := filepath.Join(dir, "certs")
	if out, err := exec.Command(weirBin, "cluster", "certs", "--out", certs).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	addrs := freePorts(t, 3)
	haURL := "etcd://" + strings.Join(e.Hosts(), ",") + "/weir-test"
	coordinator := func(addr string) *child {
		return startProc(t, job("coordinator", "cluster", "--listen", addr, "--ha", haURL, "--ha-ttl", "2s", "--certs", certs,
			"--heartbeat-interval", "200ms", "--heartbeat-timeout", "2s")...)
	}
	coords := make([]*child, len(addrs))
	for i, a := range addrs {
		coords[i] = coordinator(a)
	}
	var logs []string // of the killed coordinators, for a failure
	defer func() {
		if t.Failed() {
			for i, c := range coords {
				t.Logf("coordinator %s:\n%s", addrs[i], c.log)
			}
			t.Logf("killed coordinators:\n%s", strings.Join(logs, "\n----\n"))
		}
	}()
	for i := 1; i <= 3; i++ {
		startProc(t, job("worker", "cluster", "--join", strings.Join(addrs, ","), "--name", fmt.Sprintf("worker-%d", i), "--certs", certs)...)
	}
	leader := func() int {
		for i, c := range coords {
			if leads(c) {
				return i
			}
		}
		return -1
	}
	var killedAt time.Time
	for kill := range 5 {
		var l int
		waitFor(t, "a leader that completed a checkpoint", func() bool {
			l = leader()
			if l < 0 {
				return false
			}
			log := coords[l].log.String()
			return strings.Contains(log[strings.LastIndex(log, `msg="leading the job"`):], `msg="checkpoint completed"`)
		})
		if kill > 0 {
			t.Logf("kill %d: %s's first checkpoint completed %v after the kill", kill, addrs[l], time.Since(killedAt).Round(10*time.Millisecond))
		}
		if coords[l].exited() {
			t.Fatalf("the job ended after %d kills; the test needs a longer run", kill)
		}
		coords[l].signal(syscall.SIGKILL)
		killedAt = time.Now()
		<-coords[l].done
		logs = append(logs, coords[l].log.String())
		coords[l] = coordinator(addrs[l])
	}
	for i, c := range coords {
		<-c.done
		if c.err != nil {
			t.Fatalf("coordinator %s: %v", addrs[i], c.err)
		}
	}
	got := committedSorted(t, filepath.Join(dir, "cluster"))
	if !slices.Equal(got, want) {
		t.Fatalf("%d results, the run in one process %d", len(got), len(want))
	}
	t.Logf("%d results, as in one process, after 5 kills of the leader", len(got))
}
