package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestReview1RestoreCheckpointOfTheParentCommit: the Nexmark queries with
// struct state values (q3: join; q4: windows and Reduce; q5: listing
// windows; q7: value and list state of structs; q8: window co-group), run
// by a weir built from the commit before Binary (JSON state values and
// JSON channel state, unaligned), killed with SIGKILL after a checkpoint
// completed, then restored by this weir (--restore latest) to the end:
// the results must be exactly those of the old weir's run without faults.
// WEIR_OLD_BIN names the old binary (go build ./cmd/weir in a checkout of
// a0edda5^); without it the test skips (CI has no time for it: ten runs
// and an old build):
//
//	WEIR_OLD_BIN=/tmp/weir-old go test -run TestReview1RestoreCheckpointOfTheParentCommit -v ./cmd/weir
func TestReview1RestoreCheckpointOfTheParentCommit(t *testing.T) {
	old := os.Getenv("WEIR_OLD_BIN")
	if old == "" {
		t.Skip("WEIR_OLD_BIN unset")
	}
	queries := []string{"q3", "q4", "q5", "q7", "q8"}
	if q := os.Getenv("WEIR_REVIEW1_QUERIES"); q != "" {
		queries = strings.Split(q, ",")
	}
	dir := t.TempDir()
	for _, backend := range []string{"heap", "pebble"} {
		for _, q := range queries {
			t.Run(q+"-"+backend, func(t *testing.T) {
				name := q + "-" + backend
				job := func(out string, extra ...string) []string {
					return append([]string{"run", "nexmark", "--query", q, "--events", "1M", "--rate", "2000",
						"--output", filepath.Join(dir, out), "--checkpoint-dir", filepath.Join(dir, "ckpt-"+out), "--parallelism", "2",
						"--checkpoint-interval", "50ms", "--log-level", "info", "--state-backend", backend}, extra...)
				}
				if out, err := exec.Command(old, job("golden-"+name)...).CombinedOutput(); err != nil {
					t.Fatalf("old weir: %v\n%s", err, out)
				}
				golden := committedSorted(t, filepath.Join(dir, "golden-"+name))
				if len(golden) == 0 {
					t.Fatalf("%s: no results", name)
				}
				args := job("killed-"+name, "--checkpoint-alignment", "unaligned")
				p := startCmd(t, old, args...)
				waitFor(t, "a checkpoint", func() bool {
					return strings.Count(p.log.String(), `msg="checkpoint completed"`) >= 2 || p.exited()
				})
				if p.exited() {
					t.Fatalf("the old run ended (%v) before its kill\n%s", p.err, p.log)
				}
				p.signal(syscall.SIGKILL)
				<-p.done
				n := startProc(t, append(args, "--restore", "latest")...)
				<-n.done
				if n.err != nil {
					t.Fatalf("the new weir's restore of the old checkpoint: %v\n%s", n.err, n.log)
				}
				if !strings.Contains(n.log.String(), "restor") {
					t.Logf("the new run's log does not mention a restore:\n%s", n.log)
				}
				got := committedSorted(t, filepath.Join(dir, "killed-"+name))
				if !slices.Equal(got, golden) {
					t.Fatalf("%s: %d results after the new weir restored the old checkpoint, %d without faults\n%s", name, len(got), len(golden), n.log)
				}
				t.Logf("%s: %d results, as the old weir's without faults; replayed channel state %d times", name, len(got), strings.Count(n.log.String(), `msg="channel state replayed"`))
			})
		}
	}
}
