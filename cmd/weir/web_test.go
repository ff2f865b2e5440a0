package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/examples/wordcount"
)

// webLine is what weir prints, whatever the log level, when it serves.
var webLine = regexp.MustCompile(`weir: web UI at http://(\S+)/ `)

// startWithAPI starts the job args describe with its API on a free port
// and the token s3cret (and no --web-linger unless args say), and returns
// it and the API's address.
func startWithAPI(t *testing.T, args []string) (*child, string) {
	t.Helper()
	args = append(slices.Clip(args), "--web", "127.0.0.1:0", "--web-token", "s3cret")
	if !slices.Contains(args, "--web-linger") {
		args = append(args, "--web-linger", "0")
	}
	run := startProc(t, args...)
	var addr string
	waitFor(t, "the API's address", func() bool {
		if m := webLine.FindStringSubmatch(run.log.String()); m != nil {
			addr = m[1]
		}
		return addr != "" || run.exited()
	})
	if addr == "" {
		t.Fatalf("the job ended (%v) before it served its API:\n%s", run.err, run.log)
	}
	return run, addr
}

// TestSavepointCancelAndRestore drives a running word count through its
// API from the CLI: a savepoint without the token is refused, with it
// completes and is listed; cancel stops the job, whose web UI stays up
// (--web-linger) saying so until Ctrl-C; a run restored from the
// savepoint finishes it, exactly-once by counting.
func TestSavepointCancelAndRestore(t *testing.T) {
	inParallel(t)
	j := newJob(t, 4, 250_000)
	args := []string{"run", "wordcount", "--input", j.input, "--output", j.output, "--checkpoint-dir", j.ckpt, "--parallelism", "2",
		"--checkpoint-interval", "100ms", "--log-level", "info", "--progress", "0"}
	run, addr := startWithAPI(t, append(slices.Clip(args), "--web-linger", "1m"))
	weir := func(args ...string) (string, error) {
		out, err := exec.Command(weirBin, args...).CombinedOutput()
		return string(out), err
	}
	if out, err := weir("savepoint", "--web", addr, "--token", "wrong"); err == nil || !strings.Contains(out, "401") {
		t.Fatalf("a savepoint with the wrong token: %v\n%s", err, out)
	}
	out, err := weir("savepoint", "--web", addr, "--token", "s3cret")
	if err != nil {
		t.Fatalf("savepoint: %v\n%s\njob's log:\n%s", err, out, run.log)
	}
	m := regexp.MustCompile(`savepoint (\d+): (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("savepoint said: %s", out)
	}
	if list, err := weir("checkpoints", "--web", addr); err != nil || !regexp.MustCompile(`(?m)^`+m[1]+` +savepoint +completed`).MatchString(list) {
		t.Fatalf("checkpoints: %v\n%s", err, list)
	}
	if out, err := weir("list", "--web", addr); err != nil || !regexp.MustCompile(`wordcount +running`).MatchString(out) {
		t.Fatalf("list: %v\n%s", err, out)
	}
	if out, err := weir("cancel", "nosuchjob", "--web", addr, "--token", "s3cret"); err == nil || !strings.Contains(out, `runs job "wordcount"`) {
		t.Fatalf("cancel of a job the process does not run: %v\n%s", err, out)
	}
	if out, err := weir("cancel", "wordcount", "--web", addr, "--token", "s3cret"); err != nil || !strings.Contains(out, "job wordcount: cancelling") {
		t.Fatalf("cancel: %v\n%s", err, out)
	}
	waitFor(t, "the cancelled job's message", func() bool { return strings.Contains(run.log.String(), "Resume with") || run.exited() })
	if run.exited() {
		t.Fatalf("the cancelled job exited (%v) without lingering for its web UI:\n%s", run.err, run.log)
	}
	// Its web UI lingers with the job's end (issue 22 item 2), until
	// Ctrl-C.
	resp, err := http.Get("http://" + addr + "/api/v1/job")
	if err != nil {
		t.Fatal(err)
	}
	var ended struct{ State, Cause, Ended string }
	err = json.NewDecoder(resp.Body).Decode(&ended)
	resp.Body.Close()
	if err != nil || ended.State != "cancelled" || !strings.Contains(ended.Cause, "cancelled through the API") || ended.Ended == "" {
		t.Fatalf("the lingering API says %+v (%v), want the job cancelled through the API", ended, err)
	}
	// NB: the process says so after its job's end is served, and an
	// interrupt before it says so ends it without a word (CI, session 39).
	waitFor(t, "the process to say its web UI lingers", func() bool {
		return strings.Contains(run.log.String(), "the web UI shows how the job ended for") || run.exited()
	})
	if run.exited() {
		t.Fatalf("the process ended (%v) without saying its web UI lingers:\n%s", run.err, run.log)
	}
	run.cmd.Process.Signal(os.Interrupt)
	select {
	case <-run.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("Ctrl-C did not end the lingering web UI within 20 s of a minute's linger:\n%s", run.log)
	}
	// It says who cancelled it: the user and host that ran weir cancel,
	// from the loopback address (issue 19, defect 20).
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	if who := regexp.MustCompile(`weir: job cancelled through the API by ` + regexp.QuoteMeta(u.Username) + `@\S+ \(127\.0\.0\.1:\d+\); the checkpoints are kept`); !who.MatchString(run.log.String()) {
		t.Fatalf("the cancelled job did not say who cancelled it (want %v):\n%s", who, run.log)
	}
	out, err = weir(append(args, "--restore", m[2])...)
	if err != nil {
		t.Fatalf("restore from savepoint %s: %v\n%s", m[2], err, out)
	}
	rep, err := wordcount.Verify(vfs.Default, j.output, j.want, false)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("after restoring savepoint %s: %v\n%s", m[1], rep, out)
	}
	t.Logf("savepoint %s at %s; %v", m[1], m[2], rep)
}

// TestStopWithSavepoint: savepoint --stop takes a savepoint and stops the
// job, which commits it and ends (exit 0, no transaction of the file sink
// left open, the output so far exactly-once); a run restored from it at
// another parallelism finishes the job exactly-once; savepoint dispose
// then deletes the savepoint.
func TestStopWithSavepoint(t *testing.T) {
	inParallel(t)
	j := newJob(t, 4, 250_000)
	args := []string{"run", "wordcount", "--input", j.input, "--output", j.output, "--checkpoint-dir", j.ckpt, "--parallelism", "2",
		"--checkpoint-interval", "100ms", "--log-level", "info", "--progress", "0"}
	run, addr := startWithAPI(t, args)
	out, err := exec.Command(weirBin, "savepoint", "--stop", "--web", addr, "--token", "s3cret").CombinedOutput()
	if err != nil {
		t.Fatalf("savepoint --stop: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`savepoint (\d+): (\S+)`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("savepoint said: %s", out)
	}
	<-run.done // stopped by the savepoint
	if run.err != nil || !strings.Contains(run.log.String(), "stopped with savepoint "+m[1]+". Resume with") {
		t.Fatalf("the stopped job (%v) did not say how to resume:\n%s", run.err, run.log)
	}
	open, err := filepath.Glob(filepath.Join(j.output, ".*.inprogress"))
	if err != nil || len(open) > 0 {
		t.Fatalf("files the stopped job left uncommitted: %v %v", open, err)
	}
	so, err := wordcount.Verify(vfs.Default, j.output, j.want, false)
	if err != nil || so.Lines == 0 || so.Lost == 0 || so.Duplicated > 0 || so.Unexpected > 0 {
		t.Fatalf("the output of the stopped job: %v %v (want some of it, once)", so, err)
	}
	rescaled := append(slices.Clone(args), "--restore", m[2])
	rescaled[slices.Index(rescaled, "--parallelism")+1] = "3"
	if out, err := exec.Command(weirBin, rescaled...).CombinedOutput(); err != nil {
		t.Fatalf("restore from savepoint %s at parallelism 3: %v\n%s", m[2], err, out)
	}
	rep, err := wordcount.Verify(vfs.Default, j.output, j.want, false)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("after stopping with savepoint %s: %v", m[1], rep)
	}
	t.Logf("stopped with savepoint %s; %v", m[1], rep)
	if out, err := exec.Command(weirBin, "savepoint", "dispose", m[2]).CombinedOutput(); err != nil || !strings.Contains(string(out), "savepoint "+m[1]+" disposed") {
		t.Fatalf("savepoint dispose %s: %v\n%s", m[2], err, out)
	}
	if _, err := os.Stat(m[2]); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("savepoint %s after dispose: %v", m[2], err)
	}
}

// TestCheckpointsShowUnaligned: weir checkpoints, on a word count run with
// --checkpoint-alignment unaligned, says per completed checkpoint that its
// 2 counting tasks of 4 (the sources have no input channels to align)
// were unaligned, and the bytes of channel state the API reports.
func TestCheckpointsShowUnaligned(t *testing.T) {
	inParallel(t)
	j := newJob(t, 4, 250_000)
	_, addr := startWithAPI(t, []string{"run", "wordcount", "--input", j.input, "--output", j.output, "--checkpoint-dir", j.ckpt, "--parallelism", "2",
		"--checkpoint-interval", "50ms", "--checkpoint-alignment", "unaligned", "--log-level", "info", "--progress", "0"})
	type listed struct {
		ID           uint64
		Status       string
		ChannelState int64 `json:"channelStateBytes"`
	}
	var cs []listed
	waitFor(t, "a completed checkpoint in the API", func() bool {
		resp, err := http.Get("http://" + addr + "/api/v1/checkpoints")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(&cs); err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(cs, func(c listed) bool { return c.Status == "completed" })
	})
	out, err := exec.Command(weirBin, "checkpoints", "--web", addr).CombinedOutput()
	if err != nil {
		t.Fatalf("checkpoints: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^ID +KIND +STATUS +AT +DURATION +BYTES +ALIGNMENT +CHANNEL STATE BYTES +SLOWEST TASK / REASON$`).Match(out) {
		t.Fatalf("checkpoints: no header with ALIGNMENT and CHANNEL STATE BYTES:\n%s", out)
	}
	for _, c := range cs {
		if c.Status != "completed" {
			continue
		}
		line := regexp.MustCompile(fmt.Sprintf(`(?m)^%d +checkpoint +completed +\S+ +\d+ms +\d+ +unaligned 2/4 tasks +%d +count#\d$`, c.ID, c.ChannelState))
		if !line.Match(out) {
			t.Errorf("checkpoints: no line matching %s in:\n%s", line, out)
		}
	}
	t.Logf("weir checkpoints:\n%s", out)
}
