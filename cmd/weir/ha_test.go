package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/examples/wordcount"
	"github.com/weirstream/weir/internal/etcdtest"
	"github.com/weirstream/weir/internal/ha"
	"github.com/weirstream/weir/internal/pgtest"
)

// freePorts returns n loopback addresses with ports free a moment ago,
// below the kernel's ephemeral range (32768 and up here, and by default):
// a port the kernel hands out to a listener on port 0 (a worker's data
// listener) or to an outgoing connection could be taken by the time a
// standby coordinator binds it (it was, once, in CI).
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	var addrs []string
	for len(addrs) < n {
		addr := fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12000))
		if slices.Contains(addrs, addr) {
			continue
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue // taken
		}
		addrs = append(addrs, addr)
		defer ln.Close()
	}
	return addrs
}

// leads reports whether coordinator c leads now: it said it leads, and
// not since that it was deposed.
func leads(c *child) bool {
	log := c.log.String()
	i := strings.LastIndex(log, `msg="leading the job"`)
	return i >= 0 && !strings.Contains(log[i:], `msg="the job's leadership is lost`) && !strings.Contains(log[i:], `msg="deposed`) && !c.exited()
}

// Failover is measured by TestClusterHAKill9Leader's log ("first
// checkpoint completed … after the kill") with these:
//
//	go test ./cmd/weir -run 'TestClusterHAKill9Leader$' -v -ha.ttl 5s -ha.default-liveness
var (
	killTTL         = flag.String("ha.ttl", "2s", "TestClusterHAKill9Leader's --ha-ttl")
	defaultLiveness = flag.Bool("ha.default-liveness", false, "TestClusterHAKill9Leader's coordinators on the default heartbeat interval and timeout")
)

// TestClusterHAKill9Leader runs Nexmark q5 on three coordinators with
// --ha (one etcd) and three workers, and kills the leading coordinator
// with SIGKILL five times, each after the leader completed a checkpoint;
// each killed one is started again at its address and stands by. No
// person or script restarts the job: a standby takes over, restores the
// latest checkpoint etcd records, and the workers register with it. The
// results must be exactly those of a run in one process, and every
// coordinator exits 0 once the job finished. weir status names the
// leader, its epoch and the standbys.
func TestClusterHAKill9Leader(t *testing.T) {
	q5 := newQ5(t)
	h := startHACluster(t, etcdtest.Start(t, 1), *killTTL, 3, 3, q5.args)
	var killed []string // the killed coordinators' logs, for a failure
	defer func() {
		if t.Failed() {
			t.Logf("killed coordinators:\n%s", strings.Join(killed, "\n----\n"))
		}
	}()
	var killedAt time.Time
	for kill := range 5 {
		l := h.leaderWithCheckpoint(t, -1)
		if kill == 0 {
			out, err := exec.Command(weirBin, "status", "--ha", h.url, "--job", "nexmark-q5", "--certs", h.certs).CombinedOutput()
			if err != nil {
				t.Fatalf("weir status: %v\n%s", err, out)
			}
			for _, want := range []string{"leader " + h.addrs[l] + ", epoch ", "standby 127.0.0.1:", "job nexmark-q5: running"} {
				if !strings.Contains(string(out), want) {
					t.Fatalf("weir status says no %q:\n%s", want, out)
				}
			}
			if n := strings.Count(string(out), "standby "); n != 2 {
				t.Fatalf("weir status lists %d standbys, want 2:\n%s", n, out)
			}
			t.Logf("weir status:\n%s", out)
		} else {
			t.Logf("kill %d: %s's first checkpoint completed %v after the kill", kill, h.addrs[l], time.Since(killedAt).Round(10*time.Millisecond))
		}
		if h.coords[l].exited() {
			t.Fatalf("the job ended after %d kills; the test needs a longer run", kill)
		}
		h.coords[l].signal(syscall.SIGKILL)
		killedAt = time.Now()
		killed = append(killed, h.coords[l].log.String())
		h.coords[l] = h.coordinator(h.addrs[l])
	}
	h.wait(t)
	t.Logf("%d results, as in one process, after 5 kills of the leader", q5.check(t))
}

