package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/examples/wordcount"
)

// startProc starts a weir process of a test cluster; the test kills it
// when it ends.
func startProc(t *testing.T, args ...string) *child {
	t.Helper()
	return startCmd(t, weirBin, args...)
}

// startCmd starts a process of a test cluster (weir, or weir inside ip
// netns exec, which execs it).
func startCmd(t *testing.T, name string, args ...string) *child {
	t.Helper()
	p, err := startChild(context.Background(), nil, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.signal(syscall.SIGKILL) })
	return p
}

var listenLine = regexp.MustCompile(`msg="coordinator listening" job=\S+ addr=(\S+)`)

// clusterJob is the word count as a coordinator and workers, each a
// process of the weir binary.
type clusterJob struct {
	*job
	certs string
	coord *child
	addr  string
	// flags every process takes (its checkpoints' alignment).
	flags []string
}

func (j *clusterJob) args(role string, extra ...string) []string {
	args := append([]string{role, "wordcount", "--input", j.input, "--output", j.output, "--checkpoint-dir", j.ckpt,
		"--parallelism", "3", "--checkpoint-interval", "100ms", "--certs", j.certs, "--log-level", "info"}, j.flags...)
	return append(args, extra...)
}

func (j *clusterJob) worker(t *testing.T, name string) *child {
	return startProc(t, j.args("worker", "--join", j.addr, "--name", name)...)
}

func startClusterJob(t *testing.T, files, lines int, coordArgs ...string) *clusterJob {
	t.Helper()
	return startClusterJobWith(t, files, lines, nil, coordArgs...)
}

// startClusterJobWith is startClusterJob with flags every process takes.
func startClusterJobWith(t *testing.T, files, lines int, flags []string, coordArgs ...string) *clusterJob {
	t.Helper()
	j := &clusterJob{job: newJob(t, files, lines), flags: flags}
	j.certs = filepath.Join(j.dir, "certs")
	if out, err := exec.Command(weirBin, "cluster", "certs", "--out", j.certs).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	j.coord = startProc(t, j.args("coordinator", append([]string{"--listen", "127.0.0.1:0", "--heartbeat-interval", "200ms", "--heartbeat-timeout", "2s"}, coordArgs...)...)...)
	waitFor(t, "coordinator address", func() bool {
		m := listenLine.FindStringSubmatch(j.coord.log.String())
		if m != nil {
			j.addr = m[1]
		}
		return m != nil
	})
	return j
}

var placedLine = regexp.MustCompile(`msg="placed tasks" attempt=(\d+)`)

// attempt is the newest attempt the coordinator placed.
func (j *clusterJob) attempt() int {
	ms := placedLine.FindAllStringSubmatch(j.coord.log.String(), -1)
	if len(ms) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(ms[len(ms)-1][1])
	return n
}

// checkpointedSinceRestart reports whether a checkpoint completed after the
// latest restore.
func (j *clusterJob) checkpointedSinceRestart() bool {
	log := j.coord.log.String()
	return strings.LastIndex(log, `msg="checkpoint completed"`) > strings.LastIndex(log, `msg="restoring checkpoint"`)
}

// finish waits for the coordinator to end the job and checks the output
// by counting; more is printed beside the coordinator's log on failure.
func (j *clusterJob) finish(t *testing.T, more string) wordcount.Report {
	t.Helper()
	<-j.coord.done
	if j.coord.err != nil {
		t.Fatalf("coordinator: %v\n%s%s", j.coord.err, j.coord.log, more)
	}
	rep, err := wordcount.Verify(vfs.Default, j.output, j.want, false)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("%v\ncoordinator's log:\n%s%s", rep, j.coord.log, more)
	}
	return rep
}

func (j *clusterJob) checkpoints() int {
	return strings.Count(j.coord.log.String(), `msg="checkpoint completed"`)
}

// TestClusterKill9Workers runs the word count on a coordinator and three
// worker processes, kills a worker with SIGKILL at random moments and
// starts it again, four times, and checks the output by counting: no count
// lost, none twice. It does with aligned checkpoints, unaligned ones and
// aligned ones a 1 ms timeout switches (under -short or -race one of the three,
// drawn from WEIR_SEED as unalignedVariants draws).
func TestClusterKill9Workers(t *testing.T) {
	modes := [][]string{{"--checkpoint-alignment", "aligned"}, {"--checkpoint-alignment", "unaligned"}, {"--aligned-checkpoint-timeout", "1ms"}}
	if fewer() {
		modes = [][]string{modes[drawn(t, len(modes))]}
	}
	for _, m := range modes {
		t.Run(m[0][2:]+"-"+m[1], func(t *testing.T) { clusterKill9Workers(t, m) })
	}
}

