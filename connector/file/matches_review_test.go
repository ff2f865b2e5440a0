package file

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestMatchesSinkFilesUnderABracketedDirectory (outside review): the
// working directory's name holds glob metacharacters ("proj[1]"). The
// relative input 'out/*' matches every file the sink writes into out
// (Lines globs the relative pattern), but MatchesSinkFiles made the
// pattern absolute first, so the working directory's "[1]" became a
// character class and nothing matched.
func TestMatchesSinkFilesUnderABracketedDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "proj[1]")
	if err := os.MkdirAll(filepath.Join(dir, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	// What the source would read: Lines's own glob of the relative pattern.
	if err := os.WriteFile(filepath.Join(dir, "out", "part-output-0-1"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	files, err := glob(vfs.Default, "out/*")
	if err != nil || len(files) == 0 {
		t.Fatalf("Lines's glob of out/*: %v %v", files, err)
	}
	if f, ok := MatchesSinkFiles("out/*", "out", "output"); !ok {
		t.Fatalf("input out/* (which Lines expands to %v) against output out: no match (%q), want the sink's files", files, f)
	}
}
