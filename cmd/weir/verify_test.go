package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestVerifyNexmarkQ5ThroughKill9: Nexmark q5 (sliding event-time windows)
// is killed with SIGKILL twice, each time once a checkpoint more than
// before completed, and restored until it finishes; weir verify finds the
// committed results to match a rerun after each kill (the rerun stopping
// event time where the checkpoint had it, at another parallelism) and at
// the end.
func TestVerifyNexmarkQ5ThroughKill9(t *testing.T) {
	inParallel(t)
	dir := t.TempDir()
	out, ckpt := filepath.Join(dir, "out"), filepath.Join(dir, "ckpt")
	job := []string{"--query", "q5", "--events", "2M", "--output", out, "--checkpoint-dir", ckpt}
	verify := func(when string) {
		t.Helper()
		b, err := exec.Command(weirBin, append([]string{"verify", "nexmark", "--parallelism", "3"}, job...)...).CombinedOutput()
		if err != nil || !strings.Contains(string(b), "match: ") || strings.Contains(string(b), "MISMATCH") || strings.Contains(string(b), "match: 0 records") {
			t.Fatalf("%s: weir verify: %v\n%s", when, err, b)
		}
		t.Logf("%s: %s", when, strings.TrimSpace(string(b[bytes.LastIndex(b, []byte("checkpoint ")):])))
	}
	before := 0
	for kill := range 3 {
		args := append([]string{"run", "nexmark", "--parallelism", "2", "--checkpoint-interval", "50ms", "--throttle", "500000"}, job...)
		if kill > 0 {
			args = append(args, "--restore", "latest")
		}
		cmd := exec.Command(weirBin, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if kill == 2 {
			if err := cmd.Run(); err != nil {
				t.Fatalf("last run: %v\n%s", err, &stderr)
			}
			verify("finished")
			return
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		// The first kill once results are committed, the second five
		// checkpoints later.
		waitFor(t, "results committed and newer checkpoints", func() bool {
			select {
			case err := <-done:
				t.Fatalf("run %d ended (%v) before it was to be killed: the input is too small for this machine\n%s", kill+1, err, &stderr)
			default:
			}
			return committedBytes(out) > 0 && latestID(t, ckpt) > before+5*kill
		})
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-done
		before = latestID(t, ckpt)
		verify("after kill " + string(rune('1'+kill)))
	}
}

// committedBytes is the size of the committed files in dir.
func committedBytes(dir string) int64 {
	files, _ := filepath.Glob(filepath.Join(dir, "part-*"))
	var n int64
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			n += st.Size()
		}
	}
	return n
}

// latestID is the id of q5's latest completed checkpoint in ckpt, 0 if
// none.
func latestID(t *testing.T, ckpt string) int {
	cs := completed(t, filepath.Join(ckpt, "nexmark-q5"))
	if len(cs) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimPrefix(cs[len(cs)-1], "chk-"))
	return n
}
