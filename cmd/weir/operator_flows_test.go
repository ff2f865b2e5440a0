package main

// Found by an outside review of the CLI as an operator on call (session 35).

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// committedLines counts the lines of the committed files (names not
// beginning with ".") in dir.
func committedLines(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") || e.IsDir() {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		s := bufio.NewScanner(f)
		for s.Scan() {
			n++
		}
		f.Close()
	}
	return n
}

// TestRestoreOverAModeNoneRunsOutputDuplicates: an operator resumes an
// interrupted exactly-once run with --mode none --restore latest (it
// finishes, writing part-output-<n>-end), then runs the job again with
// --restore latest. The restore neither rolls back nor refuses the -end
// files, so the committed output holds the records after the checkpoint
// twice, and weir verify still says "match".
func TestRestoreOverAModeNoneRunsOutputDuplicates(t *testing.T) {
	dir := t.TempDir()
	const lines = 20000
	in := linesOfTen(t, dir, lines)
	out, ckpt := filepath.Join(dir, "out"), filepath.Join(dir, "ckpt")
	base := []string{"run", "wordcount", "--input", in, "--output", out, "--checkpoint-dir", ckpt, "--parallelism", "2", "--progress", "0"}

	interruptAfterACheckpoint(t, ckpt, base)

	if b, err := exec.Command(weirBin, append(base, "--mode", "none", "--restore", "latest")...).CombinedOutput(); err != nil {
		t.Fatalf("--mode none --restore latest: %v\n%s", err, b)
	}
	if got := committedLines(t, out); got != 10*lines {
		t.Fatalf("after --mode none --restore latest: %d committed lines; want %d", got, 10*lines)
	}

	b, err := exec.Command(weirBin, append(base, "--restore", "latest")...).CombinedOutput()
	got := committedLines(t, out)
	vb, verr := exec.Command(weirBin, "verify", "wordcount", "--input", in, "--output", out, "--checkpoint-dir", ckpt, "--parallelism", "2").CombinedOutput()
	if err == nil && got != 10*lines {
		t.Fatalf("--restore latest over the output of a --mode none run was accepted and left %d committed lines; want %d (or a refusal naming the -end files)\nrun: %s\nweir verify (%v): %s", got, 10*lines, b, verr, vb)
	}
}

// interruptAfterACheckpoint runs base (a weir run wordcount) slowed
// down, and interrupts it (SIGINT) once it completed a checkpoint.
func interruptAfterACheckpoint(t *testing.T, ckpt string, base []string) {
	t.Helper()
	run := startProc(t, append(base, "--checkpoint-interval", "100ms", "--pace", "20")...)
	waitFor(t, "a completed checkpoint", func() bool {
		m, _ := filepath.Glob(filepath.Join(ckpt, "wordcount", "chk-*", "_metadata"))
		return len(m) > 0 || run.exited()
	})
	run.signal(syscall.SIGINT)
	select {
	case <-run.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("Ctrl-C did not end the job:\n%s", run.log)
	}
	var ee *exec.ExitError
	if !errors.As(run.err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("interrupted run: %v (the input may have ended before the signal)\n%s", run.err, run.log)
	}
}

// TestResumeWithAnotherOutputNamesIt: an operator resumes an interrupted
// run with --restore latest and a mistyped --output (a new, empty
// directory). The restore is taken, then fails at the sink's commit with
// "pending file … is missing: its records are lost (was the output
// directory changed by hand?)": it blames a hand edit and suggests data
// loss, where the fix is the --output the checkpoint was taken with. The
// directory holds no lineage file while the checkpoint has a lineage
// (checkLineage takes an unrecorded lineage as output of an older Weir).
func TestResumeWithAnotherOutputNamesIt(t *testing.T) {
	dir := t.TempDir()
	in := linesOfTen(t, dir, 20000)
	out, ckpt := filepath.Join(dir, "out"), filepath.Join(dir, "ckpt")
	args := func(out string) []string {
		return []string{"run", "wordcount", "--input", in, "--output", out, "--checkpoint-dir", ckpt, "--parallelism", "2", "--progress", "0"}
	}
	interruptAfterACheckpoint(t, ckpt, args(out))
	typo := filepath.Join(dir, "ouptut")
	b, err := exec.Command(weirBin, append(args(typo), "--restore", "latest")...).CombinedOutput()
	if err == nil {
		t.Fatalf("resume into another output directory was accepted:\n%s", b)
	}
	if strings.Contains(string(b), "changed by hand") || !strings.Contains(string(b), typo) || !strings.Contains(string(b), "--output") {
		t.Fatalf("resume with --output %s (the checkpoint's run wrote %s): want a refusal at start naming --output and the directory, not a hand edit:\n%s", typo, out, b)
	}
}

