package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirstream/weir/examples/wordcount"
	"github.com/weirstream/weir/internal/pgtest"
)

// serveKafka starts `weir kafka serve` as a process of its own, so that it
// outlives the word counts the test kills, and returns its address.
func serveKafka(t *testing.T, topics ...string) string {
	t.Helper()
	args := []string{"kafka", "serve", "--listen", "127.0.0.1:0", "--partitions", "3"}
	for _, tp := range topics {
		args = append(args, "--topic", tp)
	}
	cmd := exec.Command(weirBin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "weir: development Kafka broker listening on ")
	if err != nil || !ok {
		t.Fatalf("weir kafka serve said %q: %v", line, err)
	}
	addr, _, _ = strings.Cut(addr, " ")
	return addr
}

// chaos runs the word count with args, kills it with SIGKILL at random
// moments kills times, restarting it with --restore latest, until it
// finishes.
func chaos(t *testing.T, kills int, args ...string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	for run, killed := 0, 0; ; run++ {
		full := append([]string{"run", "wordcount", "--parallelism", "2", "--checkpoint-interval", "50ms", "--log-level", "info"}, args...)
		if run > 0 {
			full = append(full, "--restore", "latest")
		}
		cmd := exec.Command(weirBin, full...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var kill <-chan time.Time
		if killed < kills {
			// The moment of the kill is the fault injected, not a wait for
			// a condition. NB: at 150-650 ms, a restored run on a quiet
			// machine finished before its kill (CI, 3.6 s for the test).
			kill = time.After(time.Duration(100+rng.IntN(300)) * time.Millisecond)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run %d failed: %v\n%s", run, err, stderr.String())
			}
			if killed < 2 {
				t.Fatalf("the job finished after %d kills; the test needs a larger input", killed)
			}
			t.Logf("%d runs, %d kill -9s", run+1, killed)
			return
		case <-kill:
			cmd.Process.Signal(syscall.SIGKILL)
			<-done
			killed++
		}
	}
}

// TestKill9KafkaToKafka kills the word count from Kafka to Kafka at random
// moments; the broker, a process of its own, lives on. The output read
// read_committed is exactly-once, and the read reaches the end offsets: no
// transaction the killed runs left open holds it back. weir verify finds
// it to match a rerun.
func TestKill9KafkaToKafka(t *testing.T) {
	inParallel(t)
	addr := serveKafka(t, "lines", "counts")
	j := newJob(t, 4, 60_000)
	paths, _ := filepath.Glob(j.input)
	if _, err := produceLines(context.Background(), []string{addr}, "lines", paths); err != nil {
		t.Fatal(err)
	}
	chaos(t, 4, "--input", "kafka://"+addr+"/lines?bounded=true", "--output", "kafka://"+addr+"/counts", "--checkpoint-dir", j.ckpt)
	// Reading the 1.8 M lines takes about 10 s under -race on a quiet
	// 2-core machine, and CI ran out of 20 s with every partition still
	// moving; a transaction left open would hold the read for its whole
	// timeout (15 minutes), so a minute still tells the two apart.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	lines, err := wordcount.KafkaLines(ctx, []string{addr}, "counts")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := wordcount.Check(j.want, slices.Values(lines), false)
	if err != nil || !rep.OK() {
		t.Fatalf("%v %v", rep, err)
	}
	t.Logf("%v; read in %v", rep, time.Since(start))
	// The topic, read back at the last checkpoint, matches a rerun.
	out, err := exec.Command(weirBin, "verify", "wordcount", "--input", "kafka://"+addr+"/lines?bounded=true", "--output", "kafka://"+addr+"/counts",
		"--checkpoint-dir", j.ckpt, "--parallelism", "3").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "sink output: match") {
		t.Fatalf("weir verify: %v\n%s", err, out)
	}
}

// TestKill9ToPostgres kills the word count writing to PostgreSQL at random
// moments, in both modes, and checks the table: one row per occurrence,
// each once (exactly-once), or one row per word with its count (upsert);
// weir verify finds the first to match a rerun, and refuses the second.
func TestKill9ToPostgres(t *testing.T) {
	inParallel(t)
	pg := pgtest.Start(t)
	for _, mode := range []string{"exactly-once", "upsert"} {
		t.Run(mode, func(t *testing.T) {
			j := newJob(t, 4, 100_000)
			table := "counts_" + strings.ReplaceAll(mode, "-", "_")
			output := pg.URL + "&table=" + table + "&mode=" + mode
			chaos(t, 3, "--input", j.input, "--output", output, "--checkpoint-dir", j.ckpt)
			checkTable(t, pg.URL, table, mode, j.want)
			// The table matches a rerun; an upsert table (the last count
			// of each word) is refused, exit status 2.
			out, err := exec.Command(weirBin, "verify", "wordcount", "--input", j.input, "--output", output, "--checkpoint-dir", j.ckpt, "--parallelism", "3").CombinedOutput()
			var exit *exec.ExitError
			switch {
			case mode == "exactly-once" && (err != nil || !strings.Contains(string(out), "sink output: match")):
				t.Fatalf("weir verify: %v\n%s", err, out)
			case mode == "upsert" && (!errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "upsert mode")):
				t.Fatalf("weir verify of an upsert table: %v, want exit status 2 and the refusal\n%s", err, out)
			}
		})
	}
}

