package weir_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/examples/wordcount"
)

// stateReads is a file system that counts the state files opened for
// reading: a checkpoint's own files and shared files, not its metadata.
type stateReads struct {
	vfs.FS
	n atomic.Int64
}

func (s *stateReads) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	if filepath.Base(name) != "_metadata" && (strings.Contains(name, "/chk-") || strings.Contains(name, "/shared/")) {
		s.n.Add(1)
	}
	return s.FS.Open(name, opts...)
}

// manyWords writes the word count's input with 20,000 distinct words, so
// that each counting subtask's heap state is a file, not inline.
func manyWords(t *testing.T, dir string) wordcount.Options {
	t.Helper()
	for f := range 2 {
		var b strings.Builder
		for i := range 10_000 {
			fmt.Fprintf(&b, "w%d x%d\n", (i*7+f)%20011, i%89)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("in-%d.txt", f)), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return wordcount.Options{Input: filepath.Join(dir, "in-*.txt"), Output: filepath.Join(dir, "out"), Parallelism: 2,
		Checkpoint: weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: filepath.Join(dir, "ckpt")}}
}

var restoredLine = regexp.MustCompile(`msg="restored state".* localBytes=(\d+) remotePieces=\d+ remoteBytes=(\d+)`)

// restoredBytes sums the "restored state" log lines.
func restoredBytes(t *testing.T, logs string) (local, remote int64) {
	t.Helper()
	for _, m := range restoredLine.FindAllStringSubmatch(logs, -1) {
		l, _ := strconv.ParseInt(m[1], 10, 64)
		r, _ := strconv.ParseInt(m[2], 10, 64)
		local, remote = local+l, remote+r
	}
	return local, remote
}

// The word count, with local recovery, runs until 2 checkpoints completed
// and is cancelled (the process ends as a killed one would: its local
// copies stay); a second run restores the latest checkpoint from the local
// copies, reading no state file of the checkpoint storage, and the output
// is exactly-once.
func TestLocalRecoveryRestoresFromTheLocalCopy(t *testing.T) {
	onBackends(t, func(t *testing.T, sb weir.StateBackend) { testLocalRecovery(t, sb, nil) })
}

// A local copy damaged between the runs (a byte flipped in every file) is
// not used: every piece is read from the checkpoint storage, and the
// output is still exactly-once.
func TestLocalRecoveryFallsBackFromADamagedCopy(t *testing.T) {
	onBackends(t, func(t *testing.T, sb weir.StateBackend) {
		testLocalRecovery(t, sb, func(p string) error {
			b, err := os.ReadFile(p)
			if err != nil || len(b) == 0 {
				return err
			}
			b[len(b)/2] ^= 1
			return os.WriteFile(p, b, 0o644)
		})
	})
}

func testLocalRecovery(t *testing.T, sb weir.StateBackend, damage func(path string) error) {
	dir := t.TempDir()
	o := manyWords(t, dir)
	reads := &stateReads{FS: vfs.Default}
	o.Checkpoint.FS = reads
	o.StateBackend = sb
	o.LocalRecovery, o.LocalRecoveryDir = true, filepath.Join(dir, "local")
	cancelAfter(t, o, 2)
	if reads.n.Load() != 0 {
		t.Fatalf("the first run read %d state files", reads.n.Load())
	}
	files := 0
	err := filepath.WalkDir(o.LocalRecoveryDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files++
		if damage != nil {
			return damage(p)
		}
		return nil
	})
	if err != nil || files == 0 {
		t.Fatalf("the local copy holds %d files (%v)", files, err)
	}
	var logs bytes.Buffer
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	o.Restore = "latest"
	if _, err := executeErr(t, o); err != nil {
		t.Fatal(err)
	}
	if rep := report(t, o); !rep.OK() {
		t.Fatalf("output after the restore: %v", rep)
	}
	local, remote := restoredBytes(t, logs.String())
	if damage == nil {
		if local == 0 || remote != 0 || reads.n.Load() != 0 {
			t.Fatalf("restored %d bytes locally, %d remotely, reading %d state files of the checkpoint storage; want only local", local, remote, reads.n.Load())
		}
		return
	}
	if local != 0 || remote == 0 || reads.n.Load() == 0 {
		t.Fatalf("from a damaged local copy: restored %d bytes locally, %d remotely, reading %d state files of the checkpoint storage; want only remote", local, remote, reads.n.Load())
	}
}
