package file

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMatchesSinkFiles: an input pattern that matches files a sink writes
// into its directory is found (outside review: `--input 'd/*/*' --output
// d/out` read the job's own output at a restore), however the two are
// spelled; one that matches none of them is not.
func TestMatchesSinkFiles(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		pattern, out string
		match        bool
	}{
		{filepath.Join(dir, "d", "*", "*"), filepath.Join(dir, "d", "out"), true},
		{filepath.Join(dir, "d", "out", "*"), filepath.Join(dir, "d", "out") + "/", true},
		{filepath.Join(dir, "d", "*", "part-*"), filepath.Join(dir, "d", "out"), true},
		{filepath.Join(dir, "d", "out", ".*"), filepath.Join(dir, "d", "x", "..", "out"), true},
		{filepath.Join(dir, "d", "*", "*.txt"), filepath.Join(dir, "d", "out"), false},
		{filepath.Join(dir, "d", "in", "*"), filepath.Join(dir, "d", "out"), false},
		{filepath.Join(dir, "d", "*"), filepath.Join(dir, "d", "out"), false}, // the directory, not its files
		{filepath.Join(dir, "d", "*", "*", "*"), filepath.Join(dir, "d", "out"), false},
		// A wildcard over the subtask number or the checkpoint id: samples
		// beyond the first of each (a review, session 32).
		{filepath.Join(dir, "d", "out", "part-*-2"), filepath.Join(dir, "d", "out"), true},
		{filepath.Join(dir, "d", "out", "part-output-1?-*"), filepath.Join(dir, "d", "out"), true},
		{filepath.Join(dir, "d", "out", ".part-*-3-*.inprogress"), filepath.Join(dir, "d", "out"), true},
		{filepath.Join(dir, "d", "out", "part-*-x"), filepath.Join(dir, "d", "out"), false},
		{"/*", "/", true}, // the root: one element below it
		{"/*/*", "/", false},
	} {
		f, ok := MatchesSinkFiles(tc.pattern, tc.out, "output")
		if ok != tc.match {
			t.Errorf("input %s, output %s: matched %v (%s), want %v", tc.pattern, tc.out, ok, f, tc.match)
		}
	}
	// Relative and absolute spellings of one place.
	t.Chdir(dir)
	if _, ok := MatchesSinkFiles("d/*/*", filepath.Join(dir, "d", "out"), "output"); !ok {
		t.Error("relative input d/*/* against the absolute output directory: no match, want one")
	}
	// A symbolic link to the output directory.
	if err := os.MkdirAll(filepath.Join(dir, "d", "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "d", "out"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if _, ok := MatchesSinkFiles("link/*", "d/out", "output"); !ok {
		t.Error("input link/*, a symbolic link to the output directory d/out: no match, want one")
	}
	// Another sink's files are not this one's.
	if f, ok := MatchesSinkFiles(filepath.Join(dir, "d", "out", "part-count-*"), filepath.Join(dir, "d", "out"), "output"); ok {
		t.Errorf("input part-count-* matched %s of sink output", f)
	}
}

// BenchmarkMatchesSinkFiles: the check every process building a job with
// a file input and output makes at start (a word count's coordinator and
// workers too), for an input that cannot match the output's files.
func BenchmarkMatchesSinkFiles(b *testing.B) {
	dir := b.TempDir()
	for b.Loop() {
		if _, ok := MatchesSinkFiles(filepath.Join(dir, "in-*.txt"), filepath.Join(dir, "out"), "output"); ok {
			b.Fatal("matched")
		}
	}
}