func checkTable(t *testing.T, url, table, mode string, want map[string]int64) {
	t.Helper()
	rows, err := wordcount.PostgresRows(context.Background(), url, table)
	if err != nil {
		t.Fatal(err)
	}
	var rep wordcount.Report
	if mode == "upsert" {
		got := map[string]int64{}
		for l := range rows {
			w, c, _ := strings.Cut(l, "\t")
			var n int64
			fmt.Sscan(c, &n)
			got[w] = n
		}
		rep = wordcount.CheckFinal(want, got)
	} else if rep, err = wordcount.Check(want, rows, false); err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("table %s: %v", table, rep)
	}
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var open int
	conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_prepared_xacts").Scan(&open)
	if open != 0 {
		t.Fatalf("%d prepared transactions left", open)
	}
	t.Logf("table %s: %v", table, rep)
}

// TestPostgresRestartsDuringTheJob: PostgreSQL restarts while the job
// writes and checkpoints; the job fails over (its connections are gone),
// restores, commits the prepared transactions that survived the restart,
// and ends exactly-once.
func TestPostgresRestartsDuringTheJob(t *testing.T) {
	inParallel(t)
	pg := pgtest.Start(t)
	j := newJob(t, 4, 100_000)
	cmd, _ := j.command("--output", pg.URL+"&table=counts", "--checkpoint-interval", "30ms", "--restart-delay", "200ms", "--restart-attempts", "50")
	// j.command's --output comes first; the later one wins.
	stderr := &syncBuf{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waitFor(t, "checkpoint", func() bool { return strings.Contains(stderr.String(), "checkpoint completed") })
	pg.Restart()
	if err := <-done; err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if !strings.Contains(stderr.String(), "job failed; restarting") {
		t.Logf("the job finished before PostgreSQL went away:\n%s", stderr)
	}
	checkTable(t, pg.URL, "counts", "exactly-once", j.want)
}

// TestBadEndsFailAtStart: mistakes in the Kafka and PostgreSQL ends fail at
// start with a message that says what to do, and nothing is written.
func TestBadEndsFailAtStart(t *testing.T) {
	addr := serveKafka(t, "lines", "counts")
	pg := pgtest.Start(t)
	noPrepared := pgtest.Start(t, "max_prepared_transactions=0")
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	os.WriteFile(in, []byte("a b a\n"), 0o644)
	for _, c := range []struct {
		input, output, want string
	}{
		{in, "kafka://" + addr + "/counts?txn-timeout=1s", "transaction timeout 1s is not above the longest a pre-committed transaction may wait"},
		{in, "kafka://" + addr + "/counts?txn-timeout=1h", "above the broker's transaction.max.timeout.ms"},
		{in, "kafka://" + addr, "no topic"},
		{in, "kafka://" + addr + "/nope", "topic nope does not exist"},
		{"kafka://" + addr + "/nope", filepath.Join(dir, "out"), "topic nope does not exist"},
		{"kafka://127.0.0.1:1/lines", filepath.Join(dir, "out"), "cannot reach the brokers"},
		{in, "postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2", "cannot connect"},
		{in, noPrepared.URL, "max_prepared_transactions is 0"},
		{in, pg.URL + "&mode=merge", `postgres mode "merge"`},
	} {
		out, err := exec.Command(weirBin, "run", "wordcount", "--input", c.input, "--output", c.output, "--checkpoint-dir", filepath.Join(dir, "ckpt")).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("--input %s --output %s: %v\n%s\nwant %q", c.input, c.output, err, out, c.want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if lines, err := wordcount.KafkaLines(ctx, []string{addr}, "counts"); err != nil || len(lines) != 0 {
		t.Fatalf("written to Kafka despite the errors: %v %v", lines, err)
	}
}

// TestStandardOutput: --output - writes each checkpoint's counts when it
// completes (the write-ahead sink); the output is exactly-once.
func TestStandardOutput(t *testing.T) {
	j := newJob(t, 2, 20_000)
	cmd := exec.Command(weirBin, "run", "wordcount", "--input", j.input, "--output", "-", "--checkpoint-dir", j.ckpt,
		"--checkpoint-interval", "20ms", "--parallelism", "2")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	rep, err := wordcount.Check(j.want, slices.Values(lines), false)
	if err != nil || !rep.OK() {
		t.Fatalf("%v %v", rep, err)
	}
}
