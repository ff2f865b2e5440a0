package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// TestWordCountBench runs `weir bench wordcount` on a small corpus: a row
// per configuration, each run's output checked to hold every word's counts once;
// without wcfast's source its column is skipped, saying so.
func TestWordCountBench(t *testing.T) {
	out, err := exec.Command(weirBin, "bench", "wordcount", "--files", "2", "--lines", "2000", "--runs", "1", "--wcfast", t.TempDir()).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s := string(out)
	for _, want := range []string{"32000 words", "words/cpu-s", "median", "weir, checkpoints off", "weir, checkpoints every 1s", "weir, checkpoints every 100ms", "wcfast: skipped: no source at"} {
		if !strings.Contains(s, want) {
			t.Fatalf("no %q in:\n%s", want, s)
		}
	}
}

// TestClusterBenchProfilesEveryProcess: `weir bench cluster --cpuprofile F`
// leaves a CPU profile of each process of the last run of each mode, which
// pprof reads (`bench cluster` used to take the flag and profile nothing),
// and prints the modes' rates and their ratios: the cluster's processes
// sized to their share of the machine, and (with more than one CPU) to
// all of it.
func TestClusterBenchProfilesEveryProcess(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "cpu")
	out, err := exec.Command(weirBin, "bench", "cluster", "--files", "1", "--lines", "2000", "--runs", "2", "--recoveries", "0", "--cpuprofile", prof).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	share, all := max(1, goruntime.GOMAXPROCS(0)/2), goruntime.GOMAXPROCS(0)
	sizes := []string{fmt.Sprintf("GOMAXPROCS=%d a process \\(its share\\)", share)}
	if share != all {
		sizes = append(sizes, fmt.Sprintf("GOMAXPROCS=%d a process \\(Go's default\\)", all))
	}
	rows, ratios := `(?m)^one process +\S+ +\S+ +\S+–\S+ .*\n`, "\n"
	for _, size := range sizes {
		rows += `cluster, ` + size + ` +\S+ +\S+ +\S+–\S+ .*\n`
		ratios += `cluster, ` + size + ` / one process, per CPU-second: [0-9.]+ \(best runs\), [0-9.]+ \(medians\); per round: median [0-9.]+, [0-9.]+–[0-9.]+\n`
	}
	if !regexp.MustCompile(rows + ratios).Match(out) {
		t.Fatalf("no rows and ratios of every mode (%s) in:\n%s", rows+ratios, out)
	}
	cpu, byProc := `(?m)^one process +process [0-9.]+ \+ [0-9.]+\n`, `[0-9.]+ \+ [0-9.]+`
	for _, size := range sizes {
		cpu += `cluster, ` + size + ` +coordinator ` + byProc + `, worker-1 ` + byProc + `, worker-2 ` + byProc + `\n`
	}
	if !regexp.MustCompile(cpu).Match(out) {
		t.Fatalf("no CPU time by process of every mode (%s) in:\n%s", cpu, out)
	}
	profiles := []string{"local"}
	for _, procs := range []int{share, 0}[:len(sizes)] {
		for _, p := range []string{"coordinator", "worker-1", "worker-2"} {
			profiles = append(profiles, fmt.Sprintf("procs%d.%s", procs, p))
		}
	}
	for _, p := range profiles {
		f, err := os.Open(prof + "." + p)
		if err != nil {
			t.Fatalf("%v (bench output:\n%s)", err, out)
		}
		_, err = profile.Parse(f)
		f.Close()
		if err != nil {
			t.Fatalf("the profile of %s: %v", p, err)
		}
	}
}

// TestByProcess: each process's user and system time comes from one run,
// the one with the median total (the lower middle one of an even number),
// so that the line adds up to a run's total; medians taken process by
// process need not (found by an outside review, session 38).
func TestByProcess(t *testing.T) {
	run := func(cu, cs, wu, ws time.Duration) []procCPU {
		return []procCPU{{"coordinator", cu, cs}, {"worker-1", wu, ws}}
	}
	s := time.Second / 100
	a, b, c := run(5*s, 2*s, 60*s, 9*s), run(7*s, 1*s, 50*s, 12*s), run(1*s, 9*s, 70*s, 11*s)
	for _, tc := range []struct {
		runs [][]procCPU
		want string
	}{
		{[][]procCPU{b, c, a}, "coordinator 0.05 + 0.02, worker-1 0.60 + 0.09"}, // totals 0.70, 0.91, 0.76
		{[][]procCPU{c, a}, "coordinator 0.05 + 0.02, worker-1 0.60 + 0.09"},
		{[][]procCPU{c}, "coordinator 0.01 + 0.09, worker-1 0.70 + 0.11"},
	} {
		if got := byProcess(tc.runs); got != tc.want {
			t.Errorf("byProcess: %q, want %q", got, tc.want)
		}
	}
}

// TestMedian: the middle value, or the mean of the two middle ones (the
// bench's medians were the upper middle with an even number of rounds).
func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{3, 1}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{5, 1, 4, 2, 3}, 3},
	} {
		if got := median(c.xs); got != c.want {
			t.Errorf("median(%v) = %v; want %v", c.xs, got, c.want)
		}
	}
	if got := median([]time.Duration{time.Second, 3 * time.Second}); got != 2*time.Second {
		t.Errorf("median(1s, 3s) = %v; want 2s", got)
	}
}
