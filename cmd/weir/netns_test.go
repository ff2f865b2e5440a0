package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// netns is a test network: one namespace per process, each with its own
// address on a bridge in the root namespace, reached through a veth pair.
type netns struct {
	t      *testing.T
	id     string
	subnet string // "10.213.N"
	// workers are the processes netnsCluster started, by name.
	workers map[string]*child
}

// newNetns makes the network, or skips the test where it cannot (not root,
// no ip) unless CI=true, where it must run.
func newNetns(t *testing.T) *netns {
	t.Helper()
	_, err := exec.LookPath("ip")
	if os.Geteuid() != 0 || err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the network namespace test needs root and ip (iproute2) under CI=true: euid %d, ip: %v", os.Geteuid(), err)
		}
		t.Skipf("needs root and ip (iproute2) to make network namespaces: euid %d, ip: %v", os.Geteuid(), err)
	}
	n := &netns{t: t, id: fmt.Sprintf("%04x", rand.IntN(1<<16)), subnet: fmt.Sprintf("10.213.%d", rand.IntN(250))}
	t.Cleanup(n.remove)
	n.ip("link", "add", n.bridge(), "type", "bridge")
	n.ip("addr", "add", n.subnet+".254/24", "dev", n.bridge())
	n.ip("link", "set", n.bridge(), "up")
	return n
}

func (n *netns) bridge() string        { return "wbr" + n.id }
func (n *netns) ns(host int) string    { return fmt.Sprintf("weir-%s-%d", n.id, host) }
func (n *netns) veth(host int) string  { return fmt.Sprintf("wv%s%d", n.id, host) }
func (n *netns) addr(host int) string  { return fmt.Sprintf("%s.%d", n.subnet, host) }
func (n *netns) inner(host int) string { return fmt.Sprintf("wp%s%d", n.id, host) }

func (n *netns) ip(args ...string) {
	n.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		n.t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// host makes namespace host with address <subnet>.host.
func (n *netns) host(host int) {
	n.t.Helper()
	ns, veth, inner := n.ns(host), n.veth(host), n.inner(host)
	n.ip("netns", "add", ns)
	n.ip("link", "add", veth, "type", "veth", "peer", "name", inner)
	n.ip("link", "set", inner, "netns", ns)
	n.ip("link", "set", veth, "master", n.bridge(), "up")
	n.ip("-n", ns, "addr", "add", n.addr(host)+"/24", "dev", inner)
	n.ip("-n", ns, "link", "set", inner, "up")
	n.ip("-n", ns, "link", "set", "lo", "up")
}

// cut and heal take host's link down and up: a partition.
func (n *netns) cut(host int)  { n.ip("link", "set", n.veth(host), "down") }
func (n *netns) heal(host int) { n.ip("link", "set", n.veth(host), "up") }

func (n *netns) remove() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, line := range strings.Split(string(out), "\n") {
		if name, _, _ := strings.Cut(line, " "); strings.HasPrefix(name, "weir-"+n.id+"-") {
			exec.Command("ip", "netns", "delete", name).Run()
		}
	}
	exec.Command("ip", "link", "delete", n.bridge()).Run()
}

// netnsCluster makes four namespaces and runs the word count's coordinator
// in the first (heartbeats every 200 ms, timeout 2 s) and worker-1 to
// worker-3 in the others, two slots each (the job, at parallelism 3, runs
// on two or three of them).
func netnsCluster(t *testing.T) (*netns, *clusterJob) {
	net := newNetns(t)
	for h := 1; h <= 4; h++ {
		net.host(h)
	}
	j := &clusterJob{job: newJob(t, 4, 400_000)}
	j.certs = filepath.Join(j.dir, "certs")
	hosts := []string{net.addr(1), net.addr(2), net.addr(3), net.addr(4)}
	if out, err := exec.Command(weirBin, "cluster", "certs", "--out", j.certs, "--hosts", strings.Join(hosts, ",")).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	in := func(host int, args ...string) []string {
		return append([]string{"netns", "exec", net.ns(host), weirBin}, args...)
	}
	j.addr = net.addr(1) + ":7700"
	j.coord = startCmd(t, "ip", in(1, j.args("coordinator", "--listen", j.addr, "--heartbeat-interval", "200ms", "--heartbeat-timeout", "2s")...)...)
	net.workers = map[string]*child{}
	for h := 2; h <= 4; h++ {
		name := fmt.Sprintf("worker-%d", h-1)
		net.workers[name] = startCmd(t, "ip", in(h, j.args("worker", "--join", j.addr, "--name", name,
			"--listen", net.addr(h)+":0", "--slots", "2")...)...)
	}
	return net, j
}

