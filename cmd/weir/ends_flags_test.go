package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestEndsAndLineLimitFlags: an --output or --input URL whose scheme a job
// does not serve fails at start, naming what it serves, and leaves no
// directory named after it; a line over --max-line-bytes fails the job at
// once, naming the flag, without a restart.
func TestEndsAndLineLimitFlags(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("a b\n"+strings.Repeat("x", 20)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(dir, "ckpt")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "wordcount", "--input", in, "--output", "mysql://x/y", "--checkpoint-dir", ckpt}, "the word count reads or writes no mysql: URL"},
		{[]string{"run", "wordcount", "--input", "kafka:/127.0.0.1:1/lines", "--output", "out", "--checkpoint-dir", ckpt}, "want kafka://host:port/topic"},
		{[]string{"run", "wordcount", "--input", in, "--output", "out", "--checkpoint-dir", ckpt, "--max-line-bytes", "0"}, "--max-line-bytes 0: want 1 to"},
		{[]string{"run", "wordcount", "--input", in, "--output", "out", "--checkpoint-dir", ckpt, "--max-line-bytes", "10"}, "input " + in + ": the line at byte 4: line too long: it is longer than 10 bytes; raise the limit (--max-line-bytes"},
		{[]string{"run", "nexmark", "--events", "10", "--output", "Kafka://127.0.0.1:1/q5", "--checkpoint-dir", ckpt}, "--output kafka:…: nexmark writes its results to a local directory only"},
	} {
		cmd := exec.Command(weirBin, c.args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("weir %s: %v\n%s\nwant %q", strings.Join(c.args, " "), err, out, c.want)
		}
		if strings.Contains(string(out), "restarting") {
			t.Errorf("weir %s restarted the job:\n%s", strings.Join(c.args, " "), out)
		}
	}
	for _, name := range []string{"mysql:", "Kafka:", "kafka:"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			t.Errorf("a directory %s was made", name)
		}
	}
}
