package main

// What an outside review of the operator's side (CLI, API, restores,
// storage) found in session 32; each test failed before its fix.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/weirstream/weir/internal/web"
)

// linesOfTen writes lines lines of ten words each and returns its path.
func linesOfTen(t *testing.T, dir string, lines int) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i < lines; i++ {
		for w := 0; w < 10; w++ {
			fmt.Fprintf(&b, "w%d ", (i*10+w)%997)
		}
		b.WriteString("\n")
	}
	p := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func postWithToken(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestInterruptNamesTheSignal: a run ended by a signal says which
// ("interrupted (terminated signal received)"), as the README promises; it
// said "interrupted" only, since the cause signal.NotifyContext gives Is
// context.Canceled.
func TestInterruptNamesTheSignal(t *testing.T) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-ctx.Done()
	cmd := &cobra.Command{}
	cmd.SetContext(ctx)
	err := interrupted(checkpointFlags{dir: "ck", retainOnCancel: true, mode: "exactly-once"}, context.Canceled, cmd, false)
	if !strings.Contains(err.Error(), "terminated signal received") {
		t.Fatalf("a run ended by SIGTERM says %q; want it to name the signal (\"interrupted (terminated signal received)\")", err)
	}
}

// TestCancelDuringStopWithSavepoint: a job cancelled while its
// stop-with-savepoint is in progress is cancelled; neither the answer to
// the stop (409) nor the log says that it runs on, as both did.
func TestCancelDuringStopWithSavepoint(t *testing.T) {
	inParallel(t)
	dir := t.TempDir()
	in := linesOfTen(t, dir, 20000)
	run, addr := startWithAPI(t, []string{"run", "wordcount", "--input", in, "--output", filepath.Join(dir, "out"),
		"--checkpoint-dir", filepath.Join(dir, "ck"), "--checkpoint-interval", "1h", "--pace", "1", "--progress", "0"})
	type answer struct {
		code int
		body string
	}
	// The API serves before the job's tasks run, and refuses a savepoint
	// until they do ("the job is not running"): ask until it takes it.
	stopped := make(chan answer, 1)
	go func() {
		for {
			code, body := postWithToken(t, addr, "/api/v1/savepoints?stop=true")
			if code == http.StatusConflict && strings.Contains(body, "the job is not running") && !run.exited() {
				time.Sleep(10 * time.Millisecond) // the job starting its tasks
				continue
			}
			stopped <- answer{code, body}
			return
		}
	}()
	var early *answer // the stop's answer, if it came before the savepoint was seen in progress
	waitFor(t, "the savepoint in progress, or the stop's answer", func() bool {
		select {
		case a := <-stopped:
			early = &a
			return true
		default:
		}
		resp, err := http.Get("http://" + addr + "/api/v1/checkpoints")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var cs []struct{ Status string }
		json.NewDecoder(resp.Body).Decode(&cs)
		return len(cs) > 0 && cs[0].Status == "in_progress"
	})
	if early != nil && early.code == http.StatusAccepted {
		t.Skipf("the savepoint completed before it was seen in progress: %s", early.body)
	}
	if early != nil {
		t.Fatalf("the stop-with-savepoint was answered %d %q before its savepoint was in progress; the log:\n%s", early.code, early.body, run.log)
	}
	if code, body := postWithToken(t, addr, "/api/v1/cancel"); code != http.StatusAccepted {
		t.Fatalf("cancel: %d %s", code, body)
	}
	a := <-stopped
	<-run.done
	if a.code == http.StatusAccepted {
		t.Skipf("the savepoint completed before the cancel: %s", a.body)
	}
	if strings.Contains(a.body, "the job runs on") || strings.Contains(run.log.String(), "the job runs on") {
		t.Fatalf("the job was cancelled (%v), but the answer to the stop-with-savepoint says %q and the log:\n%s", run.err, a.body, run.log)
	}
}

// TestMutationsAfterTheJobEnded: while the web UI lingers after the job
// finished, `weir cancel` and `weir savepoint` are refused at once, saying
// so (cancel answered "cancelling", and the log "job cancelled through the
// API", though the run exited 0; savepoint waited 10 s and asked "is it
// restarting?").
func TestMutationsAfterTheJobEnded(t *testing.T) {
	inParallel(t)
	dir := t.TempDir()
	in := linesOfTen(t, dir, 10)
	run, addr := startWithAPI(t, []string{"run", "wordcount", "--input", in, "--output", filepath.Join(dir, "out"),
		"--checkpoint-dir", filepath.Join(dir, "ck"), "--progress", "0", "--web-linger", "1m"})
	waitFor(t, "the job's end", func() bool { return strings.Contains(run.log.String(), "wordcount finished") || run.exited() })
	out, err := exec.Command(weirBin, "cancel", "--web", addr, "--token", "s3cret").CombinedOutput()
	if err == nil && strings.Contains(string(out), "cancelling") {
		t.Errorf("weir cancel of a finished job: %s; want it refused, saying the job finished", out)
	}
	start := time.Now()
	out, _ = exec.Command(weirBin, "savepoint", "--web", addr, "--token", "s3cret", "--timeout", "30s").CombinedOutput()
	if took := time.Since(start); took > 5*time.Second || strings.Contains(string(out), "is it restarting") {
		t.Errorf("weir savepoint of a finished job took %v and said: %s; want it refused at once, saying the job finished", took.Round(time.Second), out)
	}
}

