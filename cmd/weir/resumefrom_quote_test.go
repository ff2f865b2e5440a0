package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirstream/weir"
)

// TestResumeFromAdviceIsOneShellWord: the savepoint advice "Resume with:
// <cmd> --restore <resumeFrom(...)>" is a shell command line, as
// interrupted's is: the location is quoted, so that a checkpoint directory
// with a space, or an s3 URL whose query holds '&', no longer splits or
// backgrounds the command when pasted (found by an outside review,
// session 32).
func TestResumeFromAdviceIsOneShellWord(t *testing.T) {
	for _, tc := range []struct{ dir, want string }{
		{"/tmp/my checkpoints", filepath.Join("/tmp/my checkpoints", "wordcount", "chk-7")},
		{"s3://bucket/ck?endpoint=http://127.0.0.1:9000&region=eu", "s3://bucket/ck/wordcount/chk-7?endpoint=http://127.0.0.1:9000&region=eu"},
	} {
		got := resumeFrom(weir.ClusterConfig{}, tc.dir, "wordcount", 7)
		out, err := exec.Command("sh", "-c", `printf '%s\n' `+got).Output()
		if err != nil {
			t.Fatal(err)
		}
		if words := strings.TrimSuffix(string(out), "\n"); words != tc.want {
			t.Errorf("advice --restore %s reads in a shell as %q, want the one word %q", got, words, tc.want)
		}
	}
}