// clusterKill9Workers is TestClusterKill9Workers with the processes' flags.
func clusterKill9Workers(t *testing.T, flags []string) {
	// Paced (a millisecond's sleep every 512 words a worker counts: 5 s
	// of sleeps over the input), so that the input outlasts four kills on
	// a fast machine too: unpaced, the fourth once came as the job ended.
	j := startClusterJobWith(t, 4, 250_000, append([]string{"--pace", "512"}, flags...))
	workers := map[string]*child{}
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("worker-%d", i)
		workers[name] = j.worker(t, name)
	}
	waitFor(t, "a checkpoint", func() bool { return j.checkpoints() > 0 || j.coord.exited() })
	out, err := exec.Command(weirBin, "status", "--coordinator", j.addr, "--certs", j.certs).CombinedOutput()
	if err != nil {
		t.Fatalf("weir status: %v\n%s", err, out)
	}
	for _, want := range []string{"job wordcount: running, attempt 1", "worker-1  1", "worker-3", "count#0", "lines#2", "completed"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("weir status says no %q:\n%s", want, out)
		}
	}
	t.Logf("weir status:\n%s", out)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 10))
	killed := 0 // the attempt the last kill failed
	for kill := range 4 {
		// A checkpoint of an attempt after the one the last kill failed:
		// this kill fails that attempt.
		waitFor(t, "a checkpoint of a new attempt", func() bool {
			return j.attempt() > killed && j.checkpointedSinceRestart() || j.coord.exited()
		})
		killed = j.attempt()
		if j.coord.exited() {
			t.Fatalf("the job ended (%v) after %d kills; the test needs a larger input\n%s", j.coord.err, kill, j.coord.log)
		}
		// The moment of the kill is the fault being injected, not a wait
		// for a condition.
		time.Sleep(time.Duration(rng.IntN(150)) * time.Millisecond)
		name := fmt.Sprintf("worker-%d", 1+rng.IntN(3))
		workers[name].signal(syscall.SIGKILL)
		t.Logf("kill %d: %s", kill+1, name)
		workers[name] = j.worker(t, name)
	}
	rep := j.finish(t, "")
	restarts := strings.Count(j.coord.log.String(), `msg="job failed; restarting"`)
	if restarts < 4 {
		t.Fatalf("%d restarts for 4 kills:\n%s", restarts, j.coord.log)
	}
	t.Logf("%d restarts: %v", restarts, rep)
}

// TestClusterCoordinatorRestart kills the coordinator with SIGKILL mid-run
// and starts another at the same address with --restore latest: the
// workers fence themselves, register with it, and the job resumes from
// the latest checkpoint, exactly-once.
func TestClusterCoordinatorRestart(t *testing.T) {
	j := startClusterJob(t, 4, 250_000)
	for i := 1; i <= 3; i++ {
		j.worker(t, fmt.Sprintf("worker-%d", i))
	}
	waitFor(t, "two checkpoints", func() bool { return j.checkpoints() >= 2 || j.coord.exited() })
	if j.coord.exited() {
		t.Fatalf("the job ended (%v) before the kill; the test needs a larger input\n%s", j.coord.err, j.coord.log)
	}
	j.coord.signal(syscall.SIGKILL)
	first := j.coord.log.String()
	j.coord = startProc(t, j.args("coordinator", "--listen", j.addr, "--restore", "latest", "--heartbeat-interval", "200ms", "--heartbeat-timeout", "2s")...)
	rep := j.finish(t, "\nfirst coordinator's log:\n"+first)
	if !strings.Contains(j.coord.log.String(), `msg="restoring checkpoint"`) {
		t.Fatalf("the second coordinator restored nothing:\n%s", j.coord.log)
	}
	t.Log(rep)
}

