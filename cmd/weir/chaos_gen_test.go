package main

import (
	"errors"
	"flag"
	"fmt"
	"maps"
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
	"github.com/weirstream/weir/internal/etcdtest"
)

// TestChaosGen's flags. A failing seed replays its setup and its schedule
// of faults exactly (not the moments the processes reach, which the
// machine's load decides):
//
//	go test ./cmd/weir -run TestChaosGen -v -chaos.first 17
//	nice -n 10 go test ./cmd/weir -run TestChaosGen -v -chaos.seeds 50 -timeout 2h
var (
	chaosSeeds = flag.Int("chaos.seeds", 1, "TestChaosGen: how many seeds to run, one after another")
	chaosFirst = flag.Uint64("chaos.first", 0, "TestChaosGen: the first seed (0: drawn from the time, and logged)")
	chaosDraw  = flag.Bool("chaos.draw", false, "TestChaosGen: log each seed's setup and faults, and run nothing")
	chaosKeep  = flag.Bool("chaos.keep", false, "TestChaosGen: write the process logs of a seed that passed too")
	// NB: CI runs this package with -short, one seed; the first three
	// faults keep it within its time.
	chaosFaults = flag.Int("chaos.faults", 0, "TestChaosGen: inject at most this many of a seed's faults (0: all; 3 under -short or -race when the seed is drawn from the time)")
	chaosLogs   = flag.String("chaos.logs", "", "TestChaosGen: where a failing seed's process logs go (default: a new directory in the temporary directory)")
)

// TestChaosGen draws, from each seed, a job (the word count, or a Nexmark
// query: joins, windows and their timers over event time) on a
// coordinator (or two with --ha on etcd) and worker processes, and a
// schedule of faults
// at drawn moments: workers killed with SIGKILL and started again (under
// the same name or a new one), paused with SIGSTOP for less or more than
// the heartbeat timeout, two killed at once, the coordinator (the HA
// leader) killed and started again, and the job stopped with a savepoint
// and restored from it at another parallelism. Every count must be in the
// output exactly once (a query's results must be those of a run in one
// process without faults), and every process must exit 0 once the job
// finished. A seed takes 15–40 s.
func TestChaosGen(t *testing.T) {
	first := *chaosFirst
	if first == 0 {
		first = uint64(time.Now().UnixNano()) % 1_000_000
	}
	most := *chaosFaults
	if most == 0 && fewer() && *chaosFirst == 0 {
		most = 3
	}
	for seed := first; seed < first+uint64(*chaosSeeds); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			s := drawChaos(seed)
			if most > 0 && len(s.faults) > most {
				t.Logf("the first %d of %d faults (-chaos.faults)", most, len(s.faults))
				s.faults = s.faults[:most]
			}
			t.Logf("-chaos.first %d: %v", seed, s)
			if *chaosDraw {
				return
			}
			newChaosRun(t, s).run()
		})
	}
}

// faultKind is a kind of fault TestChaosGen injects.
type faultKind int

const (
	killWorker       faultKind = iota // SIGKILL, then started again
	pauseWorker                       // SIGSTOP, then SIGCONT
	killCoordinator                   // SIGKILL of the (leading) coordinator, then started again
	savepointRescale                  // savepoint --stop, restored at another parallelism
)

// chaosFault is a fault and its moment: during the first restore after the
// previous fault's, or once checkpoints more checkpoints completed, and
// delay after.
type chaosFault struct {
	kind          faultKind
	duringRestore bool
	checkpoints   int
	delay         time.Duration
	// victims are indexes into the workers (killWorker, pauseWorker).
	victims []int
	// newNames: killed workers come back under names of their own.
	newNames bool
	// damageLocal: a byte of a file in a killed worker's local recovery
	// directory is flipped before it starts again (a disk's fault: a kill
	// never tears a local copy, which is renamed into place whole).
	damageLocal bool
	// pause is how long pauseWorker pauses its victim.
	pause time.Duration
	// parallelism is savepointRescale's.
	parallelism int
}

