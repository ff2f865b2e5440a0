package main

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/examples/wordcount"
)

var weirBin string

// TestMain builds the weir binary once: these tests run it as a user does,
// and kill it.
func TestMain(m *testing.M) {
	if os.Getenv("WEIR_TEST_PREFAULT") != "" {
		os.Exit(m.Run()) // a prefault test's process of its own (ownProcess): it runs no weir
	}
	dir, err := os.MkdirTemp("", "weir-bin-")
	if err != nil {
		panic(err)
	}
	weirBin = filepath.Join(dir, "weir")
	corpusDir = filepath.Join(dir, "corpora")
	if out, err := exec.Command("go", "build", "-o", weirBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build weir: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	if err := corporaUnchanged(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

type job struct {
	dir, input, output, ckpt string
	want                     map[string]int64
	// verify: kill9Until runs weir verify after the first kill from the
	// second on that left a completed checkpoint, and at the end.
	verify bool
}

// verify runs weir verify on j's output and returns its exit error and
// its output.
func (j *job) runVerify(t *testing.T) (error, string) {
	t.Helper()
	out, err := exec.Command(weirBin, "verify", "wordcount", "--input", j.input, "--output", j.output, "--checkpoint-dir", j.ckpt, "--parallelism", "2").CombinedOutput()
	return err, string(out)
}

// verified fails t unless weir verify finds j's committed output to match.
func (j *job) verified(t *testing.T, when string) {
	t.Helper()
	if err, out := j.runVerify(t); err != nil || !strings.Contains(out, "match: ") || strings.Contains(out, "MISMATCH") {
		t.Fatalf("%s: weir verify: %v\n%s", when, err, out)
	}
}

func newJob(t *testing.T, files, lines int) *job {
	t.Helper()
	c := corpusOf(t, files, lines)
	dir := t.TempDir()
	in := filepath.Join(dir, "input")
	if err := os.Mkdir(in, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range c.paths {
		if err := os.Link(p, filepath.Join(in, filepath.Base(p))); err != nil {
			t.Fatal(err)
		}
	}
	return &job{dir: dir, input: filepath.Join(in, "*.txt"), output: filepath.Join(dir, "output"), ckpt: filepath.Join(dir, "ckpt"), want: maps.Clone(c.want)}
}

// corpus is an input writeCorpus made and the counts it holds. It depends
// only on its number of files and of lines, so a test binary makes each
// once, and jobs link its files into their input: under -race, making a
// corpus of 2 M lines and counting it took about 8 s of CPU, and a dozen
// tests use one of those sizes. No test may write into its input (the
// links are the corpus): TestMain fails the binary if one did.
type corpus struct {
	once  sync.Once
	paths []string
	want  map[string]int64
	sum   []byte // of its files
	err   error
}

var (
	corporaMu sync.Mutex
	corpora   = map[[2]int]*corpus{}
	corpusDir string // in TestMain's directory
)

func corpusOf(t *testing.T, files, lines int) *corpus {
	t.Helper()
	corporaMu.Lock()
	c := corpora[[2]int{files, lines}]
	if c == nil {
		c = &corpus{}
		corpora[[2]int{files, lines}] = c
	}
	corporaMu.Unlock()
	c.once.Do(func() {
		c.paths, c.err = writeCorpus(filepath.Join(corpusDir, fmt.Sprintf("%dx%d", files, lines)), files, lines)
		if c.err == nil {
			c.want, c.err = wordcount.Expected(vfs.Default, c.paths)
		}
		if c.err == nil {
			c.sum, c.err = checksum(c.paths)
		}
	})
	if c.err != nil {
		t.Fatal(c.err)
	}
	return c
}

func checksum(paths []string) ([]byte, error) {
	h := sha256.New()
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	return h.Sum(nil), nil
}

// corporaUnchanged checks that no test wrote into a corpus.
func corporaUnchanged() error {
	for size, c := range corpora {
		if c.err != nil {
			continue
		}
		sum, err := checksum(c.paths)
		if err != nil {
			return err
		}
		if !bytes.Equal(sum, c.sum) {
			return fmt.Errorf("a test wrote into its input, the corpus of %d files of %d lines that jobs share: copy the files instead of writing into them", size[0], size[1])
		}
	}
	return nil
}

func (j *job) command(extra ...string) (*exec.Cmd, *bytes.Buffer) {
	args := append([]string{"run", "wordcount", "--input", j.input, "--output", j.output, "--checkpoint-dir", j.ckpt,
		"--parallelism", "2", "--log-level", "info"}, extra...)
	cmd := exec.Command(weirBin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	return cmd, &stderr
}

// inParallel lets a test that kills or stops the processes of one job
// (its own directories, servers on free ports, no fixed names, no timing
// that load can break) run beside another such (t.Parallel, two at a time on two
// cores), after the package's other tests: this package takes most of
// CI's time, and by its end the other packages are done and a core idles.
func inParallel(t *testing.T) { t.Parallel() }

// fewer says whether the longest tests run one variant of their modes
// (drawn, and logged) and TestChaosGen three faults of its seed: under
// -short, as CI runs this package, and under -race (see raceEnabled).
// The README's go test -timeout 30m ./... runs them all (about 9 minutes on
// 2 cores alone, past go test's default timeout of 10 on a loaded machine).
func fewer() bool { return testing.Short() || raceEnabled }

// TestKill9AndRestoreLatest kills the word count with SIGKILL at random
// moments, restarts it with --restore latest each time until it finishes,
// and checks the committed output by counting: no count lost, none twice.
// weir verify finds the output to match a rerun after a kill midway and at
// the end.
func TestKill9AndRestoreLatest(t *testing.T) {
	inParallel(t)
	j := newJob(t, 4, 500_000)
	j.verify = true
	kill9Until(t, j, nil, "--checkpoint-interval", "50ms")
}

// TestVerifyExitStatus: weir verify exits 0 on a finished word count's
// output; with a committed line removed, 1, with a report naming it.
func TestVerifyExitStatus(t *testing.T) {
	inParallel(t)
	j := newJob(t, 2, 20_000)
	cmd, stderr := j.command("--checkpoint-interval", "10ms")
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	j.verified(t, "finished")
	files, _ := filepath.Glob(filepath.Join(j.output, "part-*"))
	if len(files) == 0 {
		t.Fatal("no committed output")
	}
	body, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	first, rest, _ := strings.Cut(string(body), "\n")
	if err := os.WriteFile(files[0], []byte(rest), 0o644); err != nil {
		t.Fatal(err)
	}
	err, out := j.runVerify(t)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(out, "MISMATCH") || !strings.Contains(out, "missing ×1: "+strconv.Quote(first+"\n")) {
		t.Fatalf("weir verify of output with %q removed: %v, want exit status 1 and a report naming it:\n%s", first, err, out)
	}
}

// TestKill9Unaligned is TestKill9AndRestoreLatest with unaligned
// checkpoints, and with aligned ones a 1 ms timeout switches (under -short
// or -race one of the two, drawn: see fewer).
func TestKill9Unaligned(t *testing.T) {
	inParallel(t)
	modes := [][]string{{"--checkpoint-alignment", "unaligned"}, {"--aligned-checkpoint-timeout", "1ms"}}
	if fewer() {
		modes = [][]string{modes[drawn(t, len(modes))]}
	}
	for _, args := range modes {
		t.Run(args[0][2:], func(t *testing.T) {
			kill9Until(t, newJob(t, 4, 500_000), nil, append([]string{"--checkpoint-interval", "50ms"}, args...)...)
		})
	}
}

// TestKill9WithLocalRecovery: the word count on Pebble with local
// recovery is killed with SIGKILL three times, each time once a checkpoint
// more than before completed, and restarted with --restore latest: every
// restart restores from the local copies the killed process left,
// downloading nothing (a killed process had renamed every piece of a
// completed checkpoint into place), and the output is exactly once.
func TestKill9WithLocalRecovery(t *testing.T) {
	inParallel(t)
	j := newJob(t, 4, 500_000)
	args := []string{"--checkpoint-interval", "50ms", "--state-backend", "pebble", "--state-dir", filepath.Join(j.dir, "state"),
		"--local-recovery", "--local-recovery-dir", filepath.Join(j.dir, "local")}
	var logs strings.Builder
	for run := range 4 {
		extra := args
		if run > 0 {
			extra = append([]string{"--restore", "latest"}, args...)
		}
		cmd, stderr := j.command(extra...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		if run < 3 {
			// Wait for a checkpoint of this run, then kill it.
			latest := func() string {
				cs := completed(t, filepath.Join(j.ckpt, "wordcount"))
				if len(cs) == 0 {
					return ""
				}
				return cs[len(cs)-1]
			}
			before := latest()
			deadline := time.Now().Add(time.Minute)
			for latest() == before {
				if time.Now().After(deadline) {
					t.Fatalf("run %d completed no checkpoint:\n%s", run+1, stderr)
				}
				time.Sleep(5 * time.Millisecond) // polling the directory
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
		err := <-done
		logs.WriteString(stderr.String())
		if run == 3 && err != nil {
			t.Fatalf("the last run failed: %v\n%s", err, stderr)
		}
	}
	rep, err := wordcount.Verify(vfs.Default, j.output, j.want, false)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("after 3 kills: %v\n%s", rep, logs.String())
	}
	restores := regexp.MustCompile(`msg="restored state".* localBytes=(\d+) remotePieces=(\d+)`).FindAllStringSubmatch(logs.String(), -1)
	if len(restores) == 0 {
		t.Fatalf("no run restored state:\n%s", logs.String())
	}
	for _, m := range restores {
		if m[1] == "0" || m[2] != "0" {
			t.Fatalf("a restore read %s bytes locally and %s pieces from the checkpoint storage; want all local:\n%s", m[1], m[2], logs.String())
		}
	}
}

// kill9Until runs j's command with args (env added to the environment),
// kills it with SIGKILL at random moments four times, restarting it with
// --restore latest, lets the last run finish and verifies the output.
func kill9Until(t *testing.T, j *job, env []string, args ...string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	kills, runs := 0, 0
	verifiedMidway := false
	for {
		extra := args
		if runs > 0 {
			extra = append([]string{"--restore", "latest"}, args...)
		}
		cmd, stderr := j.command(extra...)
		cmd.Env = append(os.Environ(), env...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		runs++
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var kill <-chan time.Time
		if kills < 4 {
			// The moment of the kill is the fault being injected, not a
			// wait for a condition. NB: the job must outlast three runs
			// cut this short (this word count takes about 1.5 s on 2
			// cores; half that was too little once Weir got faster).
			kill = time.After(time.Duration(50+rng.IntN(200)) * time.Millisecond)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run %d failed: %v\n%s", runs, err, stderr)
			}
			rep, err := wordcount.Verify(vfs.Default, j.output, j.want, false)
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK() {
				t.Fatalf("after %d kills: %v\nlast run's log:\n%s", kills, rep, stderr)
			}
			if kills < 3 {
				t.Fatalf("the job finished after only %d kills; the test needs a larger input (%v)\nlast run's log:\n%s", kills, rep, stderr)
			}
			if j.verify {
				j.verified(t, "finished")
			}
			t.Logf("%d runs, %d kill -9s (verified midway too: %v): %v", runs, kills, verifiedMidway, rep)
			return
		case <-kill:
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			<-done
			kills++
			// NB: two runs killed early may leave no completed checkpoint.
			if j.verify && !verifiedMidway && kills >= 2 && len(completed(t, filepath.Join(j.ckpt, "wordcount"))) > 0 {
				j.verified(t, fmt.Sprintf("after kill %d", kills))
				verifiedMidway = true
			}
		}
	}
}

// completed lists the ids of checkpoints with metadata, ascending.
func completed(t *testing.T, jobDir string) []string {
	names, _ := os.ReadDir(jobDir)
	var out []string
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(jobDir, n.Name(), "_metadata")); err == nil {
			out = append(out, n.Name())
		}
	}
	id := func(name string) int { n, _ := strconv.Atoi(strings.TrimPrefix(name, "chk-")); return n }
	slices.SortFunc(out, func(a, b string) int { return id(a) - id(b) })
	return out
}

// TestDamagedLatestMetadataFallsBack: with the latest checkpoint's metadata
// damaged, --restore latest names the damaged file and restores the
// previous checkpoint; nothing is lost.
func TestDamagedLatestMetadataFallsBack(t *testing.T) {
	inParallel(t)
	j := newJob(t, 4, 150_000)
	cmd, stderr := j.command("--checkpoint-interval", "30ms", "--checkpoints-retained", "3")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	jobDir := filepath.Join(j.ckpt, "wordcount")
	deadline := time.Now().Add(time.Minute)
	for len(completed(t, jobDir)) < 2 {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("no two checkpoints within a minute:\n%s", stderr)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	chks := completed(t, jobDir)
	latest, previous := chks[len(chks)-1], chks[len(chks)-2]
	meta := filepath.Join(jobDir, latest, "_metadata")
	data, err := os.ReadFile(meta)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x40
	if err := os.WriteFile(meta, data, 0o644); err != nil {
		t.Fatal(err)
	}

	cmd, stderr = j.command("--restore", "latest")
	if err := cmd.Run(); err != nil {
		t.Fatalf("restore after damage: %v\n%s", err, stderr)
	}
	log := stderr.String()
	if !strings.Contains(log, meta) || !strings.Contains(log, "checksum mismatch") {
		t.Fatalf("the log does not name the damaged file %s:\n%s", meta, log)
	}
	if want := "restored from checkpoint " + strings.TrimPrefix(previous, "chk-"); !strings.Contains(log, want) {
		t.Fatalf("want %q in the log:\n%s", want, log)
	}
	// Restoring an older checkpoint rolls back what the damaged one (and
	// any later one) committed: the output is exactly-once.
	if !strings.Contains(log, "restoring an older checkpoint than the latest") {
		t.Fatalf("the log does not say what was rolled back:\n%s", log)
	}
	rep, err := wordcount.Verify(vfs.Default, j.output, j.want, false)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("after falling back to %s: %v", previous, rep)
	}
	t.Logf("damaged %s, restored %s: %v", latest, previous, rep)
}

func TestBadInvocationsFailClearly(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	os.WriteFile(in, []byte("a b\n"), 0o644)
	notChk := filepath.Join(dir, "elsewhere")
	os.Mkdir(notChk, 0o755)
	base := []string{"run", "wordcount", "--input", in, "--output", filepath.Join(dir, "out")}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run", "wordcount", "--output", dir}, "--input and --output are required"},
		{append(base, "--mode", "twice"), `checkpoint mode "twice"`},
		{append(base, "--mode", "exactly-once"), "--checkpoint-dir is required"},
		{[]string{"run", "wordcount", "--input", filepath.Join(dir, "missing.txt"), "--output", dir, "--mode", "none"}, "missing.txt"},
		{[]string{"run", "wordcount", "--input", filepath.Join(dir, "*.csv"), "--output", dir, "--mode", "none"}, "matches no file"},
		{append(base, "--checkpoint-dir", dir, "--restore", notChk), "not a checkpoint"},
		{append(base, "--checkpoint-dir", dir, "--checkpoint-interval", "0s"), "checkpoint interval is 0s"},
		{append(base, "--checkpoint-dir", dir, "--checkpoint-min-pause", "1s", "--checkpoint-max-concurrent", "2"), "--checkpoint-min-pause 1s needs --checkpoint-max-concurrent 1"},
		{append(base, "--parallelism", "0", "--mode", "none"), "--parallelism 0"},
		{append(base, "--checkpoint-dir", dir, "--checkpoint-max-concurrent", "0"), "--checkpoint-max-concurrent 0: want 1 to 64"},
		{append(base, "--checkpoint-dir", dir, "--checkpoints-retained", "0"), "--checkpoints-retained 0: want 1 to 1000"},
		{append(base, "--checkpoint-dir", dir, "--checkpoint-timeout", "0s"), "--checkpoint-timeout 0s: must be at least 10ms"},
		{append(base, "--checkpoint-dir", dir, "--checkpoint-timeout", "1ms"), "--checkpoint-timeout 1ms: must be at least 10ms"},
		{append(base, "--checkpoint-dir", dir, "--checkpoint-alignment", "sideways"), "--checkpoint-alignment: checkpoint alignment \"sideways\": want aligned or unaligned"},
		{append(base, "--checkpoint-dir", dir, "--aligned-checkpoint-timeout", "-1s"), "--aligned-checkpoint-timeout -1s: must not be negative"},
		{append(base, "--checkpoint-dir", dir, "--checkpoint-alignment", "unaligned", "--aligned-checkpoint-timeout", "1s"), "goes with --checkpoint-alignment aligned"},
		{append(base, "--checkpoint-dir", dir, "--mode", "at-least-once", "--checkpoint-alignment", "unaligned"), "settings of --mode exactly-once, not at-least-once"},
		{append(base, "--checkpoint-dir", dir, "--progress", "-1s"), "--progress -1s: must not be negative"},
		{append(base, "--checkpoint-dir", dir, "--fresh", "--restore", "latest"), "--fresh and --restore latest exclude each other"},
		{append(base, "--checkpoint-dir", dir, "--restart-strategy", "failure-rate", "--restart-interval", "0s"), "--restart-strategy failure-rate needs"},
		// Flags the others make do nothing (found by a review, session 35).
		{append(base, "--mode", "none", "--checkpoint-interval", "1s"), "--checkpoint-interval does nothing without checkpoints"},
		{append(base, "--mode", "none", "--checkpoints-retained", "3"), "--checkpoints-retained does nothing without checkpoints"},
		{append(base, "--mode", "none", "--retain-on-cancel=false"), "--retain-on-cancel does nothing without checkpoints"},
		{append(base, "--checkpoint-dir", dir, "--restart-max-delay", "1m"), "--restart-max-delay does nothing without --restart-strategy exponential-backoff"},
		{append(base, "--checkpoint-dir", dir, "--restart-interval", "1m"), "--restart-interval does nothing without --restart-strategy failure-rate"},
		{append(base, "--checkpoint-dir", dir, "--restart-strategy", "none", "--restart-attempts", "3"), "--restart-attempts does nothing without a restart strategy"},
		{append(base, "--checkpoint-dir", dir, "--web-token", "s3cret"), "--web-token does nothing without --web"},
		{append(base, "--checkpoint-dir", dir, "--ha-ttl", "3s"), "--ha-ttl does nothing without --ha"},
		{[]string{"coordinator", "wordcount", "--input", in, "--output", filepath.Join(dir, "out"), "--checkpoint-dir", dir, "--certs", dir, "--advertise", "10.0.0.1:7700"}, "--advertise does nothing without --ha"},
	}
	for _, c := range cases {
		out, err := exec.Command(weirBin, c.args...).CombinedOutput()
		if err == nil {
			t.Errorf("weir %v succeeded; want an error", c.args)
			continue
		}
		if !strings.Contains(string(out), c.want) {
			t.Errorf("weir %v said %q; want it to mention %q", c.args, out, c.want)
		}
	}
}

func TestRestoreLatestWithNothingToRestore(t *testing.T) {
	j := newJob(t, 1, 200)
	// A killed run's leftovers: an incomplete checkpoint and a stray
	// in-progress output file.
	os.MkdirAll(filepath.Join(j.ckpt, "wordcount", "chk-3"), 0o755)
	os.MkdirAll(j.output, 0o755)
	os.WriteFile(filepath.Join(j.output, ".part-output-0-1-1.inprogress"), []byte("stray\t1\n"), 0o644)
	cmd, stderr := j.command("--restore", "latest")
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if !strings.Contains(stderr.String(), "no completed checkpoint") || !strings.Contains(stderr.String(), "starting from the beginning") {
		t.Fatalf("it did not say it starts from the beginning:\n%s", stderr)
	}
	if _, err := os.Stat(filepath.Join(j.ckpt, "wordcount", "chk-3")); !os.IsNotExist(err) {
		t.Fatalf("the incomplete checkpoint was left behind: %v", err)
	}
	rep, err := wordcount.Verify(vfs.Default, j.output, j.want, false)
	if err != nil || !rep.OK() {
		t.Fatalf("%v %v", rep, err)
	}
	if _, err := os.Stat(filepath.Join(j.output, ".part-output-0-1-1.inprogress")); !os.IsNotExist(err) {
		t.Fatal("the stray in-progress file was left behind")
	}
}

func TestDemo(t *testing.T) {
	var out bytes.Buffer
	cmd := exec.Command(weirBin, "demo")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo failed: %v\n%s", err, &out)
	}
	for _, want := range []string{"FAILURE: task count#", "recovering in", "VERDICT: exactly-once holds"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("demo output lacks %q:\n%s", want, &out)
		}
	}
}

// waitFor polls cond until it holds or a minute passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within a minute", what)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition
	}
}