// q5 is Nexmark q5 on 300k events at 8,000 a second (about 40 s), and
// its results in one process.
type q5 struct {
	dir  string
	want []string
}

func newQ5(t *testing.T) *q5 {
	q := &q5{dir: t.TempDir()}
	golden := q.job("run", "golden")
	golden[slices.Index(golden, "--throttle")+1] = "0"
	if out, err := exec.Command(weirBin, golden...).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	q.want = committedSorted(t, filepath.Join(q.dir, "golden"))
	return q
}

func (q *q5) job(role, out string, extra ...string) []string {
	return append([]string{role, "nexmark", "--query", "q5", "--events", "300k", "--rate", "2000", "--throttle", "8000", "--output", filepath.Join(q.dir, out),
		"--checkpoint-dir", filepath.Join(q.dir, "ckpt-"+out), "--parallelism", "3", "--checkpoint-interval", "100ms", "--log-level", "info"}, extra...)
}

// args are a cluster process's.
func (q *q5) args(role string, extra ...string) []string { return q.job(role, "cluster", extra...) }

// check fails the test unless the cluster's results are those of the run
// in one process, and returns how many there are.
func (q *q5) check(t *testing.T) int {
	t.Helper()
	got := committedSorted(t, filepath.Join(q.dir, "cluster"))
	if !slices.Equal(got, q.want) {
		t.Fatalf("%d results, the run in one process %d", len(got), len(q.want))
	}
	return len(got)
}

// haCluster is a job's coordinators with --ha on one etcd, and its
// workers, each a process.
type haCluster struct {
	addrs       []string
	coords      []*child
	url, certs  string
	coordinator func(addr string) *child
}

// startHACluster starts coordinators and workers of the job args gives
// the arguments of (by role).
func startHACluster(t *testing.T, e *etcdtest.Cluster, ttl string, coordinators, workers int, args func(role string, extra ...string) []string) *haCluster {
	t.Helper()
	h := &haCluster{addrs: freePorts(t, coordinators), url: "etcd://" + strings.Join(e.Hosts(), ",") + "/weir-test", certs: filepath.Join(t.TempDir(), "certs")}
	if out, err := exec.Command(weirBin, "cluster", "certs", "--out", h.certs).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	h.coordinator = func(addr string) *child {
		flags := []string{"--listen", addr, "--ha", h.url, "--ha-ttl", ttl, "--certs", h.certs}
		if !*defaultLiveness {
			flags = append(flags, "--heartbeat-interval", "200ms", "--heartbeat-timeout", "2s")
		}
		return startProc(t, args("coordinator", flags...)...)
	}
	for _, a := range h.addrs {
		h.coords = append(h.coords, h.coordinator(a))
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, c := range h.coords {
				t.Logf("coordinator %s:\n%s", h.addrs[i], c.log)
			}
		}
	})
	for i := 1; i <= workers; i++ {
		startProc(t, args("worker", "--join", strings.Join(h.addrs, ","), "--name", fmt.Sprintf("worker-%d", i), "--certs", h.certs)...)
	}
	return h
}

// leaderWithCheckpoint waits for a coordinator that leads and completed a
// checkpoint in its term, other than not, and returns it.
func (h *haCluster) leaderWithCheckpoint(t *testing.T, not int) int {
	t.Helper()
	l := -1
	waitFor(t, "a leader that completed a checkpoint", func() bool {
		for i, c := range h.coords {
			if i == not || !leads(c) {
				continue
			}
			log := c.log.String()
			if strings.Contains(log[strings.LastIndex(log, `msg="leading the job"`):], `msg="checkpoint completed"`) {
				l = i
				return true
			}
		}
		return false
	})
	return l
}

// wait waits for every coordinator to exit, and fails unless each exited 0.
func (h *haCluster) wait(t *testing.T) {
	t.Helper()
	for i, c := range h.coords {
		<-c.done
		if c.err != nil {
			t.Fatalf("coordinator %s: %v", h.addrs[i], c.err)
		}
	}
}

