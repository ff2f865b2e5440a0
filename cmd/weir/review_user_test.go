package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Found by an outside review as a new user and an operator on call.

// TestRefusalAfterRestoreLatestFoundNothing: when the output directory
// holds an earlier run's output and no checkpoint of that run is in
// --checkpoint-dir (the run had --mode none, or another checkpoint
// directory), the refusal said to resume with --restore latest, which had
// just been tried and found nothing. It now says so, and what to check.
func TestRefusalAfterRestoreLatestFoundNothing(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("a b\na\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if b, err := exec.Command(weirBin, "run", "wordcount", "--input", in, "--output", out, "--mode", "none", "--progress", "0").CombinedOutput(); err != nil {
		t.Fatalf("first run: %v\n%s", err, b)
	}
	ckpt := filepath.Join(dir, "ckpt")
	b, err := exec.Command(weirBin, "run", "wordcount", "--input", in, "--output", out, "--checkpoint-dir", ckpt,
		"--progress", "0", "--restore", "latest").CombinedOutput()
	if err == nil {
		t.Fatalf("the rerun over the earlier output was not refused:\n%s", b)
	}
	if want := "--restore latest found no checkpoint of that run in " + ckpt; !strings.Contains(string(b), want) || !strings.Contains(string(b), "--fresh starts over") {
		t.Fatalf("a run given --restore latest, which found no checkpoint, was refused without saying so (%q):\n%s", want, b)
	}
}

// TestNexmarkInterruptExits130AndSaysHowToResume: Ctrl-C on `weir run
// nexmark` exited 1 saying only "interrupt signal received", unlike `weir
// run wordcount` (TestInterruptExits130AndSaysHowToResume): a supervisor
// saw a failure, and nothing said that the checkpoints were kept.
func TestNexmarkInterruptExits130AndSaysHowToResume(t *testing.T) {
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "ckpt")
	run := startProc(t, "run", "nexmark", "--query", "q5", "--events", "1M", "--throttle", "20000",
		"--output", filepath.Join(dir, "out"), "--checkpoint-dir", ckpt, "--checkpoint-interval", "100ms")
	waitFor(t, "a completed checkpoint", func() bool {
		m, _ := filepath.Glob(filepath.Join(ckpt, "nexmark-q5", "chk-*", "_metadata"))
		return len(m) > 0 || run.exited()
	})
	run.signal(syscall.SIGINT)
	select {
	case <-run.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("Ctrl-C did not end the nexmark job within 30 s:\n%s", run.log)
	}
	var ee *exec.ExitError
	if !errors.As(run.err, &ee) || ee.ExitCode() != 130 || !strings.Contains(run.log.String(), "--restore latest") {
		t.Fatalf("weir run nexmark after Ctrl-C: %v; want exit status 130 and the command that resumes it:\n%s", run.err, run.log)
	}
}

// TestResumeCommandHidesTheWebToken: the command printed to resume a job
// repeated the value of --web-token in the log.
func TestResumeCommandHidesTheWebToken(t *testing.T) {
	defer func(args []string) { os.Args = args }(os.Args)
	for _, args := range [][]string{
		{"weir", "run", "wordcount", "--web-token", "s3cret", "--input", "a b", "--restore", "latest"},
		{"weir", "run", "wordcount", "--web-token=s3cret", "--input", "a b", "--fresh"},
	} {
		os.Args = args
		got := resumeCommand()
		if strings.Contains(got, "s3cret") || !strings.Contains(got, `"$WEIR_WEB_TOKEN"`) || !strings.Contains(got, "--input 'a b'") || strings.Contains(got, "--restore") || strings.Contains(got, "--fresh") {
			t.Errorf("resumeCommand() of %q = %s; want the token as \"$WEIR_WEB_TOKEN\", the other flags kept, --restore and --fresh dropped", args, got)
		}
	}
}

// TestDemoRefusesSizesItCannotGenerate: `weir demo --files -3` printed
// "generated -3 files, -900000 lines" before failing, and --lines 0 ran to
// a failed verdict.
func TestDemoRefusesSizesItCannotGenerate(t *testing.T) {
	for _, args := range [][]string{{"demo", "--files", "-3"}, {"demo", "--lines", "0"}, {"demo", "kafka", "--lines", "-1"}} {
		b, err := exec.Command(weirBin, args...).CombinedOutput()
		if err == nil || !strings.Contains(string(b), "must be at least 1") || strings.Contains(string(b), "generated") {
			t.Errorf("weir %s: %v\n%s\nwant it refused at start, naming the flag", strings.Join(args, " "), err, b)
		}
	}
}
