package racetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCILanesLoseNoFailure runs .ci/run's two lanes (from its norace=
// line to its end) with a stub go on PATH that fails the steps it is told
// to: every failing step must make the script exit non-zero, and the log
// must hold all three steps (written by an outside review of the lanes).
func TestCILanesLoseNoFailure(t *testing.T) {
	ci, err := os.ReadFile(filepath.Join("..", "..", ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(ci)
	i := strings.Index(s, "\nnorace=")
	if i < 0 {
		t.Fatal("no norace= line")
	}
	dir := t.TempDir()
	stub := `#!/usr/bin/env bash
case " $* " in
*" list "*) echo ./a; echo ./cmd/weir; exit 0;;
*" -race "*) echo "RACE LANE"; exit ${FAIL_RACE:-0};;
*" -short "*) echo "CMDWEIR LANE"; exit ${FAIL_SHORT:-0};;
*' -run '*) echo "NORACE LANE"; exit ${FAIL_NORACE:-0};;
esac
echo "unexpected go $*"; exit 99
`
	if err := os.WriteFile(filepath.Join(dir, "go"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "lanes")
	if err := os.WriteFile(script, []byte("set -euo pipefail\n"+s[i+1:]), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env  string
		fail bool
	}{{"", false}, {"FAIL_RACE=1", true}, {"FAIL_SHORT=1", true}, {"FAIL_NORACE=1", true}, {"FAIL_SHORT=2", true}, {"FAIL_RACE=2", true}, {"FAIL_SHORT=1 FAIL_NORACE=1", true}} {
		cmd := exec.Command("bash", script)
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
		cmd.Env = append(cmd.Env, strings.Fields(c.env)...)
		out, err := cmd.CombinedOutput()
		if (err != nil) != c.fail {
			t.Errorf("%q: exit %v, want failure %v:\n%s", c.env, err, c.fail, out)
		}
		for _, lane := range []string{"RACE LANE", "CMDWEIR LANE", "NORACE LANE"} {
			if !strings.Contains(string(out), lane) {
				t.Errorf("%q: the log lacks %s:\n%s", c.env, lane, out)
			}
		}
	}
}