func (f chaosFault) String() string {
	var what string
	switch f.kind {
	case killWorker:
		what = fmt.Sprintf("kill workers %v (new names: %v, damage the local copy: %v)", f.victims, f.newNames, f.damageLocal)
	case pauseWorker:
		what = fmt.Sprintf("pause worker %v for %v", f.victims, f.pause)
	case killCoordinator:
		what = "kill the coordinator"
	case savepointRescale:
		what = fmt.Sprintf("stop with a savepoint, restore at parallelism %d", f.parallelism)
	}
	if f.duringRestore {
		return what + " during a restore"
	}
	return fmt.Sprintf("%s after %d checkpoints + %v", what, f.checkpoints, f.delay)
}

// chaosSetup is a job and its faults, drawn from a seed.
type chaosSetup struct {
	seed uint64
	// query is the Nexmark query the job runs; "" for the word count.
	query                       string
	flags                       []string // every process's checkpoint and state flags
	pebble, local               bool     // a state directory, a local recovery directory per process
	workers, slots, parallelism int
	ha                          bool
	faults                      []chaosFault
}

func (s chaosSetup) String() string {
	var b strings.Builder
	job := "wordcount"
	if s.query != "" {
		job = "nexmark " + s.query
	}
	fmt.Fprintf(&b, "%s, %d workers × %d slots, parallelism %d, ha %v, flags %v", job, s.workers, s.slots, s.parallelism, s.ha, s.flags)
	for i, f := range s.faults {
		fmt.Fprintf(&b, "\n  fault %d: %v", i+1, f)
	}
	return b.String()
}

// chaosWordsPerMs is about how fast the job counts (--pace): its 640,000
// words take about 20 s undisturbed, to outlast most schedules of faults.
const chaosWordsPerMs = 32

// chaosEvents and chaosThrottle are a Nexmark job's: about 20 s too.
const chaosEvents, chaosThrottle = 300_000, 15_000

// chaosQueries are the Nexmark queries TestChaosGen draws from: a join of
// keyed state (q3), windowed joins (q4, q8), sliding windows (q5) and a
// window's maximum joined back (q7).
var chaosQueries = []string{"q3", "q4", "q5", "q7", "q8"}

// heartbeatTimeout is the coordinators' --heartbeat-timeout.
const heartbeatTimeout = 2 * time.Second