// TestClusterHASigstopLeader pauses the leading coordinator (SIGSTOP) for
// longer than its lease, lets the standby take over and complete a
// checkpoint, and lets the old leader go on (SIGCONT): it finds itself
// deposed, completes no checkpoint, and stands by; once the job finished
// under the new leader, it exits 0 too. The word count's output is
// exactly-once to files, Kafka and PostgreSQL (counted).
func TestClusterHASigstopLeader(t *testing.T) {
	for _, sink := range []string{"file", "kafka", "postgres"} {
		t.Run(sink, func(t *testing.T) {
			j := newJob(t, 4, 60_000)
			out, check := j.output, func(t *testing.T) {
				rep, err := wordcount.Verify(vfs.Default, j.output, j.want, false)
				if err != nil || !rep.OK() {
					t.Fatalf("%v %v", rep, err)
				}
				t.Log(rep)
			}
			switch sink {
			case "kafka":
				addr := serveKafka(t, "counts")
				out = "kafka://" + addr + "/counts"
				check = func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					lines, err := wordcount.KafkaLines(ctx, []string{addr}, "counts")
					if err != nil {
						t.Fatal(err)
					}
					rep, err := wordcount.Check(j.want, slices.Values(lines), false)
					if err != nil || !rep.OK() {
						t.Fatalf("%v %v", rep, err)
					}
					t.Log(rep)
				}
			case "postgres":
				pg := pgtest.Start(t)
				out = pg.URL + "&table=counts&mode=exactly-once"
				check = func(t *testing.T) { checkTable(t, pg.URL, "counts", "exactly-once", j.want) }
			}
			h := startHACluster(t, etcdtest.Start(t, 1), "2s", 2, 3, func(role string, extra ...string) []string {
				return append([]string{role, "wordcount", "--input", j.input, "--output", out, "--checkpoint-dir", j.ckpt,
					"--parallelism", "3", "--checkpoint-interval", "100ms", "--log-level", "info"}, extra...)
			})
			old := h.leaderWithCheckpoint(t, -1)
			paused := h.coords[old]
			paused.cmd.Process.Signal(syscall.SIGSTOP)
			stopped, mark := time.Now(), len(paused.log.String())
			next := h.leaderWithCheckpoint(t, old)
			t.Logf("the standby %s completed its first checkpoint %v after the leader was paused", h.addrs[next], time.Since(stopped).Round(10*time.Millisecond))
			paused.cmd.Process.Signal(syscall.SIGCONT)
			waitFor(t, "the old leader to stand by", func() bool {
				return strings.Contains(paused.log.String()[mark:], `msg="standing by`) || paused.exited()
			})
			after := paused.log.String()[mark:]
			if !strings.Contains(after, `msg="deposed`) || strings.Contains(after, `msg="checkpoint completed"`) {
				t.Fatalf("the old leader, woken, did not say it was deposed, or completed a checkpoint:\n%s", after)
			}
			h.wait(t)
			check(t)
		})
	}
}

// TestClusterHAEtcdFailures runs Nexmark q5 with two coordinators on an
// etcd of three members. With one member killed, the leader leads on and
// completes checkpoints. With a second killed (no quorum), it steps down,
// and no checkpoint completes while etcd has no quorum. Once the members
// are back, a coordinator leads again and the job finishes with the
// results of a run in one process.
func TestClusterHAEtcdFailures(t *testing.T) {
	q5 := newQ5(t)
	e := etcdtest.Start(t, 3)
	// NB: the lease must outlive etcd's election of a new raft leader and
	// the client's move to a live member when one dies: 5 s (the default)
	// did not, once, in a CI run on a loaded machine (3.75 s without a
	// renewal); 8 s.
	h := startHACluster(t, e, "8s", 2, 3, q5.args)
	l := h.leaderWithCheckpoint(t, -1)
	e.Kill(0)
	mark := len(h.coords[l].log.String())
	waitFor(t, "two checkpoints with one etcd member down", func() bool {
		return strings.Count(h.coords[l].log.String()[mark:], `msg="checkpoint completed"`) >= 2 || !leads(h.coords[l])
	})
	if !leads(h.coords[l]) {
		t.Fatalf("the leader stepped down with one of three etcd members down:\n%s", h.coords[l].log.String()[mark:])
	}
	e.Kill(1)
	lost := time.Now()
	waitFor(t, "the leader to step down without an etcd quorum", func() bool { return !leads(h.coords[l]) })
	t.Logf("the leader stepped down %v after etcd lost its quorum", time.Since(lost).Round(10*time.Millisecond))
	deposed := make([]int, len(h.coords)) // each coordinator's log length when the leader stepped down
	for i, c := range h.coords {
		deposed[i] = len(c.log.String())
	}
	// No quorum for longer than the lease: nobody may lead or complete
	// anything.
	quiet := time.Now().Add(10 * time.Second)
	waitFor(t, "ten seconds without an etcd quorum", func() bool { return time.Now().After(quiet) })
	for i, c := range h.coords {
		if after := c.log.String()[deposed[i]:]; strings.Contains(after, `msg="checkpoint completed"`) || strings.Contains(after, `msg="leading the job"`) {
			t.Fatalf("coordinator %s led or completed a checkpoint while etcd had no quorum:\n%s", h.addrs[i], after)
		}
	}
	e.Restart(0)
	e.Restart(1)
	e.WaitReady(30 * time.Second)
	h.wait(t)
	t.Logf("%d results, as in one process", q5.check(t))
}

