package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weirstream/weir/examples/nexmark"
)

// TestNexmarkBenchReadsTheGeneratedEvents: `weir nexmark generate` writes
// the events `weir bench nexmark` reads with the same flags: q0's results
// are exactly the generated bids. The bench prints a row per query.
func TestNexmarkBenchReadsTheGeneratedEvents(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "events.json")
	flags := []string{"--events", "20k", "--parallelism", "2", "--rate", "1000"}
	if out, err := exec.Command(weirBin, append([]string{"nexmark", "generate", "--output", file}, flags...)...).CombinedOutput(); err != nil {
		t.Fatalf("generate: %v\n%s", err, out)
	}
	cmd := exec.Command(weirBin, append([]string{"bench", "nexmark", "--query", "q0,q5", "--output", filepath.Join(dir, "results"),
		"--checkpoint-interval", "20ms"}, flags...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	table, err := cmd.Output()
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(table)), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "events/s/core") || strings.Fields(lines[1])[0] != "q0" ||
		strings.Fields(lines[1])[1] != "20000" || strings.Fields(lines[2])[0] != "q5" || !strings.Contains(lines[1], "×") {
		t.Fatalf("the table:\n%s", table)
	}

	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var want []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		var e nexmark.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %d: %v", n+1, err)
		}
		n++
		if e.Kind == nexmark.BidEvent {
			b := e.Bid
			row, _ := json.Marshal(nexmark.BidRow{Auction: b.Auction, Bidder: b.Bidder, Price: b.Price, DateTime: b.DateTime, Extra: b.Extra})
			want = append(want, string(row))
		}
	}
	if err := sc.Err(); err != nil || n != 20000 {
		t.Fatalf("read %d events: %v", n, err)
	}
	var got []string
	parts, _ := filepath.Glob(filepath.Join(dir, "results", "q0", "part-*"))
	for _, p := range parts {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, strings.Split(strings.TrimSpace(string(b)), "\n")...)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("q0 wrote %d results; the generated file has %d bids", len(got), len(want))
	}
}

// TestNexmarkBadFlags: mistakes are refused at start, naming the flag.
func TestNexmarkBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "nexmark", "--query", "q6"}, `--query: nexmark: no query "q6": choose from q0, q1, q2, q3, q4, q5, q7, q8, or all`},
		{[]string{"bench", "nexmark", "--state-backend", "rocksdb"}, `--state-backend "rocksdb": want heap or pebble`},
		{[]string{"bench", "nexmark", "--state-dir", "/tmp/x"}, "--state-dir is a setting of --state-backend pebble"},
		{[]string{"bench", "nexmark", "--events", "0"}, "--events 0: must be at least 1"},
		{[]string{"bench", "nexmark", "--events", "2X"}, `invalid argument "2X" for "--events" flag: want a whole number, with k, M or G`},
		{[]string{"bench", "nexmark", "--mode", "none", "--output", "x"}, "--output writes exactly-once, at checkpoints"},
		{[]string{"nexmark", "generate", "--events", "10"}, "--output is required"},
	} {
		out, err := exec.Command(weirBin, c.args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("weir %s: %v\n%s\nwant %q", strings.Join(c.args, " "), err, out, c.want)
		}
	}
}