// drawChaos draws a setup from seed.
func drawChaos(seed uint64) chaosSetup {
	rng := rand.New(rand.NewPCG(seed, 0xc4a05))
	// more draws what was added later, so that a seed's earlier draws stay.
	more := rand.New(rand.NewPCG(seed, 0x3012e))
	s := chaosSetup{seed: seed}
	switch rng.IntN(3) {
	case 0:
		s.flags = []string{"--checkpoint-alignment", "aligned"}
	case 1:
		s.flags = []string{"--checkpoint-alignment", "unaligned"}
	default:
		s.flags = []string{"--aligned-checkpoint-timeout", []string{"1ms", "20ms"}[rng.IntN(2)]}
	}
	s.flags = append(s.flags, "--checkpoint-interval", []string{"50ms", "100ms", "200ms", "300ms"}[rng.IntN(4)])
	if s.pebble = rng.IntN(2) == 0; s.pebble {
		s.flags = append(s.flags, "--state-backend", "pebble")
	}
	if rng.IntN(3) == 0 {
		s.flags = append(s.flags, "--incremental=false")
	}
	if s.local = rng.IntN(2) == 0; s.local {
		s.flags = append(s.flags, "--local-recovery")
	}
	s.workers, s.slots = 2+rng.IntN(3), 1+rng.IntN(2)
	maxP := min(4, s.workers*s.slots)
	s.parallelism = 1 + rng.IntN(maxP)
	s.ha = rng.IntN(3) == 0
	p := s.parallelism
	restores := false // the previous fault makes the job restore
	for range 3 + rng.IntN(6) {
		f := chaosFault{checkpoints: rng.IntN(4), delay: time.Duration(rng.IntN(300)) * time.Millisecond}
		switch r := rng.IntN(10); {
		case r < 3:
			f.kind, f.victims, f.newNames = killWorker, []int{rng.IntN(s.workers)}, rng.IntN(3) == 0
		case r < 4:
			f.kind, f.victims, f.newNames = killWorker, rng.Perm(s.workers)[:2], rng.IntN(3) == 0
		case r < 6:
			f.kind, f.victims = pauseWorker, []int{rng.IntN(s.workers)}
			if rng.IntN(2) == 0 {
				f.pause = heartbeatTimeout/10 + time.Duration(rng.IntN(int(heartbeatTimeout/2)))
			} else {
				f.pause = heartbeatTimeout + 500*time.Millisecond + time.Duration(rng.IntN(int(time.Second)))
			}
		case r < 8:
			f.kind = killCoordinator
		default:
			f.kind, f.parallelism = savepointRescale, 1+rng.IntN(maxP)
			if f.parallelism == p && maxP > 1 {
				f.parallelism = 1 + (p % maxP)
			}
			p = f.parallelism
		}
		// A savepoint is taken of a running job.
		f.duringRestore = restores && f.kind != savepointRescale && rng.IntN(3) == 0
		restores = f.kind != pauseWorker || f.pause > heartbeatTimeout
		s.faults = append(s.faults, f)
	}
	s.flags = append(s.flags, "--checkpoints-retained", strconv.Itoa(1+more.IntN(3)))
	for i, f := range s.faults {
		s.faults[i].damageLocal = f.kind == killWorker && s.local && !f.newNames && more.IntN(2) == 0
	}
	if job := rand.New(rand.NewPCG(seed, 0x10b5)); job.IntN(2) == 0 {
		s.query = chaosQueries[job.IntN(len(chaosQueries))]
	}
	return s
}

// chaosRun is a seed's job: its processes and what befell them.
type chaosRun struct {
	t     *testing.T
	s     chaosSetup
	j     *job
	certs string
	url   string // etcd's, with --ha
	addrs []string
	// coords are the coordinators now, by address; workers, the workers now.
	coords  []*child
	workers []*chaosWorker
	// procs are every process started, with a label, for the logs.
	procs       []chaosProc
	names       int // worker names used
	parallelism int
	restore     string // a coordinator's --restore: "", "latest" or a savepoint
	start       time.Time
	timeline    []string
	// golden are a Nexmark job's results in one process without faults.
	golden []string
}

type chaosWorker struct {
	name string
	p    *child
}

type chaosProc struct {
	label string
	p     *child
}

// chaosNames is how many worker names the certificates hold.
const chaosNames = 32

func newChaosRun(t *testing.T, s chaosSetup) *chaosRun {
	r := &chaosRun{t: t, s: s, j: newJob(t, 4, 20_000), parallelism: s.parallelism, start: time.Now()}
	if s.query != "" {
		r.golden = r.nexmarkGolden()
	}
	r.certs = filepath.Join(r.j.dir, "certs")
	names := []string{"coordinator", "admin"}
	for i := 1; i <= chaosNames; i++ {
		names = append(names, fmt.Sprintf("worker-%d", i))
	}
	if out, err := exec.Command(weirBin, "cluster", "certs", "--out", r.certs, "--names", strings.Join(names, ",")).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	n := 1
	if s.ha {
		n = 2
		r.url = "etcd://" + strings.Join(etcdtest.Start(t, 1).Hosts(), ",") + "/weir-chaos"
	}
	r.addrs = freePorts(t, n)
	t.Cleanup(r.dumpLogs)
	return r
}

