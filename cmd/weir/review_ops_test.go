package main

import (
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClusterListenWithoutHostIsLoopback: --web ":8081" listens
// on loopback ("':8081 is loopback too; 0.0.0.0:8081 every interface'"),
// and the coordinator's --listen says "loopback unless told otherwise".
// Yet a coordinator given --listen ":0" listened on every interface
// ([::]:port). Found by an outside review, session 39.
func TestClusterListenWithoutHostIsLoopback(t *testing.T) {
	inParallel(t)
	j := newJob(t, 1, 1000)
	certs := filepath.Join(j.dir, "certs")
	if out, err := exec.Command(weirBin, "cluster", "certs", "--out", certs).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	coord := startProc(t, "coordinator", "wordcount", "--input", j.input, "--output", j.output, "--checkpoint-dir", j.ckpt,
		"--certs", certs, "--listen", ":0", "--log-level", "info")
	var addr string
	waitFor(t, "coordinator address", func() bool {
		if m := listenLine.FindStringSubmatch(coord.log.String()); m != nil {
			addr = m[1]
		}
		return addr != "" || coord.exited()
	})
	if addr == "" {
		t.Fatalf("the coordinator ended (%v):\n%s", coord.err, coord.log)
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Fatalf("coordinator --listen :0 listens on %s, every interface; want loopback, as --web :PORT (and the flag's help, \"loopback unless told otherwise\"); 0.0.0.0:PORT or [::]:PORT to ask for every interface", addr)
	}
}

// TestMissingTokenSaysHow: `weir savepoint` without a token, or
// with the wrong one, is refused 401 with "a mutation needs the job's
// token: Authorization: Bearer <token>": an HTTP header the CLI user does
// not write. It should name the CLI's way (--token, $WEIR_WEB_TOKEN), and
// a wrong token should be called wrong, not missing. Found by an outside
// review, session 39.
func TestMissingTokenSaysHow(t *testing.T) {
	inParallel(t)
	dir := t.TempDir()
	in := linesOfTen(t, dir, 20000)
	run, addr := startWithAPI(t, []string{"run", "wordcount", "--input", in, "--output", filepath.Join(dir, "out"),
		"--checkpoint-dir", filepath.Join(dir, "ck"), "--checkpoint-interval", "1h", "--pace", "1", "--progress", "0"})
	defer run.signal(os.Interrupt)
	cli := func(token string) string {
		cmd := exec.Command(weirBin, "savepoint", "--web", addr, "--token", token)
		cmd.Env = append(os.Environ(), "WEIR_WEB_TOKEN=")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("weir savepoint with token %q: %v\n%s", token, err, out)
		}
		return string(out)
	}
	if out := cli(""); !strings.Contains(out, "--token") || !strings.Contains(out, "WEIR_WEB_TOKEN") {
		t.Errorf("weir savepoint without a token says %q; want it to say how to give one: --token or $WEIR_WEB_TOKEN", strings.TrimSpace(out))
	}
	if out := cli("wrong"); !strings.Contains(strings.ToLower(out), "wrong") && !strings.Contains(strings.ToLower(out), "does not match") && !strings.Contains(strings.ToLower(out), "invalid") {
		t.Errorf("weir savepoint with a wrong token says %q; want it to say the token given is wrong (not that one is needed)", strings.TrimSpace(out))
	}
}

// TestSavepointWhileWaitingForSlots: a coordinator that waits
// for workers (its job "created", "waiting for slots") is asked for a
// savepoint through its API. It knows the job is not running, and should
// say so at once, as a single process does ("the job is not running"),
// naming what it waits for. It held the request 10 s and answered "the job
// took no request within 10s (is it restarting?): context deadline
// exceeded": slow, and wrong about the cause. Found by an outside review,
// session 39.
func TestSavepointWhileWaitingForSlots(t *testing.T) {
	inParallel(t)
	j := startClusterJob(t, 1, 1000, "--web", "127.0.0.1:0", "--web-token", "s3cret", "--web-linger", "0")
	var addr string
	waitFor(t, "the API's address", func() bool {
		if m := webLine.FindStringSubmatch(j.coord.log.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	for _, path := range []string{"/api/v1/savepoints", "/api/v1/savepoints?stop=true"} {
		start := time.Now()
		code, body := postWithToken(t, addr, path)
		took := time.Since(start)
		// NB: what it says, not how soon: only the coordinator's wait
		// for slots, not the 10 s wait for the job, says so.
		if code != http.StatusConflict || !strings.Contains(body, "waits for its workers' slots (0 of the ") {
			t.Errorf("POST %s to a coordinator waiting for slots (no worker joined) took %v and answered %d %q; want a 409 that says the job is not running, its coordinator waiting for slots",
				path, took.Round(time.Millisecond), code, strings.TrimSpace(body))
		}
	}
}