// TestRerunOverAKilledRun: a rerun without --restore over a killed run's
// checkpoints and output is refused (it used to append a second copy of
// the output); --restore latest finishes the job exactly-once, and --fresh
// starts it over.
func TestRerunOverAKilledRun(t *testing.T) {
	inParallel(t)
	j := newJob(t, 4, 150_000)
	cmd, stderr := j.command("--checkpoint-interval", "30ms")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "checkpoint", func() bool { return len(completed(t, filepath.Join(j.ckpt, "wordcount"))) > 0 })
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	out, err := exec.Command(weirBin, "run", "wordcount", "--input", j.input, "--output", j.output, "--checkpoint-dir", j.ckpt, "--parallelism", "2").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--restore latest") || !strings.Contains(string(out), "--fresh") {
		t.Fatalf("rerun without --restore: %v\n%s", err, out)
	}
	cmd, stderr = j.command("--restore", "latest")
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if rep, err := wordcount.Verify(vfs.Default, j.output, j.want, false); err != nil || !rep.OK() {
		t.Fatalf("after --restore latest: %v %v", rep, err)
	}
	// --log-level info logs the restore and the checkpoints.
	for _, want := range []string{`msg="restoring checkpoint"`, `msg="checkpoint completed"`} {
		if !strings.Contains(stderr.String(), want) {
			t.Fatalf("the info log lacks %s:\n%s", want, stderr)
		}
	}
	cmd, stderr = j.command("--fresh")
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if rep, err := wordcount.Verify(vfs.Default, j.output, j.want, false); err != nil || !rep.OK() {
		t.Fatalf("after --fresh: %v %v", rep, err)
	}
}