// TestRunHAStandby runs the word count in two processes with --ha: one
// leads and runs it, the other stands by. The leader is killed with
// SIGKILL, or paused with SIGSTOP, after a checkpoint; the standby takes
// over (the paused leader's locks do not keep it out), restores the
// latest checkpoint etcd records, and finishes: exactly-once by counting.
// The paused leader, woken, finds itself deposed and exits 0 once it
// learns the job finished; so does a run started after that.
func TestRunHAStandby(t *testing.T) {
	e := etcdtest.Start(t, 1)
	url := "etcd://" + strings.Join(e.Hosts(), ",") + "/weir-test"
	for _, fault := range []string{"kill", "pause"} {
		t.Run(fault, func(t *testing.T) {
			j := newJob(t, 4, 250_000)
			args := []string{"run", "wordcount", "--input", j.input, "--output", j.output, "--checkpoint-dir", j.ckpt, "--parallelism", "2",
				"--checkpoint-interval", "100ms", "--ha", url + "/" + fault, "--ha-ttl", "2s", "--log-level", "info"}
			runs := []*child{startProc(t, args...), startProc(t, args...)}
			l := -1
			waitFor(t, "a leader that completed a checkpoint", func() bool {
				for i, r := range runs {
					log := r.log.String()
					if at := strings.LastIndex(log, `msg="leading the job"`); at >= 0 && strings.Contains(log[at:], `msg="checkpoint completed"`) {
						l = i
						return true
					}
				}
				return runs[0].exited() || runs[1].exited()
			})
			if l < 0 {
				t.Fatalf("a run exited before a checkpoint:\n%s\n----\n%s", runs[0].log, runs[1].log)
			}
			if fault == "kill" {
				runs[l].signal(syscall.SIGKILL)
			} else {
				runs[l].cmd.Process.Signal(syscall.SIGSTOP)
			}
			standby := runs[1-l]
			<-standby.done
			if standby.err != nil || !strings.Contains(standby.log.String(), `msg="restoring checkpoint"`) {
				t.Fatalf("the standby: %v, or it restored nothing:\n%s", standby.err, standby.log)
			}
			if fault == "pause" {
				mark := len(runs[l].log.String())
				runs[l].cmd.Process.Signal(syscall.SIGCONT)
				<-runs[l].done
				after := runs[l].log.String()[mark:]
				if runs[l].err != nil || strings.Contains(after, `msg="checkpoint completed"`) || !strings.Contains(after, "the job finished under an earlier leader") {
					t.Fatalf("the paused leader, woken: %v\n%s", runs[l].err, after)
				}
			}
			rep, err := wordcount.Verify(vfs.Default, j.output, j.want, false)
			if err != nil || !rep.OK() {
				t.Fatalf("%v %v\n%s", rep, err, standby.log)
			}
			t.Log(rep)
			late := startProc(t, args...)
			<-late.done
			if late.err != nil || !strings.Contains(late.log.String(), "the job finished under an earlier leader") {
				t.Fatalf("a run after the job finished: %v\n%s", late.err, late.log)
			}
		})
	}
}

