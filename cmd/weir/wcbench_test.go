package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestWordCountBench runs `weir bench wordcount` on a small corpus: a row
// per configuration, each run's output checked to hold every word's counts once;
// without wcfast's source its column is skipped, saying so.
func TestWordCountBench(t *testing.T) {
	out, err := exec.Command(weirBin, "bench", "wordcount", "--files", "2", "--lines", "2000", "--runs", "1", "--wcfast", t.TempDir()).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	s := string(out)
	for _, want := range []string{"32000 words", "words/cpu-s", "median", "weir, checkpoints off", "weir, checkpoints every 1s", "weir, checkpoints every 100ms", "wcfast: skipped: no source at"} {
		if !strings.Contains(s, want) {
			t.Fatalf("no %q in:\n%s", want, s)
		}
	}
}