// TestTwoProcessesAtOnce: a second run on the same directories fails at
// start, naming the first one's process id; the first is unharmed.
func TestTwoProcessesAtOnce(t *testing.T) {
	j := newJob(t, 4, 150_000)
	first, firstErr := j.command("--checkpoint-interval", "30ms")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "checkpoint", func() bool { return len(completed(t, filepath.Join(j.ckpt, "wordcount"))) > 0 })
	second, secondErr := j.command("--restore", "latest")
	err := second.Run()
	if err == nil || !strings.Contains(secondErr.String(), fmt.Sprintf("in use by process %d", first.Process.Pid)) {
		t.Errorf("second run: %v\n%s", err, secondErr)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("first run: %v\n%s", err, firstErr)
	}
	if rep, err := wordcount.Verify(vfs.Default, j.output, j.want, false); err != nil || !rep.OK() {
		t.Fatalf("%v %v", rep, err)
	}
}

// TestInterruptExits130AndSaysHowToResume: Ctrl-C cancels the job with
// status 130 and prints the command that resumes it; that command finishes
// the job exactly-once.
func TestInterruptExits130AndSaysHowToResume(t *testing.T) {
	inParallel(t)
	j := newJob(t, 4, 150_000)
	cmd, stderr := j.command("--checkpoint-interval", "30ms")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "checkpoint", func() bool { return len(completed(t, filepath.Join(j.ckpt, "wordcount"))) > 0 })
	cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 130 {
		t.Fatalf("after Ctrl-C: %v\n%s", err, stderr)
	}
	_, resume, ok := strings.Cut(stderr.String(), "Resume with:\n  ")
	if !ok || !strings.Contains(resume, "--restore latest") {
		t.Fatalf("no resume command:\n%s", stderr)
	}
	line := strings.TrimSpace(strings.SplitN(resume, "\n", 2)[0])
	if !strings.HasPrefix(line, weirBin+" ") || !strings.Contains(line, "'"+j.input+"'") {
		t.Fatalf("the resume command %q does not start with the binary or does not quote the glob", line)
	}
	args := strings.Fields(strings.ReplaceAll(line, "'", ""))
	out, err := exec.Command(weirBin, args[1:]...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "restored from checkpoint") {
		t.Fatalf("the resume command %v: %v\n%s", args, err, out)
	}
	if rep, err := wordcount.Verify(vfs.Default, j.output, j.want, false); err != nil || !rep.OK() {
		t.Fatalf("%v %v", rep, err)
	}
}