// TestRunHATLS runs the word count with --ha on an etcd that serves TLS
// only and requires a client certificate (made by weir cluster certs):
// the run reaches it with --ha-cacert, --ha-cert and --ha-key, leads and
// finishes exactly-once, and weir status reads the leadership over TLS.
func TestRunHATLS(t *testing.T) {
	j := newJob(t, 2, 20_000)
	certs := filepath.Join(j.dir, "etcd-certs")
	if out, err := exec.Command(weirBin, "cluster", "certs", "--out", certs, "--names", "etcd,client,admin=admin,coordinator", "--hosts", "127.0.0.1").CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	pem := func(name string) string { return filepath.Join(certs, name+".pem") }
	client, err := ha.LoadTLS(pem("ca"), pem("client"), pem("client-key"))
	if err != nil {
		t.Fatal(err)
	}
	e := etcdtest.StartTLS(t, 1, etcdtest.TLS{Cert: pem("etcd"), Key: pem("etcd-key"), CA: pem("ca"), Client: client})
	url := "etcd://" + strings.Join(e.Hosts(), ",") + "/weir-test"
	tlsFlags := []string{"--ha-cacert", pem("ca"), "--ha-cert", pem("client"), "--ha-key", pem("client-key")}
	run := startProc(t, append([]string{"run", "wordcount", "--input", j.input, "--output", j.output, "--checkpoint-dir", j.ckpt,
		"--checkpoint-interval", "100ms", "--ha", url, "--ha-ttl", "2s", "--log-level", "info"}, tlsFlags...)...)
	<-run.done
	if run.err != nil || !strings.Contains(run.log.String(), `msg="leading the job"`) {
		t.Fatalf("the run over TLS to etcd: %v\n%s", run.err, run.log)
	}
	rep, err := wordcount.Verify(vfs.Default, j.output, j.want, false)
	if err != nil || !rep.OK() {
		t.Fatalf("%v %v", rep, err)
	}
	// The job ended; status says so, over TLS.
	out, _ := exec.Command(weirBin, append([]string{"status", "--ha", url, "--job", "wordcount", "--certs", certs}, tlsFlags...)...).CombinedOutput()
	if !strings.Contains(string(out), "job wordcount ended: finished") {
		t.Fatalf("weir status over TLS to etcd:\n%s", out)
	}
	// Without a client certificate, etcd answers nothing: status fails,
	// and a run says so rather than campaign in silence.
	if out, err := exec.Command(weirBin, "status", "--ha", url, "--job", "wordcount", "--certs", certs, "--timeout", "2s").CombinedOutput(); err == nil {
		t.Fatalf("weir status reached the TLS-only etcd without TLS:\n%s", out)
	}
	plain := startProc(t, "run", "wordcount", "--input", j.input, "--output", j.output, "--checkpoint-dir", j.ckpt, "--ha", url, "--ha-ttl", "2s", "--log-level", "info")
	waitFor(t, "a run without TLS flags to say it cannot reach etcd", func() bool {
		return strings.Contains(plain.log.String(), "cannot reach etcd") || plain.exited()
	})
	plain.signal(syscall.SIGKILL)
	if !strings.Contains(plain.log.String(), "cannot reach etcd") || !strings.Contains(plain.log.String(), "--ha-cacert") {
		t.Fatalf("a run without TLS flags against a TLS-only etcd:\n%s", plain.log)
	}
	t.Log(rep)
}

// logTime is the time of the first line of log that holds msg, and the
// value of its field key ("" for none).
func logTime(t *testing.T, log, msg, key string) (time.Time, string) {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `msg="`+msg) {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		var v string
		if key != "" {
			_, rest, _ := strings.Cut(line, " "+key+"=")
			v, _, _ = strings.Cut(rest, " ")
		}
		return at, v
	}
	t.Fatalf("no %q in the log:\n%s", msg, log)
	return time.Time{}, ""
}