// note logs what happened when, for the timeline a failure prints.
func (r *chaosRun) note(format string, args ...any) {
	line := fmt.Sprintf("%6.2fs ", time.Since(r.start).Seconds()) + fmt.Sprintf(format, args...)
	r.timeline = append(r.timeline, line)
	r.t.Log(line)
}

// fail fails the seed, with the timeline.
func (r *chaosRun) fail(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("%s\ntimeline:\n%s", fmt.Sprintf(format, args...), strings.Join(r.timeline, "\n"))
}

// dumpLogs writes every process's log to a directory when the seed failed.
func (r *chaosRun) dumpLogs() {
	if !r.t.Failed() && !*chaosKeep {
		return
	}
	dir := *chaosLogs
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "weir-chaos-"); err != nil {
			r.t.Log(err)
			return
		}
	}
	dir = filepath.Join(dir, strings.ReplaceAll(r.t.Name(), "/", "_"))
	os.MkdirAll(dir, 0o755)
	for i, p := range r.procs {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("%02d-%s.log", i, strings.ReplaceAll(p.label, " ", "-"))), []byte(p.p.log.String()), 0o644)
	}
	os.WriteFile(filepath.Join(dir, "timeline.txt"), []byte(r.s.String()+"\n"+strings.Join(r.timeline, "\n")+"\n"), 0o644)
	r.t.Logf("the processes' logs are in %s", dir)
}

// nexmarkGolden runs the seed's query in one process, at the parallelism
// the chaos starts with (the generator's splits, which a restore keeps,
// are the first start's parallelism), and returns its results, sorted.
func (r *chaosRun) nexmarkGolden() []string {
	dir := filepath.Join(r.j.dir, "golden")
	out, err := exec.Command(weirBin, "run", "nexmark", "--query", r.s.query, "--events", strconv.Itoa(chaosEvents), "--rate", "2000",
		"--output", filepath.Join(dir, "out"), "--checkpoint-dir", filepath.Join(dir, "ckpt"), "--parallelism", strconv.Itoa(r.s.parallelism)).CombinedOutput()
	if err != nil {
		r.t.Fatalf("the query in one process: %v\n%s", err, out)
	}
	golden := committedSorted(r.t, filepath.Join(dir, "out"))
	if len(golden) == 0 {
		r.t.Fatalf("%s found no results", r.s.query)
	}
	return golden
}

// args are a process's: the job's flags, and its own directories.
func (r *chaosRun) args(role, proc string, extra ...string) []string {
	a := []string{role, "wordcount", "--input", r.j.input, "--pace", strconv.Itoa(max(1, chaosWordsPerMs/r.parallelism))}
	if r.s.query != "" {
		a = []string{role, "nexmark", "--query", r.s.query, "--events", strconv.Itoa(chaosEvents), "--rate", "2000", "--throttle", strconv.Itoa(chaosThrottle)}
	}
	a = append(a, "--output", r.j.output, "--checkpoint-dir", r.j.ckpt, "--parallelism", strconv.Itoa(r.parallelism),
		"--certs", r.certs, "--log-level", "info", "--restart-delay", "200ms")
	a = append(a, r.s.flags...)
	if r.s.pebble {
		a = append(a, "--state-dir", filepath.Join(r.j.dir, "state", proc))
	}
	if r.s.local {
		a = append(a, "--local-recovery-dir", filepath.Join(r.j.dir, "local", proc))
	}
	return append(a, extra...)
}

func (r *chaosRun) proc(label string, args []string) *child {
	p := startProc(r.t, args...)
	r.procs = append(r.procs, chaosProc{label, p})
	return p
}

