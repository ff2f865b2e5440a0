package file

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestNonRegularInputIsRefused (outside review, new user): an input that is
// not a regular file (a FIFO, /dev/stdin, a shell's <(cmd)) has size 0 to
// stat, so Lines made no split for it and the job finished "successfully"
// having read nothing (`echo 'a b' | weir run wordcount --input /dev/stdin`
// exited 0 with no output); a FIFO without a writer blocked the open at
// start for ever, deaf to ^C and SIGTERM. Lines refuses it at start, naming
// the file, without opening it.
func TestNonRegularInputIsRefused(t *testing.T) {
	dir := t.TempDir()
	held := filepath.Join(dir, "held.fifo") // open for writing, as a shell pipe whose writer runs
	alone := filepath.Join(dir, "alone.fifo")
	for _, p := range []string{held, alone} {
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Skip("mkfifo:", err)
		}
	}
	w, err := os.OpenFile(held, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteString("a b\nc a\n"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{held, alone, filepath.Join(dir, "*.fifo")} {
		_, err := Lines(LinesConfig{Pattern: p}) // returns: a FIFO without a writer is not opened
		if err == nil || !strings.Contains(err.Error(), "not a regular file") || !strings.Contains(err.Error(), dir) {
			t.Errorf("input %s (a FIFO): %v; want it refused, naming the file, as not a regular file", p, err)
		}
	}
}
