package main

// Outside review of the highly available coordinator (issue 20,
// d35ea82..cd81d43), end to end. Fails on cd81d43.

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/etcdtest"
)

// TestReviewClusterHASigstopLeader: as TestClusterHAKill9Leader, but the
// leading coordinator is paused (SIGSTOP: a VM freeze, a stuck host), not
// killed, and stays paused. Its term ends and the standby leads at once,
// but the workers, fenced, register again at the paused leader's address
// first: the kernel accepts the connection, the TLS handshake is never
// answered, and neither it nor the Register has a deadline. No worker
// reaches the new leader, which waits for slots: the job is stuck for as
// long as the old leader is paused.
func TestReviewClusterHASigstopLeader(t *testing.T) {
	e := etcdtest.Start(t, 1)
	dir := t.TempDir()
	job := func(role string, extra ...string) []string {
		return append([]string{role, "nexmark", "--query", "q5", "--events", "300k", "--rate", "2000", "--throttle", "8000", "--output", filepath.Join(dir, "out"),
			"--checkpoint-dir", filepath.Join(dir, "ckpt"), "--parallelism", "2", "--checkpoint-interval", "200ms", "--log-level", "info"}, extra...)
	}
	certs := filepath.Join(dir, "certs")
	if out, err := exec.Command(weirBin, "cluster", "certs", "--out", certs).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	addrs := freePorts(t, 2)
	haURL := "etcd://" + strings.Join(e.Hosts(), ",") + "/weir-review"
	coords := make([]*child, len(addrs))
	for i, a := range addrs {
		coords[i] = startProc(t, job("coordinator", "--listen", a, "--ha", haURL, "--ha-ttl", "2s", "--certs", certs,
			"--heartbeat-interval", "200ms", "--heartbeat-timeout", "2s")...)
	}
	var workers []*child
	for i := 1; i <= 2; i++ {
		workers = append(workers, startProc(t, job("worker", "--join", strings.Join(addrs, ","), "--name", fmt.Sprintf("worker-%d", i), "--certs", certs)...))
	}
	paused := -1
	defer func() {
		if paused >= 0 {
			coords[paused].cmd.Process.Signal(syscall.SIGCONT) // NB: signal waits for an exit
		}
		if t.Failed() {
			for i, c := range coords {
				t.Logf("coordinator %s:\n%s", addrs[i], tail(c.log.String(), 3000))
			}
			for i, w := range workers {
				t.Logf("worker-%d:\n%s", i+1, tail(w.log.String(), 3000))
			}
		}
	}()
	completedSinceLeading := func(c *child) bool {
		log := c.log.String()
		i := strings.LastIndex(log, `msg="leading the job"`)
		return i >= 0 && strings.Contains(log[i:], `msg="checkpoint completed"`)
	}
	waitUntil := func(what string, limit time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("no %s within %v", what, limit)
			}
			time.Sleep(20 * time.Millisecond) // polls the logs
		}
	}
	waitUntil("leader that completed a checkpoint", time.Minute, func() bool {
		for i, c := range coords {
			if leads(c) && completedSinceLeading(c) {
				paused = i
				return true
			}
		}
		return false
	})
	other := coords[1-paused]
	coords[paused].cmd.Process.Signal(syscall.SIGSTOP) // NB: signal waits for an exit
	waitUntil("takeover by the standby", 20*time.Second, func() bool { return strings.Contains(other.log.String(), `msg="leading the job"`) })
	waitUntil("checkpoint completed under the new leader while the old one is paused (the workers wait on the paused leader's address)",
		45*time.Second, func() bool { return completedSinceLeading(other) })
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