// committedSorted is the sorted lines of the committed files in dir.
func committedSorted(t *testing.T, dir string) []string {
	t.Helper()
	var err error
	lines := slices.Sorted(wordcount.CommittedLines(vfs.Default, dir, &err))
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// TestClusterKill9Nexmark runs Nexmark q5 (hot items: sliding windows) on a
// coordinator and three worker processes, kills workers with SIGKILL
// mid-run and starts them again, and requires exactly the results of a run
// in one process.
func TestClusterKill9Nexmark(t *testing.T) { clusterKill9Nexmark(t, "q5") }

// TestClusterKill9NexmarkUnaligned is TestClusterKill9Nexmark with q3, q5
// and q8, unaligned and with a 1 ms aligned timeout; the results of the
// run in one process are aligned. Under -race, which makes each long, it
// runs one of the six, drawn (WEIR_SEED=n repeats a draw).
func TestClusterKill9NexmarkUnaligned(t *testing.T) {
	for _, v := range unalignedVariants(t) {
		t.Run(v.query+"-"+v.args[0][2:], func(t *testing.T) { clusterKill9Nexmark(t, v.query, v.args...) })
	}
}

// unalignedVariant is a Nexmark query with exchanges and the flags of
// unaligned checkpoints or of an aligned timeout that switches them.
type unalignedVariant struct {
	query string
	args  []string
}

// unalignedVariants returns the six variants, or under -short or -race one of them,
// drawn from WEIR_SEED (default: the time), which it logs.
func unalignedVariants(t *testing.T) []unalignedVariant {
	var vs []unalignedVariant
	for _, q := range []string{"q3", "q5", "q8"} {
		vs = append(vs, unalignedVariant{q, []string{"--checkpoint-alignment", "unaligned"}}, unalignedVariant{q, []string{"--aligned-checkpoint-timeout", "1ms"}})
	}
	if !fewer() {
		return vs
	}
	return []unalignedVariant{vs[drawn(t, len(vs))]}
}

// drawn draws one of n variants from WEIR_SEED (default: the time), which
// it logs, so that a failure can be repeated.
func drawn(t *testing.T, n int) int {
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("WEIR_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("WEIR_SEED=%d", seed)
	return rand.New(rand.NewPCG(seed, 21)).IntN(n)
}

// clusterKill9Nexmark runs query on a cluster with its checkpoints set by
// alignment, killing workers; see TestClusterKill9Nexmark.
func clusterKill9Nexmark(t *testing.T, query string, alignment ...string) {
	dir := t.TempDir()
	job := func(role, out string, extra ...string) []string {
		return append([]string{role, "nexmark", "--query", query, "--events", "300k", "--rate", "2000", "--throttle", "100000", "--output", filepath.Join(dir, out),
			"--checkpoint-dir", filepath.Join(dir, "ckpt-"+out), "--parallelism", "3", "--checkpoint-interval", "100ms", "--log-level", "info"}, extra...)
	}
	if out, err := exec.Command(weirBin, job("run", "golden")...).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	golden := committedSorted(t, filepath.Join(dir, "golden"))
	if len(golden) == 0 {
		t.Fatalf("%s found no results", query)
	}
	certs := filepath.Join(dir, "certs")
	if out, err := exec.Command(weirBin, "cluster", "certs", "--out", certs).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	j := &clusterJob{coord: startProc(t, job("coordinator", "cluster", append([]string{"--listen", "127.0.0.1:0", "--certs", certs}, alignment...)...)...)}
	waitFor(t, "coordinator address", func() bool {
		m := listenLine.FindStringSubmatch(j.coord.log.String())
		if m != nil {
			j.addr = m[1]
		}
		return m != nil
	})
	worker := func(name string) *child {
		return startProc(t, job("worker", "cluster", append([]string{"--join", j.addr, "--name", name, "--certs", certs}, alignment...)...)...)
	}
	workers := map[string]*child{}
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("worker-%d", i)
		workers[name] = worker(name)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	killed := 0
	for kill := range 2 {
		waitFor(t, "a checkpoint of a new attempt", func() bool {
			return j.attempt() > killed && j.checkpointedSinceRestart() || j.coord.exited()
		})
		if j.coord.exited() {
			t.Fatalf("the job ended (%v) after %d kills; the test needs a longer run\n%s", j.coord.err, kill, j.coord.log)
		}
		killed = j.attempt()
		name := fmt.Sprintf("worker-%d", 1+rng.IntN(3))
		workers[name].signal(syscall.SIGKILL)
		t.Logf("kill %d: %s", kill+1, name)
		workers[name] = worker(name)
	}
	<-j.coord.done
	if j.coord.err != nil {
		t.Fatalf("coordinator: %v\n%s", j.coord.err, j.coord.log)
	}
	got := committedSorted(t, filepath.Join(dir, "cluster"))
	if !slices.Equal(got, golden) {
		t.Fatalf("%d results, the run in one process %d:\ncoordinator's log:\n%s", len(got), len(golden), j.coord.log)
	}
	t.Logf("%d results, as in one process, after %d attempts; %d restores replayed channel state", len(got), j.attempt(),
		strings.Count(j.coord.log.String(), `msg="channel state replayed"`))
}
