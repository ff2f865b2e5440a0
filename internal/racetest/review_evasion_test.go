package racetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReviewCheckSeesEveryEvasion (outside review): TestCIRunsWhatRaceSkips
// is run, in a throwaway module, on trees where a test skips under -race
// and .ci/run never runs it without; the check must fail on each. It
// passed on these before the review (it fails naming the test, or the
// helper that skips):
//
//   - alias: racetest imported under another name (rt.Skip(t));
//   - helper: Skip called by a helper function the test calls (as
//     state/heap's runStress could);
//   - package: the test is named in norace, but its package is not on
//     .ci/run's go test line (the check never looks at the packages);
//   - fuzz: a Fuzz function calls Skip(f): go test runs its seed corpus
//     as a test, and the walk only looks at Test functions.
func TestReviewCheckSeesEveryEvasion(t *testing.T) {
	var src = map[string][]byte{}
	for _, f := range []string{"racetest.go", "norace.go", "race.go", "racetest_test.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src[f] = b
	}
	const imp = "example.com/fx/internal/racetest"
	ci := func(list, pkgs string) string {
		return "#!/usr/bin/env bash\nnorace='^(" + list + ")$'\ngo test -count=1 -run \"$norace\" " + pkgs + "\n"
	}
	// a/ is a test .ci/run does run: the check finds at least one Skip.
	a := "package a\n\nimport (\n\t\"testing\"\n\n\t\"" + imp + "\"\n)\n\nfunc TestA(t *testing.T) { racetest.Skip(t) }\n"
	cases := []struct {
		name, ci, b string
	}{
		{"alias", ci("TestA", "./a"),
			"package b\n\nimport (\n\t\"testing\"\n\n\trt \"" + imp + "\"\n)\n\nfunc TestB(t *testing.T) { rt.Skip(t) }\n"},
		{"helper", ci("TestA", "./a"),
			"package b\n\nimport (\n\t\"testing\"\n\n\t\"" + imp + "\"\n)\n\nfunc slow(t testing.TB) { racetest.Skip(t) }\n\nfunc TestB(t *testing.T) { slow(t) }\n"},
		{"package", ci("TestA|TestB", "./a"),
			"package b\n\nimport (\n\t\"testing\"\n\n\t\"" + imp + "\"\n)\n\nfunc TestB(t *testing.T) { racetest.Skip(t) }\n"},
		{"fuzz", ci("TestA", "./a ./b"),
			"package b\n\nimport (\n\t\"testing\"\n\n\t\"" + imp + "\"\n)\n\nfunc FuzzB(f *testing.F) {\n\tracetest.Skip(f)\n\tf.Add(1)\n\tf.Fuzz(func(t *testing.T, n int) {})\n}\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			files := map[string]string{
				"go.mod":      "module example.com/fx\n\ngo 1.26.0\n",
				".ci/run":     c.ci,
				"a/a_test.go": a,
				"b/b_test.go": c.b,
			}
			for f, b := range src {
				files["internal/racetest/"+f] = string(b)
			}
			for f, s := range files {
				p := filepath.Join(root, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("go", "test", "-count=1", "-run", "^TestCIRunsWhatRaceSkips$", "./internal/racetest")
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod -buildvcs=false")
			out, err := cmd.CombinedOutput()
			if _, ok := err.(*exec.ExitError); err != nil && !ok {
				t.Fatal(err)
			}
			if err == nil {
				t.Errorf("%s: TestCIRunsWhatRaceSkips passes, yet b's test skips under -race and .ci/run never runs it without:\n%s\n%s", c.name, strings.TrimSpace(c.ci), strings.TrimSpace(string(out)))
			} else if !strings.Contains(string(out), "TestB") && !strings.Contains(string(out), "FuzzB") && !strings.Contains(string(out), "b_test.go) calls racetest.Skip") {
				t.Errorf("%s: the check failed, but not naming b's test or the helper that skips:\n%s", c.name, out)
			}
		})
	}
}