// TestClusterHALeaderCutOffFromEtcdNetns runs the word count with two
// coordinators (--ha, lease 2 s) and two workers, each in a network
// namespace of its own, and etcd on the bridge. A blackhole route cuts
// the leader off from etcd alone (its workers still reach it). It steps
// down on its own clock before the standby leads: by the processes' logs,
// its "leadership is lost" comes before the standby's "leading the job",
// whose epoch is larger. After the heal it stands by, and the job
// finishes under the new leader with every count exactly once.
func TestClusterHALeaderCutOffFromEtcdNetns(t *testing.T) {
	net := newNetns(t)
	for h := 1; h <= 4; h++ {
		net.host(h)
	}
	e := etcdtest.StartOn(t, 1, net.subnet+".254")
	j := newJob(t, 4, 200_000)
	certs := filepath.Join(j.dir, "certs")
	if out, err := exec.Command(weirBin, "cluster", "certs", "--out", certs, "--hosts", strings.Join([]string{net.addr(1), net.addr(2), net.addr(3), net.addr(4)}, ",")).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	args := func(host int, role string, extra ...string) []string {
		return append([]string{"netns", "exec", net.ns(host), weirBin, role, "wordcount", "--input", j.input, "--output", j.output, "--checkpoint-dir", j.ckpt,
			"--parallelism", "2", "--checkpoint-interval", "100ms", "--certs", certs, "--log-level", "info"}, extra...)
	}
	url := "etcd://" + strings.Join(e.Hosts(), ",") + "/weir-test"
	coords := map[int]*child{}
	for h := 1; h <= 2; h++ {
		coords[h] = startCmd(t, "ip", args(h, "coordinator", "--listen", net.addr(h)+":7700", "--ha", url, "--ha-ttl", "2s",
			"--heartbeat-interval", "200ms", "--heartbeat-timeout", "2s")...)
	}
	join := net.addr(1) + ":7700," + net.addr(2) + ":7700"
	for h := 3; h <= 4; h++ {
		startCmd(t, "ip", args(h, "worker", "--join", join, "--name", fmt.Sprintf("worker-%d", h-2), "--listen", net.addr(h)+":0")...)
	}
	defer func() {
		if t.Failed() {
			for h, c := range coords {
				t.Logf("coordinator %d:\n%s", h, c.log)
			}
		}
	}()
	leader := 0
	waitFor(t, "a leader that completed a checkpoint", func() bool {
		for h, c := range coords {
			log := c.log.String()
			if at := strings.LastIndex(log, `msg="leading the job"`); at >= 0 && strings.Contains(log[at:], `msg="checkpoint completed"`) {
				leader = h
				return true
			}
		}
		return false
	})
	standby := 3 - leader
	route := []string{"-n", net.ns(leader), "route", "add", "blackhole", net.subnet + ".254/32"}
	net.ip(route...)
	waitFor(t, "the standby to lead", func() bool { return strings.Contains(coords[standby].log.String(), `msg="leading the job"`) })
	route[3] = "del"
	net.ip(route...)
	lost, oldEpoch := logTime(t, coords[leader].log.String(), "the job's leadership is lost", "epoch")
	led, newEpoch := logTime(t, coords[standby].log.String(), "leading the job", "epoch")
	if !lost.Before(led) {
		t.Fatalf("the cut-off leader (epoch %s) stepped down at %s, the standby led (epoch %s) at %s: two leaders at once",
			oldEpoch, lost.Format(time.StampMilli), newEpoch, led.Format(time.StampMilli))
	}
	o, err1 := strconv.Atoi(oldEpoch)
	n, err2 := strconv.Atoi(newEpoch)
	if err1 != nil || err2 != nil || n <= o {
		t.Fatalf("epochs: the old leader's %q, the new one's %q", oldEpoch, newEpoch)
	}
	t.Logf("the cut-off leader (epoch %s) stepped down %v before the standby led (epoch %s)", oldEpoch, led.Sub(lost).Round(time.Millisecond), newEpoch)
	for h, c := range coords {
		<-c.done
		if c.err != nil {
			t.Fatalf("coordinator %d: %v", h, c.err)
		}
	}
	rep, err := wordcount.Verify(vfs.Default, j.output, j.want, false)
	if err != nil || !rep.OK() {
		t.Fatalf("%v %v", rep, err)
	}
	t.Log(rep)
}
