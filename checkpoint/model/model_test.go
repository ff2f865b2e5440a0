package model

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weirstream/weir/internal/racetest"
)

var full = flag.Bool("model.full", false, "check the models at their larger bounds too (minutes; see README.md)")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// run is one exhaustive check of a model by SPIN.
type run struct {
	name  string
	model string   // dataflow.pml or leader.pml
	defs  []string // -D flags for spin (the same replay the trail)
	// live checks the model's ltl property "done" (pan -a -f) instead of
	// its assertions.
	live bool
	// want, for a planted bug: the comment on the assertion the
	// counterexample must break (the model's source line holds it), or
	// several separated by "|".
	want string
}

// The bounds CI checks: every alignment mode in one run (dataflow.pml's
// init chooses), one fault, three checkpoint ids, two in flight, two
// records per source; one leader change. README.md gives larger ones
// (-model.full) and their cost.
var runs = []run{
	{name: "every mode", model: "dataflow.pml"},
	{name: "leader change", model: "leader.pml", defs: []string{"-DMAXTERMS=2"}},
	{name: "progress/every mode", model: "dataflow.pml", defs: []string{"-DMAXFAULTS=0"}, live: true},
	{name: "progress/leader", model: "leader.pml", defs: []string{"-DMAXTERMS=1"}, live: true},

	// Planted bugs: internal/sim's three (TestSimulationCatchesPlantedBugs),
	// one of unaligned checkpoints and one of leader changes.
	{name: "bug/aligner forwards without blocking", model: "dataflow.pml", defs: []string{"-DMODE=1", "-DBUG_FORWARD"}, want: "inconsistent cut|told to end before its input ended"},
	{name: "bug/completion announced before the metadata is durable", model: "dataflow.pml", defs: []string{"-DMODE=1", "-DBUG_EAGER"}, want: "committed twice"},
	{name: "bug/an abort drops older alignments", model: "dataflow.pml", defs: []string{"-DMODE=1", "-DBUG_ABORT_DROPS_OLDER"}, want: "ends silently"},
	{name: "bug/a record persisted twice in channel state", model: "dataflow.pml", defs: []string{"-DMODE=3", "-DBUG_BARRIER_BEHIND"}, want: "inconsistent cut"},
	{name: "bug/a completion under a deposed leader", model: "leader.pml", defs: []string{"-DMAXTERMS=2", "-DBUG_COMPLETE_DEPOSED"}, want: "deposed leader"},
	{name: "bug/a completion under a deposed leader, output check only", model: "leader.pml", defs: []string{"-DMAXTERMS=3", "-DMAXID=4", "-DBUG_COMPLETE_DEPOSED", "-DOUTPUT_ONLY"}, want: "not exactly once"},
	// The progress property has teeth: an aligner that never unblocks.
	{name: "bug/a channel stays blocked", model: "dataflow.pml", defs: []string{"-DMODE=1", "-DMAXFAULTS=0", "-DBUG_STAYS_BLOCKED"}, live: true, want: "acceptance cycle"},
	// The defect the model found in the coordinator (design note 91),
	// fixed: a checkpoint triggered while the final one is pending was not
	// Final, so it did not align, yet it could end the job.
	{name: "bug/a checkpoint that can end the job does not align", model: "dataflow.pml", defs: []string{"-DMODE=3", "-DBUG_FINAL_FLAG_ONCE"}, want: "not exactly once"},
	{name: "bug/a checkpoint that can end the job is switched by the timeout", model: "dataflow.pml", defs: []string{"-DMODE=4", "-DBUG_FINAL_FLAG_ONCE"}, want: "not exactly once"},
}

// fullRuns are the larger bounds -model.full adds.
var fullRuns = []run{
	{name: "full/every mode, two faults", model: "dataflow.pml", defs: []string{"-DMAXFAULTS=2"}},
	{name: "full/two leader changes", model: "leader.pml", defs: []string{"-DMAXTERMS=3", "-DMAXID=4"}},
}

// TestModels checks the models exhaustively with SPIN: the real ones must
// hold every property, and each planted bug must be caught with a
// counterexample, which the test logs as the trail's story.
func TestModels(t *testing.T) {
	racetest.Skip(t)
	tools(t)
	all := runs
	if *full {
		all = slices.Concat(runs, fullRuns)
	}
	for _, r := range all {
		t.Run(r.name, func(t *testing.T) {
			res := check(t, r)
			defs := strings.Join(r.defs, " ")
			if defs == "" {
				defs = "(every mode)"
			}
			t.Logf("%s %s: %d states stored, %d transitions, depth %d, %v (pan: %v)",
				r.model, defs, res.states, res.transitions, res.depth, res.took.Round(time.Millisecond), res.pan)
			if r.want == "" {
				if res.errors != 0 {
					t.Fatalf("%d errors; counterexample:\n%s", res.errors, res.trail)
				}
				return
			}
			if res.errors == 0 {
				t.Fatalf("the planted bug survived %d states", res.states)
			}
			if !slices.ContainsFunc(strings.Split(r.want, "|"), func(w string) bool { return strings.Contains(res.violated, w) }) {
				t.Fatalf("caught, but by %q, not by the assertion on %q; counterexample:\n%s", res.violated, r.want, res.trail)
			}
			t.Logf("caught: %s\ncounterexample:\n%s", res.violated, res.trail)
		})
	}
}