// coordinator starts the coordinator at address i.
func (r *chaosRun) coordinator(i int) {
	flags := []string{"--listen", r.addrs[i], "--heartbeat-interval", "200ms", "--heartbeat-timeout", heartbeatTimeout.String(),
		"--web", "127.0.0.1:0", "--web-token", "s3cret", "--web-linger", "0"}
	if r.s.ha {
		flags = append(flags, "--ha", r.url, "--ha-ttl", "2s")
	}
	if r.restore != "" {
		flags = append(flags, "--restore", r.restore)
	}
	name := fmt.Sprintf("coordinator-%d", i)
	r.coords[i] = r.proc(name, r.args("coordinator", name, flags...))
}

// worker starts worker i under name.
func (r *chaosRun) worker(i int, name string) {
	r.workers[i] = &chaosWorker{name, r.proc(name, r.args("worker", name, "--join", strings.Join(r.addrs, ","), "--name", name, "--slots", strconv.Itoa(r.s.slots)))}
}

func (r *chaosRun) newName() string {
	r.names++
	if r.names > chaosNames {
		r.fail("more than %d worker names", chaosNames)
	}
	return fmt.Sprintf("worker-%d", r.names)
}

// count counts msg in every coordinator's log, of those killed too.
func (r *chaosRun) count(msg string) int {
	n := 0
	for _, p := range r.procs {
		if strings.HasPrefix(p.label, "coordinator") {
			n += strings.Count(p.p.log.String(), `msg="`+msg+`"`)
		}
	}
	return n
}

// ended reports whether a coordinator exited that no fault stopped: the
// job ended.
func (r *chaosRun) ended() bool {
	return slices.ContainsFunc(r.coords, (*child).exited)
}

// await waits for f's moment; it reports false if the job ended first.
func (r *chaosRun) await(f chaosFault, checkpoints, restores int) bool {
	if f.duringRestore {
		// The previous fault may have hit a worker without tasks, or
		// restores may be slow to start: after a while, the fault goes on
		// without one.
		deadline := time.Now().Add(heartbeatTimeout + 3*time.Second)
		r.waitFor("a restore", func() bool {
			return r.count("restoring checkpoint") > restores || r.ended() || time.Now().After(deadline)
		})
		if time.Now().After(deadline) {
			r.note("no restore began within %v of the previous fault", heartbeatTimeout+3*time.Second)
		}
	} else {
		r.waitFor(fmt.Sprintf("%d checkpoints", f.checkpoints), func() bool {
			return r.count("checkpoint completed") >= checkpoints+f.checkpoints || r.ended()
		})
		// The drawn moment of the fault, not a wait for a condition.
		time.Sleep(f.delay)
	}
	return !r.ended()
}

// waitFor polls cond until it holds; a minute without fails the seed: the
// job is stuck.
func (r *chaosRun) waitFor(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			r.fail("no %s within a minute: stuck", what)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition
	}
}

// exits waits for p to exit, for limit at most, and fails unless it
// exited 0.
func (r *chaosRun) exits(label string, p *child, limit time.Duration) {
	r.t.Helper()
	select {
	case <-p.done:
	case <-time.After(limit):
		r.fail("%s did not exit within %v of the job's end", label, limit)
	}
	if p.err != nil {
		r.fail("%s exited: %v", label, p.err)
	}
}

func (r *chaosRun) run() {
	r.coords = make([]*child, len(r.addrs))
	for i := range r.addrs {
		r.coordinator(i)
	}
	r.workers = make([]*chaosWorker, r.s.workers)
	for i := range r.workers {
		r.worker(i, r.newName())
	}
	applied := 0
	for i, f := range r.s.faults {
		checkpoints, restores := r.count("checkpoint completed"), r.count("restoring checkpoint")
		if !r.await(f, checkpoints, restores) {
			break
		}
		r.note("fault %d: %v", i+1, f)
		if r.inject(i, f) {
			applied++
		}
	}
	r.note("%d of %d faults applied; waiting for the job to end", applied, len(r.s.faults))
	for i, c := range r.coords {
		r.exits(fmt.Sprintf("coordinator %s", r.addrs[i]), c, 2*time.Minute)
	}
	result := r.verify()
	for _, w := range r.workers {
		if !strings.Contains(w.p.log.String(), "msg=registered") {
			// Started as the job ended, it never heard from the coordinator,
			// and looks for one until it is stopped (weir worker --help).
			r.note("%s never registered; stopping it", w.name)
			w.p.signal(syscall.SIGTERM)
			continue
		}
		r.exits(w.name, w.p, 30*time.Second)
	}
	r.note("%d restores, %d checkpoints: %s", r.count("restoring checkpoint"), r.count("checkpoint completed"), result)
}

