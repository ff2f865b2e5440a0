package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/weirstream/weir"
)

// A file:// checkpoint location in resume advice (found by an outside
// review of session 32's fixes).

// TestResumeCommandKeepsAFileURL: a run restored from file:///…/chk-3 and
// interrupted before it completed a checkpoint is told to resume from that
// path (it printed "--restore <cwd>/file:/…/chk-3", which does not exist).
func TestResumeCommandKeepsAFileURL(t *testing.T) {
	chk := filepath.Join(t.TempDir(), "ck", "wordcount", "chk-3")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cmd := &cobra.Command{}
	cmd.SetContext(ctx)
	err := interrupted(checkpointFlags{dir: "ck2", retainOnCancel: true, mode: "exactly-once", restore: "file://" + chk}, context.Canceled, cmd, false)
	_, resume, _ := strings.Cut(err.Error(), "--restore ")
	resume = strings.Trim(strings.TrimSpace(resume), "'")
	if resume != chk && resume != "file://"+chk {
		t.Fatalf("resume advice %q restores %q; want %q (or %q)", err, resume, chk, "file://"+chk)
	}
}

// TestSavepointResumeFromAFileURLDir: after a stop with savepoint 7 in
// --checkpoint-dir file://<abs>, the resume command restores
// <abs>/wordcount/chk-7 (it gave "file:/<abs>/…", and then
// "<cwd>/file:/<abs>/…").
func TestSavepointResumeFromAFileURLDir(t *testing.T) {
	dir := t.TempDir()
	got := resumeFrom(weir.ClusterConfig{}, "file://"+dir, "wordcount", 7)
	want := filepath.Join(dir, "wordcount", "chk-7")
	if got != want && got != "file://"+want {
		t.Fatalf("resumeFrom(file://%s) = %q; want %q (or %q)", dir, got, want, "file://"+want)
	}
}