// TestSavepointLocationIsAbsolute: with a relative --checkpoint-dir,
// `weir savepoint` prints the savepoint's absolute path: relative to the
// job's working directory, `weir savepoint dispose` or --restore with it
// from another directory missed it, or found another job's.
func TestSavepointLocationIsAbsolute(t *testing.T) {
	inParallel(t)
	dir := t.TempDir()
	in := linesOfTen(t, dir, 20000)
	cmd := exec.Command(weirBin, "run", "wordcount", "--input", in, "--output", "out", "--checkpoint-dir", "ck",
		"--checkpoint-interval", "1h", "--pace", "20", "--progress", "0", "--web", "127.0.0.1:0", "--web-token", "s3cret", "--web-linger", "0")
	cmd.Dir = dir
	log := &syncBuf{}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	var addr string
	waitFor(t, "the API's address", func() bool {
		if m := webLine.FindStringSubmatch(log.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	out, err := exec.Command(weirBin, "savepoint", "--web", addr, "--token", "s3cret").CombinedOutput()
	if err != nil {
		t.Fatalf("savepoint: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`savepoint \d+: (\S+)`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("savepoint said %s", out)
	}
	if _, err := os.Stat(m[1]); err != nil {
		t.Fatalf("weir savepoint printed %q, which the CLI (in another directory than the job) cannot find: %v; want an absolute path", m[1], err)
	}
}

// TestCheckpointFlagErrorsNameTheFlag: a negative --checkpoint-min-pause
// or --checkpoint-tolerable-failures, --checkpoint-min-pause with
// --checkpoint-max-concurrent 2, and bounds beyond the engine's are
// refused naming the flag (checkpoint.Config.Normalize refused them in
// its own words: "checkpoint min pause -1s is negative").
func TestCheckpointFlagErrorsNameTheFlag(t *testing.T) {
	inParallel(t)
	dir := t.TempDir()
	in := linesOfTen(t, dir, 1)
	for _, tc := range [][]string{
		{"--checkpoint-min-pause", "-1s"},
		{"--checkpoint-tolerable-failures", "-1"},
		{"--checkpoint-min-pause", "1s", "--checkpoint-max-concurrent", "2"},
	} {
		b, err := exec.Command(weirBin, append([]string{"run", "wordcount", "--input", in, "--output", filepath.Join(dir, "out"),
			"--checkpoint-dir", filepath.Join(dir, "ck"), "--progress", "0"}, tc...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(b), tc[0]) {
			t.Errorf("weir run %v: %v\n%s\nwant it refused naming %s", tc, err, b, tc[0])
		}
	}
}

// TestAPICLIFlagsAreValidated: the API CLI refuses --timeout 0 or
// negative naming the flag (it failed with "context deadline exceeded"),
// and takes the URL the job prints ("web UI at http://127.0.0.1:8081/") for
// --web (it failed with "lookup http … no such host").
func TestAPICLIFlagsAreValidated(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"name":"wordcount","state":"running","started":"2026-01-01T00:00:00Z","attempt":1}`))
	}))
	defer srv.Close()
	for _, tc := range []struct {
		args []string
		flag string
		ok   bool
	}{
		{[]string{"--web", srv.Listener.Addr().String(), "--timeout", "0"}, "--timeout", false},
		{[]string{"--web", srv.Listener.Addr().String(), "--timeout", "-1s"}, "--timeout", false},
		{[]string{"--web", srv.URL + "/"}, "--web", true},
		{[]string{"--web", "https://" + srv.Listener.Addr().String()}, "--web", false},
		{[]string{"--web", srv.URL + "/ui"}, "--web", false},
	} {
		for _, cmd := range web.Commands() {
			if cmd.Name() != "list" {
				continue
			}
			cmd.SetArgs(tc.args)
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			if err := cmd.Execute(); (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), tc.flag) {
				t.Errorf("weir list %v: %v; want it refused naming %s: %v", tc.args, err, tc.flag, !tc.ok)
			}

		}
	}
}

// TestDisposeOfTheSavepointARunStandsOn: `weir savepoint dispose`
// refuses the savepoint a running job restored and has completed no
// checkpoint since: it is the job's newest, its failover point and what
// --restore latest resumes. It was deleted, and the job could then only
// start over (--fresh).
func TestDisposeOfTheSavepointARunStandsOn(t *testing.T) {
	inParallel(t)
	dir := t.TempDir()
	in := linesOfTen(t, dir, 20000)
	out, ck := filepath.Join(dir, "out"), filepath.Join(dir, "ck")
	args := []string{"run", "wordcount", "--input", in, "--output", out, "--checkpoint-dir", ck, "--progress", "0", "--checkpoint-interval", "1h"}
	first, addr := startWithAPI(t, append(append([]string{}, args...), "--pace", "20"))
	b, err := exec.Command(weirBin, "savepoint", "--stop", "--web", addr, "--token", "s3cret").CombinedOutput()
	if err != nil {
		t.Fatalf("savepoint --stop: %v\n%s", err, b)
	}
	<-first.done
	m := regexp.MustCompile(`savepoint \d+: (\S+)`).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatalf("savepoint said %s", b)
	}
	second := startProc(t, append(append([]string{}, args...), "--pace", "5", "--restore", m[1])...)
	waitFor(t, "the restore", func() bool {
		return strings.Contains(second.log.String(), "restored from checkpoint") || second.exited()
	})
	if second.exited() {
		t.Fatalf("the restored run ended: %v\n%s", second.err, second.log)
	}
	b, err = exec.Command(weirBin, "savepoint", "dispose", m[1]).CombinedOutput()
	if _, serr := os.Stat(filepath.Join(m[1], "_metadata")); err == nil || serr != nil || !strings.Contains(string(b), "newest checkpoint") {
		t.Fatalf("weir savepoint dispose of %s, which the running job restored and stands on (no checkpoint since): %v, the savepoint's metadata: %v\n%s", m[1], err, serr, b)
	}
}

// TestResumeCommandAfterARestoreFromElsewhere: a run that restored an
// older checkpoint of another checkpoint directory, interrupted before its
// first checkpoint, prints a resume command that works: --restore of that
// checkpoint (it printed --restore latest, which is refused then).
func TestResumeCommandAfterARestoreFromElsewhere(t *testing.T) {
	inParallel(t)
	dir := t.TempDir()
	in := linesOfTen(t, dir, 2000)
	out, ck, ck2 := filepath.Join(dir, "out"), filepath.Join(dir, "ck"), filepath.Join(dir, "ck2")
	if b, err := exec.Command(weirBin, "run", "wordcount", "--input", in, "--output", out, "--checkpoint-dir", ck, "--progress", "0",
		"--checkpoint-interval", "20ms", "--checkpoints-retained", "1000", "--pace", "100").CombinedOutput(); err != nil {
		t.Fatalf("first run: %v\n%s", err, b)
	}
	cs := completed(t, filepath.Join(ck, "wordcount"))
	if len(cs) < 2 {
		t.Skipf("the first run completed %d checkpoints; need two", len(cs))
	}
	run := startProc(t, "run", "wordcount", "--input", in, "--output", out, "--checkpoint-dir", ck2, "--progress", "0",
		"--checkpoint-interval", "1h", "--pace", "5", "--restore", filepath.Join(ck, "wordcount", cs[0]))
	waitFor(t, "the restore", func() bool { return strings.Contains(run.log.String(), "restored from checkpoint") || run.exited() })
	run.signal(syscall.SIGINT)
	_, resume, ok := strings.Cut(run.log.String(), "Resume with:\n  ")
	if !ok {
		t.Fatalf("no resume command:\n%s", run.log)
	}
	line := strings.TrimSpace(strings.SplitN(resume, "\n", 2)[0])
	args := strings.Fields(strings.ReplaceAll(line, "'", ""))
	b, err := exec.Command(weirBin, args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("the printed resume command %q: %v\n%s", line, err, b)
	}
}

// TestAllDamagedAdvice: when every checkpoint's metadata is damaged, a
// run without --restore is not told to resume with --restore latest, which
// refuses them all.
func TestAllDamagedAdvice(t *testing.T) {
	inParallel(t)
	dir := t.TempDir()
	in := linesOfTen(t, dir, 10)
	out, ck := filepath.Join(dir, "out"), filepath.Join(dir, "ck")
	args := []string{"run", "wordcount", "--input", in, "--output", out, "--checkpoint-dir", ck, "--progress", "0"}
	if b, err := exec.Command(weirBin, args...).CombinedOutput(); err != nil {
		t.Fatalf("first run: %v\n%s", err, b)
	}
	for _, c := range completed(t, filepath.Join(ck, "wordcount")) {
		if err := os.WriteFile(filepath.Join(ck, "wordcount", c, "_metadata"), []byte("junk"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := exec.Command(weirBin, args...).CombinedOutput()
	if strings.Contains(string(b), "resume it with --restore latest") {
		latest, _ := exec.Command(weirBin, append(args, "--restore", "latest")...).CombinedOutput()
		t.Fatalf("with every checkpoint damaged, a run says:\n%s\nand --restore latest then says:\n%s", b, latest)
	}
}