// TestProgressLine: progress shows records per second, the share of
// bounded input read, and the latest (or restored) checkpoint.
func TestProgressLine(t *testing.T) {
	var p progress
	last := map[string]int64{"lines": 1000}
	ms := []weir.Metrics{{UID: "lines", Records: 3000, Remaining: 250, Total: 1000}, {UID: "count", Records: 0}}
	if got, want := p.line(ms, last, 7*time.Second, 2*time.Second), "weir:    7.0s  lines 3000 (1.0k/s) 75.0% read; no checkpoint yet"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	p.checkpoint.Store(17)
	if got := p.line(ms, last, 9*time.Second, 2*time.Second); !strings.HasSuffix(got, "(0/s) 75.0% read; latest checkpoint 17") {
		t.Errorf("got %q", got)
	}
}

// TestFailurePrintedOnce: a failure inside the process is reported once
// (it used to be printed by the CLI and logged by the driver). A file in
// the way of checkpoint 1's directory fails that checkpoint; with no
// failure tolerated the job restarts, once, and finishes.
func TestFailurePrintedOnce(t *testing.T) {
	j := newJob(t, 1, 20_000)
	jobDir := filepath.Join(j.ckpt, "wordcount")
	os.MkdirAll(jobDir, 0o755)
	os.WriteFile(filepath.Join(jobDir, "chk-1"), nil, 0o644)
	cmd, stderr := j.command("--checkpoint-interval", "10ms", "--restart-delay", "10ms", "--log-level", "warn")
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	log := stderr.String()
	if n := strings.Count(log, "job failed; restarting"); n != 1 || strings.Contains(log, "weir: job failed") {
		t.Fatalf("the restart is reported %d times by the log, and by the CLI too: %v:\n%s", n, strings.Contains(log, "weir: job failed"), log)
	}
	if rep, err := wordcount.Verify(vfs.Default, j.output, j.want, false); err != nil || !rep.OK() {
		t.Fatalf("%v %v", rep, err)
	}
}
