package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestReviewVerifyCLIOnlyReads: weir verify must only read. Given the
// directories of a job that never ran (or a typo), it creates the output
// directory (with a writability probe) and the checkpoint directory with
// the job's directory in it; on a finished job's output it creates and
// deletes a probe file there (the directory's modification time changes);
// refusing --output -, it creates the standard output sink's markers.
func TestReviewVerifyCLIOnlyReads(t *testing.T) {
	j := newJob(t, 1, 100)
	out, err := exec.Command(weirBin, "verify", "wordcount", "--input", j.input, "--output", j.output, "--checkpoint-dir", j.ckpt).CombinedOutput()
	if err == nil {
		t.Fatalf("weir verify of a job that never ran succeeded:\n%s", out)
	}
	for _, d := range []string{j.output, j.ckpt} {
		if _, serr := os.Stat(d); serr == nil {
			t.Errorf("weir verify (%v: %s) created %s: it must only read", err, out, d)
		}
	}

	j = newJob(t, 1, 2000)
	cmd, stderr := j.command("--checkpoint-interval", "10ms")
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	before, err := os.Stat(j.output)
	if err != nil {
		t.Fatal(err)
	}
	j.verified(t, "finished")
	after, err := os.Stat(j.output)
	if err != nil {
		t.Fatal(err)
	}
	if !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("weir verify wrote into the output directory %s (modified %v, was %v)", j.output, after.ModTime(), before.ModTime())
	}

	// Refused (standard output cannot be read back), it still creates the
	// write-ahead sink's marker directory beside the checkpoints.
	markers := filepath.Join(j.ckpt, "wordcount", "stdout-markers")
	out, err = exec.Command(weirBin, "verify", "wordcount", "--input", j.input, "--output", "-", "--checkpoint-dir", j.ckpt).CombinedOutput()
	if err == nil {
		t.Fatalf("weir verify --output - succeeded:\n%s", out)
	}
	if _, serr := os.Stat(markers); serr == nil {
		t.Errorf("weir verify --output - (%v: %s) created %s: it must only read", err, out, markers)
	}
}

// TestReviewVerifyCLIRefusalIsNotAMismatch: a verify that cannot run (no
// checkpoint to verify) exits with the status of a verify that found the
// output wrong (1): a script cannot tell "the output is wrong" from "it
// was not checked".
func TestReviewVerifyCLIRefusalIsNotAMismatch(t *testing.T) {
	j := newJob(t, 1, 100)
	if err := os.MkdirAll(filepath.Join(j.ckpt, "wordcount"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(j.output, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(weirBin, "verify", "wordcount", "--input", j.input, "--output", j.output, "--checkpoint-dir", j.ckpt).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("weir verify with nothing to verify: %v, want a failure\n%s", err, out)
	}
	if exit.ExitCode() == 1 {
		t.Fatalf("weir verify with nothing to verify exits 1, as a MISMATCH does:\n%s", out)
	}
}