// TestClusterPartitionNetns runs the word count on a coordinator and three
// workers, each in a network namespace of its own, and cuts one worker's
// link mid-run. The coordinator loses the worker and restarts the job on
// the others' slots; the cut-off worker fences itself, so its old tasks
// commit nothing; when the link is back it registers again. The output
// holds every count exactly once.
func TestClusterPartitionNetns(t *testing.T) {
	net, j := netnsCluster(t)
	workers := map[int]*child{}
	for h := 2; h <= 4; h++ {
		workers[h] = net.workers[fmt.Sprintf("worker-%d", h-1)]
	}
	waitFor(t, "a checkpoint", func() bool { return j.checkpoints() >= 2 || j.coord.exited() })
	if j.coord.exited() {
		t.Fatalf("coordinator exited early (%v):\n%s", j.coord.err, j.coord.log)
	}
	// Cut a worker that runs tasks (the job needs 3 slots of 6: one worker
	// may have none, or may not have registered before the placement).
	m := placedWorker.FindStringSubmatch(j.coord.log.String())
	if m == nil {
		t.Fatalf("no placement in the coordinator's log:\n%s", j.coord.log)
	}
	var k int
	if _, err := fmt.Sscanf(m[1], "worker-%d", &k); err != nil {
		t.Fatal(err)
	}
	cut, name := k+1, m[1] // worker-k runs on host k+1
	before := strings.Count(j.coord.log.String(), "job failed; restarting")
	net.cut(cut)
	t.Logf("cut %s's link (%s)", net.ns(cut), name)
	waitFor(t, "the partitioned worker to fence itself", func() bool {
		return strings.Contains(workers[cut].log.String(), "fencing") || j.coord.exited()
	})
	waitFor(t, "the job to restart and checkpoint without the worker", func() bool {
		log := j.coord.log.String()
		i := strings.LastIndex(log, "job failed; restarting")
		return j.coord.exited() || strings.Count(log, "job failed; restarting") > before && strings.Contains(log[i:], `msg="checkpoint completed"`)
	})
	if !strings.Contains(j.coord.log.String(), `msg="worker lost: no heartbeat within the timeout" worker=`+name+" ") {
		t.Fatalf("the coordinator did not lose %s during the cut:\n%s", name, j.coord.log)
	}
	net.heal(cut)
	waitFor(t, "the worker to register again", func() bool {
		return strings.Count(workers[cut].log.String(), "msg=registered") >= 2 || j.coord.exited()
	})
	t.Log("healed; the worker registered again")
	t.Log(j.finish(t, "\ncut worker's log:\n"+workers[cut].log.String()))
}

// placedRe finds the coordinator's placements: attempt, worker.
var placedRe = regexp.MustCompile(`msg="placed tasks" attempt=(\d+) worker=(\S+)`)

// placed returns the workers of the latest attempt placed, and its number.
func placed(log string) (int, []string) {
	latest, workers := 0, []string(nil)
	for _, m := range placedRe.FindAllStringSubmatch(log, -1) {
		a, _ := strconv.Atoi(m[1])
		if a > latest {
			latest, workers = a, nil
		}
		if a == latest {
			workers = append(workers, m[2])
		}
	}
	slices.Sort(workers)
	return latest, workers
}

// TestDataPathPartitionNetns cuts only the data path between two workers
// that run tasks (blackhole routes in their namespaces), while both still
// reach the coordinator: their heartbeats go on, so only the data
// connection can tell. It fails the attempt as a silent peer (before, a
// cut waited for TCP: checkpoints stopped for 107 s on a 60 s cut), and
// the job restarts on workers that can reach each other; after the heal it
// finishes with every count exactly once.
func TestDataPathPartitionNetns(t *testing.T) {
	net, j := netnsCluster(t)
	waitFor(t, "a checkpoint", func() bool { return j.checkpoints() >= 2 || j.coord.exited() })
	if j.coord.exited() {
		t.Fatalf("coordinator exited early (%v):\n%s", j.coord.err, j.coord.log)
	}
	attempt, ws := placed(j.coord.log.String())
	if len(ws) < 2 {
		t.Skipf("attempt %d runs on %v: no data path between workers to cut", attempt, ws)
	}
	a, b := ws[0], ws[1]
	host := func(name string) int { k, _ := strconv.Atoi(strings.TrimPrefix(name, "worker-")); return k + 1 }
	route := func(op, from, to string) {
		net.ip("-n", net.ns(host(from)), "route", op, "blackhole", net.addr(host(to))+"/32")
	}
	route("add", a, b)
	route("add", b, a)
	cutAt := time.Now()
	t.Logf("cut the data path between %s and %s (attempt %d runs on %v)", a, b, attempt, ws)
	waitFor(t, "the attempt to fail on the silent data connection", func() bool {
		return strings.Contains(j.coord.log.String(), "the peer went silent") || j.coord.exited()
	})
	t.Logf("the attempt failed %v after the cut (heartbeat timeout 2s)", time.Since(cutAt).Round(time.Millisecond))
	waitFor(t, "the job to checkpoint on workers that reach each other", func() bool {
		log := j.coord.log.String()
		n, now := placed(log)
		i := strings.LastIndex(log, `msg="placed tasks" attempt=`+strconv.Itoa(n))
		return j.coord.exited() || n > attempt && !(slices.Contains(now, a) && slices.Contains(now, b)) && strings.Contains(log[i:], `msg="checkpoint completed"`)
	})
	if !strings.Contains(j.coord.log.String(), "a data connection between two workers went silent") {
		t.Fatalf("the coordinator did not keep %s and %s apart:\n%s", a, b, j.coord.log)
	}
	route("del", a, b)
	route("del", b, a)
	t.Log(j.finish(t, ""))
}
