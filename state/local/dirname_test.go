package local

import "testing"

// Every job or operator name is one directory inside the store, distinct
// from every other name's, and read back as itself (a scale-down sweep
// parses the directories it finds).
func TestDirNames(t *testing.T) {
	names := []string{"", ".", "..", "...", "a", "a.b", "..a", "%", "%2e", "%2E2E", "a/b", `a\b`, "ü", "a-1", "v 1"}
	seen := map[string]string{}
	for _, n := range names {
		d := dirName(n)
		if d == "" || d == "." || d == ".." || len(d) != len([]rune(d)) && d == n {
			t.Errorf("dirName(%q) = %q: not one safe directory name", n, d)
		}
		for _, c := range d {
			if c == '/' || c == '\\' {
				t.Errorf("dirName(%q) = %q holds a separator", n, d)
			}
		}
		if other, ok := seen[d]; ok {
			t.Errorf("dirName(%q) = dirName(%q) = %q", n, other, d)
		}
		seen[d] = n
		if back, ok := nameOfDir(d); !ok || back != n {
			t.Errorf("nameOfDir(dirName(%q)) = %q, %v", n, back, ok)
		}
	}
}