// verify fails the seed unless the output is exactly what the job makes
// without faults, and says what it found.
func (r *chaosRun) verify() string {
	if r.s.query == "" {
		rep, err := wordcount.Verify(vfs.Default, r.j.output, r.j.want, false)
		if err != nil {
			r.t.Fatal(err)
		}
		if !rep.OK() {
			r.fail("%v", rep)
		}
		return rep.String()
	}
	got := committedSorted(r.t, r.j.output)
	if !slices.Equal(got, r.golden) {
		// By line: how many times each is in the output, less how many
		// in the golden run's.
		surplus := map[string]int{}
		for _, l := range got {
			surplus[l]++
		}
		for _, l := range r.golden {
			surplus[l]--
		}
		var lost, duplicated, foreign []string
		for _, l := range slices.Sorted(maps.Keys(surplus)) {
			_, golden := slices.BinarySearch(r.golden, l)
			switch n := surplus[l]; {
			case n < 0:
				lost = append(lost, l)
			case n > 0 && golden:
				duplicated = append(duplicated, l)
			case n > 0:
				foreign = append(foreign, l)
			}
		}
		first := func(ls []string) []string { return ls[:min(3, len(ls))] }
		r.fail("%d results, %d in one process without faults: %d lost (the first: %q), %d duplicated (%q), %d not in the run in one process (%q)",
			len(got), len(r.golden), len(lost), first(lost), len(duplicated), first(duplicated), len(foreign), first(foreign))
	}
	return fmt.Sprintf("%d results, as in one process", len(got))
}

// inject injects f and reports whether it was applied (a savepoint may be
// refused).
func (r *chaosRun) inject(i int, f chaosFault) bool {
	switch f.kind {
	case killWorker:
		for _, v := range f.victims {
			r.workers[v].p.signal(syscall.SIGKILL)
		}
		for _, v := range f.victims {
			name := r.workers[v].name
			if f.damageLocal {
				r.damage(filepath.Join(r.j.dir, "local", name), i)
			}
			if f.newNames {
				name = r.newName()
			}
			r.note("%s killed; starting %s", r.workers[v].name, name)
			r.worker(v, name)
		}
	case pauseWorker:
		w := r.workers[f.victims[0]]
		w.p.cmd.Process.Signal(syscall.SIGSTOP)
		// The drawn length of the pause is the fault.
		time.Sleep(f.pause)
		w.p.cmd.Process.Signal(syscall.SIGCONT)
		r.note("%s paused for %v", w.name, f.pause)
	case killCoordinator:
		i := 0
		if r.s.ha {
			i = -1
			r.waitFor("a leader", func() bool {
				i = slices.IndexFunc(r.coords, leads)
				return i >= 0 || r.ended()
			})
			if i < 0 {
				return false
			}
		}
		r.coords[i].signal(syscall.SIGKILL)
		if !r.s.ha {
			r.restore = "latest"
		}
		r.note("coordinator %s killed; starting it again (--restore %q)", r.addrs[i], r.restore)
		r.coordinator(i)
	case savepointRescale:
		return r.stopAndRescale(f.parallelism)
	}
	return true
}