// TestKill9NexmarkUnaligned runs the Nexmark queries with exchanges (q3 and
// q8: joins; q5: sliding windows) in one process, unaligned and with a 1 ms
// aligned-checkpoint timeout (nearly every checkpoint switches), kills the
// process with SIGKILL at random moments after a checkpoint completed,
// three times, restarting it with --restore latest, and requires exactly
// the results of a run without faults (aligned checkpoints). The generator
// is not throttled: the queries back-pressure it, and the restores replay
// channel state (required). Under -race it runs one of the six
// (unalignedVariants).
func TestKill9NexmarkUnaligned(t *testing.T) {
	inParallel(t)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 21))
	vs := unalignedVariants(t)
	dir := t.TempDir()
	job := func(query, out string, extra ...string) []string {
		return append([]string{"run", "nexmark", "--query", query, "--events", "2M", "--rate", "2000",
			"--output", filepath.Join(dir, out), "--checkpoint-dir", filepath.Join(dir, "ckpt-"+out), "--parallelism", "2",
			"--checkpoint-interval", "50ms", "--log-level", "info"}, extra...)
	}
	golden := map[string][]string{}
	for i, v := range vs {
		t.Run(v.query+"-"+v.args[0][2:], func(t *testing.T) {
			if golden[v.query] == nil {
				if out, err := exec.Command(weirBin, job(v.query, "golden-"+v.query)...).CombinedOutput(); err != nil {
					t.Fatalf("%v\n%s", err, out)
				}
				if golden[v.query] = committedSorted(t, filepath.Join(dir, "golden-"+v.query)); len(golden[v.query]) == 0 {
					t.Fatalf("%s found no results", v.query)
				}
			}
			kill9Nexmark(t, rng, golden[v.query], func(extra ...string) []string {
				return job(v.query, fmt.Sprint("killed-", i), append(extra, v.args...)...)
			})
		})
	}
}

// kill9Nexmark runs the query job(extra...) says in one process, killing it
// at least three times (then extra is --restore latest), and compares its
// results with golden; see TestKill9NexmarkUnaligned. Each kill follows a
// checkpoint that stored channel state, but the restore may find a later
// one that stored none: it kills again, up to maxKills, until a restore
// has replayed channel state (CI saw three restores in a row replay none).
// channelStateStored matches the log line of a checkpoint that stored
// channel state.
var channelStateStored = regexp.MustCompile(`msg="checkpoint completed" .* channel-state-bytes=[1-9]`)

// kill9Nexmark runs the query job(extra...) says in one process, killing it
// with SIGKILL (then extra is --restore latest), and compares its results
// with golden; see TestKill9NexmarkUnaligned. Each kill comes within a
// checkpoint interval of a checkpoint that stored channel state, but the
// restore may find a later one that stored none: after three kills it
// kills again, up to maxKills, until a restore has replayed channel state
// (CI saw three restores in a row replay none). A run that ends before its
// kill (the job's input is short) is the last.
func kill9Nexmark(t *testing.T, rng *rand.Rand, golden []string, job func(extra ...string) []string) {
	const minKills, maxKills = 3, 8
	var p *child
	replayed, kills := 0, 0
	for {
		var extra []string
		if kills > 0 {
			extra = []string{"--restore", "latest"}
		}
		p = startProc(t, job(extra...)...)
		if kills >= minKills && replayed > 0 || kills == maxKills {
			<-p.done
			replayed += strings.Count(p.log.String(), `msg="channel state replayed"`)
			break
		}
		waitFor(t, "a checkpoint that stored channel state", func() bool { return channelStateStored.MatchString(p.log.String()) || p.exited() })
		if !p.exited() {
			// The moment of the kill is the fault being injected.
			time.Sleep(time.Duration(rng.IntN(50)) * time.Millisecond)
			p.signal(syscall.SIGKILL)
		}
		<-p.done
		replayed += strings.Count(p.log.String(), `msg="channel state replayed"`)
		if p.err == nil {
			break // it ended before its kill: the last run
		}
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("run %d failed before its kill: %v\n%s", kills+1, p.err, p.log)
		}
		kills++
	}
	if p.err != nil {
		t.Fatalf("the last run: %v\n%s", p.err, p.log)
	}
	if kills == 0 {
		t.Fatalf("the first run ended before its kill; the test needs a longer run\n%s", p.log)
	}
	out := job()
	got := committedSorted(t, out[slices.Index(out, "--output")+1])
	if !slices.Equal(got, golden) {
		t.Fatalf("%d results after %d kills, a run without faults %d; the last run's log:\n%s", len(got), kills, len(golden), p.log)
	}
	if replayed == 0 {
		t.Fatalf("%d results as without faults, but none of %d restores replayed channel state: the test's premise is gone", len(got), kills)
	}
	t.Logf("%d results after %d kills, as without faults; %d restores replayed channel state", len(got), kills, replayed)
}
