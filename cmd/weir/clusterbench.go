package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/spf13/cobra"

	"github.com/weirstream/weir/examples/wordcount"
	"github.com/weirstream/weir/internal/transport"
)

func newClusterBench() *cobra.Command {
	var files, lines, runs, recoveries int
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "The word count on a coordinator and 2 worker processes against one process: words per CPU-second, checkpoint durations, recovery time",
		Long: `Run the word count (checkpoints every second, exactly-once, parallelism 2) in
one process and on a coordinator and two worker processes of one slot each
on loopback with mutual TLS, in turn, --runs rounds, and print words per
CPU-second (user plus system time of every process of the run: the best
run, the median and the range) and checkpoint durations (p50, p99 over all
runs), and the cluster's words per CPU-second over one process's: of the
best runs, of the medians, and per round (the median and range of the
rounds' ratios, each of two runs taken one after the other). The cluster
runs twice a round: with each of its processes sized to its share of the
machine (GOMAXPROCS = CPUs / 2), as two workers on machines of their own
or on CPU sets of that share would be (Go sizes itself to a container's
CPU limit too, but to no fewer than 2), and with Go's default (every
process sized to the whole machine, which three processes on one machine
oversubscribe). Each process's CPU time is printed too: of the run with
the median total (the lower middle one with an even --runs). Then,
--recoveries times, run it on three workers, kill one with SIGKILL after a
checkpoint, and print the time from the kill to the tasks running again on
the other two and to the first checkpoint after (when the file sink
commits output again): with the default settings, with a restart delay of
0, and with that and checkpoints every 100 ms. Outputs are checked by
counting.

With --cpuprofile F, every process of every run writes its CPU profile,
so the last run of each mode leaves them: F.local for one process,
F.procsN.coordinator and F.procsN.worker-1, F.procsN.worker-2 for the
cluster with GOMAXPROCS N (0: Go's default; go tool pprof -top
F.procs1.coordinator F.procs1.worker-* merges them).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if files < 1 || lines < 1 || runs < 1 || recoveries < 0 {
				return errors.New("--files, --lines and --runs must be at least 1, --recoveries at least 0")
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			return benchCluster(cmd.Context(), cmd.OutOrStdout(), self, files, lines, runs, recoveries)
		},
	}
	cmd.Flags().IntVar(&files, "files", 4, "input files")
	cmd.Flags().IntVar(&lines, "lines", 250_000, "lines per input file (8 words each)")
	cmd.Flags().IntVar(&runs, "runs", 5, "rounds: runs of each mode, taken in turn")
	cmd.Flags().IntVar(&recoveries, "recoveries", 3, "kills to time, per setting")
	return cmd
}

// child is a process of a benchmark run or a test, its standard error
// kept.
type child struct {
	cmd  *exec.Cmd
	name string // its role in a run: process, coordinator, worker-N
	log  *syncBuf
	done chan struct{}
	err  error
}

// syncBuf is a buffer a process writes while another goroutine reads it.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startChild starts bin with args; env, if any, is added to this
// process's environment.
func startChild(ctx context.Context, env []string, bin string, args ...string) (*child, error) {
	p := &child{cmd: exec.CommandContext(ctx, bin, args...), log: &syncBuf{}, done: make(chan struct{})}
	p.cmd.Stderr = p.log
	if len(env) > 0 {
		p.cmd.Env = append(os.Environ(), env...)
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has exited (then err says how).
func (p *child) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// usage is the CPU time of an exited process of a run.
func (p *child) usage() procCPU {
	return procCPU{role: p.name, user: p.cmd.ProcessState.UserTime(), sys: p.cmd.ProcessState.SystemTime()}
}

// procCPU is the user and system time of one process of a run.
type procCPU struct {
	role      string
	user, sys time.Duration
}

// total is a run's CPU time: every process's user plus system time.
func total(ps []procCPU) time.Duration {
	var t time.Duration
	for _, p := range ps {
		t += p.user + p.sys
	}
	return t
}

func (p *child) signal(s os.Signal) {
	p.cmd.Process.Signal(s)
	<-p.done
}

// waitLog waits until the process's log matches re, or it exits.
func (p *child) waitLog(ctx context.Context, re *regexp.Regexp) ([]string, error) {
	for {
		if m := re.FindStringSubmatch(p.log.String()); m != nil {
			return m, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("%s exited (%v) before its log said %q:\n%s", p.cmd.Args[1], p.err, re, p.log)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond): // polling a log
		}
	}
}

var (
	coordAddrLine = regexp.MustCompile(`msg="coordinator listening" job=\S+ addr=(\S+)`)
	durationLine  = regexp.MustCompile(`msg="checkpoint completed" .* duration=(\S+)`)
)

// checkpointDurations are the durations the log's completed checkpoints took.
func checkpointDurations(log string) []time.Duration {
	var ds []time.Duration
	for _, m := range durationLine.FindAllStringSubmatch(log, -1) {
		if d, err := time.ParseDuration(m[1]); err == nil {
			ds = append(ds, d)
		}
	}
	return ds
}

// median is the middle of xs, or the mean of the two middle ones.
func median[T time.Duration | float64](xs []T) T {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

type clusterBench struct {
	ctx              context.Context
	self, dir, certs string
	input            string
	want             map[string]int64
	run              int
}

func (b *clusterBench) jobArgs(role, output, ckpt string, extra ...string) []string {
	return append([]string{role, "wordcount", "--input", b.input, "--output", output, "--checkpoint-dir", ckpt,
		"--parallelism", "2", "--checkpoint-interval", "1s", "--log-level", "info"}, extra...)
}

func (b *clusterBench) dirs() (output, ckpt string) {
	b.run++
	return filepath.Join(b.dir, fmt.Sprint("out-", b.run)), filepath.Join(b.dir, fmt.Sprint("ckpt-", b.run))
}

func (b *clusterBench) verify(output string) error {
	rep, err := wordcount.Verify(vfs.Default, output, b.want, false)
	if err == nil && !rep.OK() {
		err = fmt.Errorf("output: %s", rep)
	}
	os.RemoveAll(output)
	return err
}

// profileFlags are the flags that make a process write its CPU profile to
// cpuProfile, suffixed with its name (none without --cpuprofile).
func profileFlags(name string) []string {
	if cpuProfile == "" {
		return nil
	}
	return []string{"--cpuprofile", cpuProfile + "." + name}
}

// local runs the word count in one process: its CPU time and log.
func (b *clusterBench) local() ([]procCPU, string, error) {
	output, ckpt := b.dirs()
	defer os.RemoveAll(ckpt)
	p, err := startChild(b.ctx, nil, b.self, b.jobArgs("run", output, ckpt, append([]string{"--progress", "0"}, profileFlags("local")...)...)...)
	if err != nil {
		return nil, "", err
	}
	p.name = "process"
	<-p.done
	if p.err != nil {
		return nil, "", fmt.Errorf("local run: %v\n%s", p.err, p.log)
	}
	return []procCPU{p.usage()}, p.log.String(), b.verify(output)
}

// cluster starts a coordinator and workers (extra: the coordinator's extra
// flags), each with GOMAXPROCS procs (0: Go's default, every CPU), and
// profiled if asked (the profiles' names say procs).
func (b *clusterBench) cluster(output, ckpt string, workers, procs int, profiled bool, extra ...string) (*child, []*child, error) {
	prof := func(string) []string { return nil }
	if profiled {
		prof = func(name string) []string { return profileFlags(fmt.Sprintf("procs%d.%s", procs, name)) }
	}
	var env []string
	if procs > 0 {
		env = []string{fmt.Sprint("GOMAXPROCS=", procs)}
	}
	extra = append(extra, prof("coordinator")...)
	coord, err := startChild(b.ctx, env, b.self, b.jobArgs("coordinator", output, ckpt, append([]string{"--listen", "127.0.0.1:0", "--certs", b.certs}, extra...)...)...)
	if err != nil {
		return nil, nil, err
	}
	coord.name = "coordinator"
	m, err := coord.waitLog(b.ctx, coordAddrLine)
	if err != nil {
		return nil, nil, err
	}
	var ws []*child
	for i := 1; i <= workers; i++ {
		name := fmt.Sprint("worker-", i)
		w, err := startChild(b.ctx, env, b.self, b.jobArgs("worker", output, ckpt, append([]string{"--join", m[1], "--name", name, "--certs", b.certs}, prof(name)...)...)...)
		if err != nil {
			return nil, nil, err
		}
		w.name = name
		ws = append(ws, w)
	}
	return coord, ws, nil
}

// clustered runs the word count on a coordinator and two workers, each
// with GOMAXPROCS procs (0: Go's default): the CPU time of each of the
// three, and the coordinator's log.
func (b *clusterBench) clustered(procs int) ([]procCPU, string, error) {
	output, ckpt := b.dirs()
	defer os.RemoveAll(ckpt)
	coord, ws, err := b.cluster(output, ckpt, 2, procs, true)
	if err != nil {
		return nil, "", err
	}
	<-coord.done
	cpu := []procCPU{coord.usage()}
	for _, w := range ws {
		w.signal(syscall.SIGTERM)
		cpu = append(cpu, w.usage())
	}
	if coord.err != nil {
		return nil, "", fmt.Errorf("coordinator: %v\n%s", coord.err, coord.log)
	}
	return cpu, coord.log.String(), b.verify(output)
}

var (
	placedWorker = regexp.MustCompile(`msg="placed tasks" attempt=1 worker=(\S+)`)
	deployedAt   = regexp.MustCompile(`(?m)^time=(\S+) .*msg=deployed `)
	checkpointAt = regexp.MustCompile(`(?m)^time=(\S+) .*msg="checkpoint completed"`)
)

// recovery kills a worker of three after the first checkpoint, and times
// the recovery from the processes' logs: to the tasks deployed again and
// to the first checkpoint after.
func (b *clusterBench) recovery(extra ...string) (toRunning, toCommitted time.Duration, err error) {
	output, ckpt := b.dirs()
	defer os.RemoveAll(ckpt)
	defer os.RemoveAll(output)
	coord, ws, err := b.cluster(output, ckpt, 3, 0, false, extra...)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		coord.signal(syscall.SIGKILL)
		for _, w := range ws {
			w.signal(syscall.SIGKILL)
		}
	}()
	if _, err := coord.waitLog(b.ctx, durationLine); err != nil {
		return 0, 0, err
	}
	// Kill a worker that runs tasks (two of the three do).
	m, err := coord.waitLog(b.ctx, placedWorker)
	if err != nil {
		return 0, 0, err
	}
	victim := ws[0]
	for _, w := range ws {
		if m[1] == w.name {
			victim = w
		}
	}
	killed := time.Now()
	victim.signal(syscall.SIGKILL)
	// Output flows again at the first checkpoint after the kill; the
	// tasks ran again from the last deploy before it.
	committed, err := firstAfter(b.ctx, coord, checkpointAt, killed)
	if err != nil {
		return 0, 0, err
	}
	var running time.Time
	for _, w := range ws {
		for _, t := range logTimes(w.log.String(), deployedAt) {
			if t.After(killed) && t.Before(committed) && t.After(running) {
				running = t
			}
		}
	}
	if running.IsZero() {
		return 0, 0, fmt.Errorf("no worker deployed tasks between the kill and the next checkpoint:\n%s", coord.log)
	}
	return running.Sub(killed), committed.Sub(killed), nil
}

// logTimes are the times of the log's lines that match re.
func logTimes(log string, re *regexp.Regexp) []time.Time {
	var ts []time.Time
	for _, m := range re.FindAllStringSubmatch(log, -1) {
		if t, err := time.Parse(time.RFC3339Nano, m[1]); err == nil {
			ts = append(ts, t)
		}
	}
	return ts
}

// firstAfter waits for a line of p's log matching re logged after t.
func firstAfter(ctx context.Context, p *child, re *regexp.Regexp, t time.Time) (time.Time, error) {
	for {
		for _, at := range logTimes(p.log.String(), re) {
			if at.After(t) {
				return at, nil
			}
		}
		select {
		case <-p.done:
			return time.Time{}, fmt.Errorf("%s ended before its log said %q:\n%s", p.cmd.Args[1], re, p.log)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(5 * time.Millisecond): // polling a log
		}
	}
}

func benchCluster(ctx context.Context, w io.Writer, self string, files, lines, runs, recoveries int) error {
	dir, err := os.MkdirTemp("", "weir-bench-cluster-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	want, err := wordcount.WriteBenchCorpus(dir, files, lines)
	if err != nil {
		return err
	}
	b := &clusterBench{ctx: ctx, self: self, dir: dir, certs: filepath.Join(dir, "certs"), input: filepath.Join(dir, "in-*.txt"), want: want}
	if err := transport.WriteCerts(b.certs, []string{"coordinator", "worker-1", "worker-2", "worker-3"}, []string{"127.0.0.1"}, time.Hour); err != nil {
		return err
	}
	words := float64(files) * float64(lines) * 8
	fmt.Fprintf(w, "weir bench cluster: %.0f words, parallelism 2, checkpoints every 1s, %d CPUs, rounds: %d (each runs both modes, in turn)\n\n", words, goruntime.GOMAXPROCS(0), runs)
	type mode struct {
		name string
		run  func() ([]procCPU, string, error)
	}
	// Two workers on one machine: each sized to its share of the CPUs, as
	// on a machine or CPU set of its own (under a container's CPU limit Go
	// sizes itself to the limit, but to no fewer than 2), and each sized
	// to the whole machine, Go's default for a process, which
	// oversubscribes the CPUs. The machine is what this process may use
	// (its GOMAXPROCS: the CPUs, a container's limit, or GOMAXPROCS in the
	// environment, which the processes of the default's mode inherit).
	procs := goruntime.GOMAXPROCS(0)
	share := max(1, procs/2)
	modes := []mode{
		{"one process", b.local},
		{fmt.Sprintf("cluster, GOMAXPROCS=%d a process (its share)", share), func() ([]procCPU, string, error) { return b.clustered(share) }},
	}
	if share != procs {
		modes = append(modes, mode{fmt.Sprintf("cluster, GOMAXPROCS=%d a process (Go's default)", procs), func() ([]procCPU, string, error) { return b.clustered(0) }})
	}
	// Rounds take the modes in turn, so that a slow spell of a shared
	// machine does not fall on one of them only; a round's ratio compares
	// two runs taken one after the other.
	cpus := make([][]time.Duration, len(modes))
	usages := make([][][]procCPU, len(modes)) // per mode and run: each process's
	durs := make([][]time.Duration, len(modes))
	for range runs {
		for i, mode := range modes {
			ps, log, err := mode.run()
			if err != nil {
				return fmt.Errorf("%s: %w", mode.name, err)
			}
			cpus[i] = append(cpus[i], total(ps))
			usages[i] = append(usages[i], ps)
			durs[i] = append(durs[i], checkpointDurations(log)...)
		}
	}
	const row = "%-48s %12s %8s %16s %10s %10s %7s\n"
	fmt.Fprintf(w, row, "", "words/cpu-s", "median", "all runs", "ckpt p50", "ckpt p99", "ckpts")
	perCPU := func(cpu time.Duration) float64 { return words / cpu.Seconds() }
	best, med := make([]time.Duration, len(modes)), make([]time.Duration, len(modes))
	for i, mode := range modes {
		best[i], med[i] = slices.Min(cpus[i]), median(cpus[i])
		fmt.Fprintf(w, row, mode.name, si(perCPU(best[i])), si(perCPU(med[i])), si(perCPU(slices.Max(cpus[i])))+"–"+si(perCPU(best[i])),
			percentile(durs[i], 0.5).Round(time.Millisecond), percentile(durs[i], 0.99).Round(time.Millisecond), fmt.Sprint(len(durs[i])))
	}
	// The cluster's words per CPU-second over one process's is one
	// process's CPU time over the cluster's.
	fmt.Fprintln(w)
	for c := 1; c < len(modes); c++ {
		ratios := make([]float64, runs) // per round
		for r := range ratios {
			ratios[r] = cpus[0][r].Seconds() / cpus[c][r].Seconds()
		}
		fmt.Fprintf(w, "%s / one process, per CPU-second: %.2f (best runs), %.2f (medians); per round: median %.2f, %.2f–%.2f\n", modes[c].name,
			best[0].Seconds()/best[c].Seconds(), med[0].Seconds()/med[c].Seconds(), median(ratios), slices.Min(ratios), slices.Max(ratios))
	}
	fmt.Fprintf(w, "\nCPU seconds by process, user + system (the run with the median total):\n")
	for i, mode := range modes {
		fmt.Fprintf(w, "%-48s %s\n", mode.name, byProcess(usages[i]))
	}
	if recoveries == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nrecovery from kill -9 of a worker (3 workers, 1 slot each; %d kills each):\n", recoveries)
	const rrow = "%-44s %24s %28s\n"
	fmt.Fprintf(w, rrow, "", "to tasks running (median)", "to first checkpoint (median)")
	for _, s := range []struct {
		name  string
		extra []string
	}{
		{"defaults (restart delay 1s)", nil},
		{"--restart-delay 0", []string{"--restart-delay", "0"}},
		{"--restart-delay 0, checkpoints every 100ms", []string{"--restart-delay", "0", "--checkpoint-interval", "100ms"}},
	} {
		var dep, com []time.Duration
		for range recoveries {
			d, c, err := b.recovery(s.extra...)
			if err != nil {
				return fmt.Errorf("recovery, %s: %w", s.name, err)
			}
			dep, com = append(dep, d), append(com, c)
		}
		fmt.Fprintf(w, rrow, s.name, fmt.Sprintf("%v (%v–%v)", median(dep).Round(time.Millisecond), slices.Min(dep).Round(time.Millisecond), slices.Max(dep).Round(time.Millisecond)),
			fmt.Sprintf("%v (%v–%v)", median(com).Round(time.Millisecond), slices.Min(com).Round(time.Millisecond), slices.Max(com).Round(time.Millisecond)))
	}
	return nil
}

// byProcess is each process's user and system time in the run of runs
// with the median total (the lower middle one of an even number): one
// run's, so that they add up to its total, which medians taken process by
// process would not.
func byProcess(runs [][]procCPU) string {
	byTotal := slices.SortedFunc(slices.Values(runs), func(a, b []procCPU) int { return cmp.Compare(total(a), total(b)) })
	var b bytes.Buffer
	for i, p := range byTotal[(len(byTotal)-1)/2] {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.2f + %.2f", p.role, p.user.Seconds(), p.sys.Seconds())
	}
	return b.String()
}