// damage flips a byte of a file in dir (which one is drawn from the seed
// and the fault's index i, among those there are).
func (r *chaosRun) damage(dir string, i int) {
	var files []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil && fi.Size() > 0 {
				files = append(files, p)
			}
		}
		return nil
	})
	if len(files) == 0 {
		r.note("no local copy in %s to damage", dir)
		return
	}
	slices.Sort(files)
	rng := rand.New(rand.NewPCG(r.s.seed, uint64(i)))
	p := files[rng.IntN(len(files))]
	data, err := os.ReadFile(p)
	if err != nil {
		r.t.Fatal(err)
	}
	at := rng.IntN(len(data))
	data[at] ^= 0x20
	// NB: a new file renamed over it, should it be a hard link (to the
	// checkpoint storage's file, or the state directory's).
	if err := os.WriteFile(p+".damaged", data, 0o644); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Rename(p+".damaged", p); err != nil {
		r.t.Fatal(err)
	}
	r.note("damaged byte %d of %s", at, p)
}

var savepointLine = regexp.MustCompile(`savepoint (\d+): (\S+)`)

// stopAndRescale stops the job with a savepoint through the leading
// coordinator's API, and starts every process again at parallelism p,
// restored from it.
func (r *chaosRun) stopAndRescale(p int) bool {
	i := 0
	if r.s.ha {
		if i = slices.IndexFunc(r.coords, leads); i < 0 {
			r.note("no leader to take a savepoint of")
			return false
		}
	}
	var addr string
	r.waitFor("the API's address", func() bool {
		if m := webLine.FindStringSubmatch(r.coords[i].log.String()); m != nil {
			addr = m[1]
		}
		return addr != "" || r.ended()
	})
	if addr == "" {
		return false
	}
	out, err := exec.Command(weirBin, "savepoint", "--stop", "--web", addr, "--token", "s3cret", "--timeout", "30s").CombinedOutput()
	m := savepointLine.FindStringSubmatch(string(out))
	if err != nil || m == nil {
		if !r.ended() {
			r.note("savepoint refused: %v: %s", err, strings.TrimSpace(string(out)))
			return false
		}
		// It may have taken the request and stopped (or finished).
		r.note("savepoint --stop: %v: %s", err, strings.TrimSpace(string(out)))
	}
	for j, c := range r.coords {
		r.exits(fmt.Sprintf("coordinator %s, stopped", r.addrs[j]), c, time.Minute)
	}
	if m == nil {
		mm := regexp.MustCompile(`stopped with savepoint (\d+)\. Resume with:\n.* --restore (\S+)`).FindStringSubmatch(r.coords[i].log.String())
		if mm == nil {
			if regexp.MustCompile(`weir: (wordcount|nexmark q\d) finished`).MatchString(r.coords[i].log.String()) {
				r.note("the job finished instead")
				return false
			}
			r.fail("savepoint --stop failed (%v), and the coordinator did not say it stopped:\n%s", err, r.coords[i].log)
		}
		m = mm
	}
	r.note("stopped with savepoint %s at %s", m[1], m[2])
	// The workers look for a coordinator until they are stopped.
	for _, w := range r.workers {
		w.p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range r.workers {
		select {
		case <-w.p.done:
		case <-time.After(30 * time.Second):
			r.fail("%s did not exit within 30 s of SIGTERM", w.name)
		}
		var exit *exec.ExitError
		if w.p.err != nil && !errors.As(w.p.err, &exit) {
			r.fail("%s: %v", w.name, w.p.err)
		}
	}
	r.parallelism = p
	// NB: a cluster restores only --restore latest (the savepoint is the
	// latest checkpoint), though the coordinator's log says to resume
	// with --restore <the savepoint>
	// (TestClusterStopWithSavepointResumeReview); with --ha, latest
	// reopens a job that ended.
	r.restore = "latest"
	for j := range r.coords {
		r.coordinator(j)
	}
	for j, w := range r.workers {
		r.worker(j, w.name)
	}
	r.note("restarted at parallelism %d from %s", p, r.restore)
	return true
}
