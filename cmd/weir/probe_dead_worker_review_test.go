package main

import (
	"regexp"
	"syscall"
	"testing"
	"time"
)

// TestClusterDeadWorkerBeforeItsProbeReview: a worker that registered and
// died before the coordinator probed its storage (it gets probed when an
// attempt places tasks) must not fail the job for good. Here the job runs
// on worker-1 and worker-2 (parallelism 2); worker-3 registers, idle, and
// is killed with SIGKILL; then worker-1 is killed and started again. The
// restarts must place the job on worker-1 and worker-2 and finish it,
// exactly-once.
//
// Found by TestChaosGen (-chaos.first 113 and 116: "gave up after 11
// failures in a row … probe the checkpoint storage on worker worker-5:
// unavailable: … connection refused"). Executor.Start probes every
// worker WaitForSlots returned, and a probe that cannot reach its worker
// fails the attempt without making the worker suspect, as a failed
// deploy does (internal/cluster/executor.go, probe): every restart until
// the heartbeat timeout declares the worker lost picks it again, fails
// again, and counts against the restart strategy, which gives up.
func TestClusterDeadWorkerBeforeItsProbeReview(t *testing.T) {
	j := startClusterJobWith(t, 2, 20_000, []string{"--parallelism", "2", "--pace", "16", "--restart-delay", "100ms", "--restart-attempts", "3"},
		"--heartbeat-timeout", "30s")
	w1 := j.worker(t, "worker-1")
	j.worker(t, "worker-2")
	waitFor(t, "a checkpoint", func() bool { return j.checkpoints() > 0 || j.coord.exited() })
	w3 := j.worker(t, "worker-3")
	registered := regexp.MustCompile(`msg="worker registered" worker=worker-3 `)
	waitFor(t, "worker-3 to register", func() bool { return registered.MatchString(j.coord.log.String()) || j.coord.exited() })
	w3.signal(syscall.SIGKILL)
	w1.signal(syscall.SIGKILL)
	j.worker(t, "worker-1")
	if j.coord.exited() {
		t.Fatalf("the job ended (%v) before the kills; the test needs a longer run:\n%s", j.coord.err, j.coord.log)
	}
	select {
	case <-j.coord.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the job did not end within 2 minutes:\n%s", j.coord.log)
	}
	j.finish(t, "")
}