// tools skips the test when spin or gcc is missing, or fails it under CI,
// which installs them.
func tools(t *testing.T) {
	for _, tool := range []string{"spin", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			msg := fmt.Sprintf("%s is not installed: apt-get install -y spin gcc (the test runs SPIN and compiles its verifier)", tool)
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
}

type result struct {
	errors, states, transitions, depth int
	took, pan                          time.Duration
	violated                           string // the violated assertion's source line
	trail                              string // the counterexample, trimmed
}

var (
	reErrors      = regexp.MustCompile(`errors: (\d+)`)
	reStates      = regexp.MustCompile(`(\d+) states, stored`)
	reTransitions = regexp.MustCompile(`(\d+) transitions \(= `)
	reDepth       = regexp.MustCompile(`depth reached (\d+)`)
	reElapsed     = regexp.MustCompile(`pan: elapsed time ([0-9.e+-]+) seconds`)
	reAssertLine  = regexp.MustCompile(`spin: \S+:(\d+), Error: assertion violated`)
)

// check runs spin -a, gcc and pan for r in a temporary directory.
func check(t *testing.T, r run) result {
	t.Helper()
	start := time.Now()
	dir := t.TempDir()
	src, err := os.ReadFile(r.model)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, r.model), src, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := func(name string, args ...string) string {
		t.Helper()
		c := exec.Command(name, args...)
		c.Dir = dir
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	cmd("spin", append(append([]string{"-a"}, r.defs...), r.model)...)
	// Where the search is short (a planted bug is found in a few states,
	// leader.pml is small), compiling fast matters more than searching
	// fast.
	opt := "-O0"
	if r.want == "" && r.model == "dataflow.pml" {
		opt = "-O2"
	}
	cc := []string{opt, "-w", "-o", "pan", "pan.c", "-DVECTORSZ=4096"}
	pan := []string{"-m1000000"}
	if r.live {
		// NB: -a without -f: the models have no cycle but a stutter
		// where nothing is enabled, so weak fairness (-f) excludes
		// nothing; -a alone is as strong and ten times cheaper.
		pan = append(pan, "-a")
	} else {
		cc = append(cc, "-DNOCLAIM")
	}
	cmd("gcc", cc...)
	out := cmd("./pan", pan...)
	if strings.Contains(out, "search depth too small") || strings.Contains(out, "out of memory") {
		t.Fatalf("the search was cut short, so it proves nothing:\n%s", out)
	}
	res := result{took: time.Since(start)}
	res.errors = atoi(t, reErrors, out)
	res.states = atoi(t, reStates, out)
	res.transitions = atoi(t, reTransitions, out)
	res.depth = atoi(t, reDepth, out)
	if m := reElapsed.FindStringSubmatch(out); m != nil {
		if s, err := strconv.ParseFloat(m[1], 64); err == nil {
			res.pan = time.Duration(s * float64(time.Second))
		}
	}
	if res.errors == 0 {
		return res
	}
	if strings.Contains(out, "acceptance cycle") {
		res.violated = "acceptance cycle: the job does not end"
	}
	// Replay the trail: the model's printf lines tell the story, and
	// spin names the assertion that broke.
	replay := cmd("spin", append(append([]string{"-t"}, r.defs...), r.model)...)
	var story []string
	for _, line := range strings.Split(replay, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "", strings.HasPrefix(line, "ltl "), strings.HasPrefix(line, "spin: trail ends"),
			strings.Contains(line, "processes created"), strings.HasPrefix(line, "#processes"),
			strings.HasPrefix(line, "queue "), strings.HasPrefix(line, "proc "):
			continue
		}
		story = append(story, line)
		if m := reAssertLine.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			if lines := strings.Split(string(src), "\n"); n >= 1 && n <= len(lines) {
				res.violated = strings.TrimSpace(lines[n-1])
			}
		}
		if len(story) > 0 && strings.HasPrefix(line, "spin: text of failed assertion") {
			break
		}
	}
	const keep = 60
	if len(story) > keep {
		story = append([]string{fmt.Sprintf("... (%d steps before)", len(story)-keep)}, story[len(story)-keep:]...)
	}
	res.trail = strings.Join(story, "\n")
	return res
}

func atoi(t *testing.T, re *regexp.Regexp, out string) int {
	t.Helper()
	m := re.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("pan's report has no %v:\n%s", re, out)
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return n
}