// TestDisposeTakesAFileURL: `weir savepoint dispose file:///…/chk-N`
// answers "stat file:///…/chk-N: no such file or directory" for a
// savepoint that is there, while --restore takes the same file:// URL
// (and --checkpoint-dir file://… is documented): the operator is told the
// savepoint does not exist.
func TestDisposeTakesAFileURL(t *testing.T) {
	dir := t.TempDir()
	in := linesOfTen(t, dir, 20000)
	out, ck := filepath.Join(dir, "out"), filepath.Join(dir, "ck")
	args := []string{"run", "wordcount", "--input", in, "--output", out, "--checkpoint-dir", ck, "--progress", "0", "--checkpoint-interval", "1h", "--pace", "20"}
	first, addr := startWithAPI(t, args)
	b, err := exec.Command(weirBin, "savepoint", "--web", addr, "--token", "s3cret").CombinedOutput()
	m := regexp.MustCompile(`savepoint \d+: (\S+)`).FindStringSubmatch(string(b))
	if err != nil || m == nil {
		t.Fatalf("savepoint: %v\n%s", err, b)
	}
	if b, err := exec.Command(weirBin, "savepoint", "--stop", "--web", addr, "--token", "s3cret").CombinedOutput(); err != nil {
		t.Fatalf("savepoint --stop: %v\n%s", err, b)
	}
	<-first.done
	b, err = exec.Command(weirBin, "savepoint", "dispose", "file://"+m[1]).CombinedOutput()
	if err != nil {
		t.Fatalf("weir savepoint dispose file://%s (an older savepoint, there): %v\n%s", m[1], err, b)
	}
}

// TestRestoreLatestGivenTheJobDirectoryNamesItsParent: an operator resumes
// with --checkpoint-dir <dir>/wordcount (the job's directory, which holds
// chk-N, as `weir savepoint` and the log print it) instead of <dir>. Weir
// says "no completed checkpoint in <dir>/wordcount; starting from the
// beginning" (there is one, of this job), creates <dir>/wordcount/wordcount,
// and the refusal that follows says the checkpoints may be "in another
// --checkpoint-dir" without naming <dir>. It should refuse at start,
// naming --checkpoint-dir <dir>.
func TestRestoreLatestGivenTheJobDirectoryNamesItsParent(t *testing.T) {
	dir := t.TempDir()
	in := linesOfTen(t, dir, 2000)
	out, ckpt := filepath.Join(dir, "out"), filepath.Join(dir, "ckpt")
	args := func(ck string) []string {
		return []string{"run", "wordcount", "--input", in, "--output", out, "--checkpoint-dir", ck, "--progress", "0"}
	}
	if b, err := exec.Command(weirBin, args(ckpt)...).CombinedOutput(); err != nil {
		t.Fatalf("first run: %v\n%s", err, b)
	}
	jobDir := filepath.Join(ckpt, "wordcount")
	b, _ := exec.Command(weirBin, append(args(jobDir), "--restore", "latest")...).CombinedOutput()
	_, nested := os.Stat(filepath.Join(jobDir, "wordcount"))
	if !strings.Contains(string(b), "--checkpoint-dir "+ckpt) || nested == nil {
		t.Fatalf("--restore latest --checkpoint-dir %s (the job's directory, holding its checkpoints): want it refused naming --checkpoint-dir %s, and no %s/wordcount made (made: %v):\n%s", jobDir, ckpt, jobDir, nested == nil, b)
	}
}

// TestDemoInterruptedExits130 (found by an outside review, session 35):
// Ctrl-C during `weir demo` exited 1, as a failed demo does; an
// interrupted run exits 130, and so does the demo now.
func TestDemoInterruptedExits130(t *testing.T) {
	out := &syncBuf{}
	cmd := exec.Command(weirBin, "demo", "--files", "2", "--lines", "1000000")
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the demo counting", func() bool { return strings.Contains(out.String(), "2. counting") })
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("an interrupted demo: %v, want exit status 130\n%s", err, out)
	}
}
