package wordcount

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

// captureStdout runs f with os.Stdout sent to a file, and returns what was
// written.
func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	tmp, err := os.CreateTemp(t.TempDir(), "stdout")
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = tmp
	defer func() { os.Stdout = old }()
	f()
	b, err := os.ReadFile(tmp.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestStdoutMarkersFollowAFileURLCheckpointDir: with --checkpoint-dir
// file:///abs and --output -, the write-ahead sink's markers must live
// beside the checkpoints (ends.go says so). Restoring the final checkpoint
// (which changes nothing, design note 2) from another working directory
// must then write nothing to standard output. Today the markers go to
// ./file:/abs/wordcount/stdout-markers, relative to the working directory,
// and the restore from another directory writes the last batch again.
func TestStdoutMarkersFollowAFileURLCheckpointDir(t *testing.T) {
	for _, scheme := range []string{"", "file://"} {
		t.Run("scheme="+scheme, func(t *testing.T) {
			dir := t.TempDir()
			in := filepath.Join(dir, "in.txt")
			if err := os.WriteFile(in, []byte("a b a\nc\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			ck := filepath.Join(dir, "ck")
			cwdA, cwdB := filepath.Join(dir, "A"), filepath.Join(dir, "B")
			for _, d := range []string{cwdA, cwdB} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			o := Options{Input: in, Output: "-", Parallelism: 1,
				Checkpoint: weir.CheckpointConfig{Interval: 50 * time.Millisecond, Dir: scheme + ck}}
			t.Chdir(cwdA)
			first := captureStdout(t, func() { runToEnd(t, o) })
			if first == "" {
				t.Fatal("first run wrote nothing")
			}
			if _, err := os.Stat(filepath.Join(ck, "wordcount", markerDir)); err != nil {
				ents, _ := os.ReadDir(cwdA)
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				t.Errorf("markers not beside the checkpoints in %s: %v; the working directory holds %q", ck, err, names)
			}
			t.Chdir(cwdB)
			o.Restore = "latest"
			second := captureStdout(t, func() { runToEnd(t, o) })
			if second != "" {
				t.Fatalf("restoring the final checkpoint from another working directory wrote again:\n%s(first run wrote:\n%s)", second, first)
			}
		})
	}
}

// TestStdoutRestoreByPathIntoAnotherCheckpointDirWritesNothingAgain: a
// run writes to standard output with checkpoints in A and ends (its final
// checkpoint covers every record). A run restoring that final checkpoint
// by path, with its checkpoints in B, must write nothing: every batch the
// checkpoint holds was written. The markers were kept in A only, so the
// restore writes the last batch again.
func TestStdoutRestoreByPathIntoAnotherCheckpointDirWritesNothingAgain(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("a b a\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ckA, ckB := filepath.Join(dir, "ckA"), filepath.Join(dir, "ckB")
	o := Options{Input: in, Output: "-", Parallelism: 1,
		Checkpoint: weir.CheckpointConfig{Interval: 50 * time.Millisecond, Dir: ckA}}
	first := captureStdout(t, func() { runToEnd(t, o) })
	chks, _ := filepath.Glob(filepath.Join(ckA, "wordcount", "chk-*"))
	if len(chks) == 0 {
		t.Fatal("no checkpoint in A")
	}
	latest := ""
	for _, c := range chks {
		if _, err := os.Stat(filepath.Join(c, "_metadata")); err == nil && (latest == "" || len(c) > len(latest) || len(c) == len(latest) && c > latest) {
			latest = c
		}
	}
	o.Checkpoint.Dir, o.Restore = ckB, latest
	second := captureStdout(t, func() { runToEnd(t, o) })
	if second != "" {
		t.Fatalf("restoring %s (the final checkpoint) with checkpoints in another directory wrote again:\n%s(first run wrote:\n%s)", latest, second, first)
	}
}

// TestStdoutRefusesObjectStorageCheckpoints: the markers of --output - live
// in a local directory beside the checkpoints; with checkpoints in object
// storage they went to a directory named after the URL, relative to the
// working directory, and a restart elsewhere wrote batches again.
func TestStdoutRefusesObjectStorageCheckpoints(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Build(Options{Input: in, Output: "-", Parallelism: 1, Checkpoint: weir.CheckpointConfig{Interval: time.Second, Dir: "mem://stdout-markers"}})
	if err == nil || !strings.Contains(err.Error(), "give a local checkpoint directory") {
		t.Fatalf("output - with checkpoints in object storage: %v, want a refusal saying to give a local checkpoint directory", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("the refused build left %d entries in the working directory, want only the input", len(ents))
	}
}
