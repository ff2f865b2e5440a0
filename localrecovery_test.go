package weir_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/generator"
	"github.com/weirstream/weir/examples/wordcount"
	"github.com/weirstream/weir/internal/s3test"
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
func restoredBytes(t testing.TB, logs string) (local, remote int64) {
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

// localRecoveryJob is the word count over manyWords with local recovery
// on backend sb, whose checkpoint storage counts the state files read.
func localRecoveryJob(t *testing.T, sb weir.StateBackend) (wordcount.Options, *stateReads) {
	t.Helper()
	dir := t.TempDir()
	o := manyWords(t, dir)
	reads := &stateReads{FS: vfs.Default}
	o.Checkpoint.FS = reads
	o.StateBackend = sb
	o.LocalRecovery, o.LocalRecoveryDir = true, filepath.Join(dir, "local")
	return o, reads
}

func testLocalRecovery(t *testing.T, sb weir.StateBackend, damage func(path string) error) {
	o, reads := localRecoveryJob(t, sb)
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

// A restore that downloaded (no local copy: a new disk) keeps what it
// read: the first checkpoint after it reuses the restored files (an
// owned restore), and a restore of that checkpoint finds all of them in
// the local copy.
func TestLocalRecoveryKeepsWhatARestoreDownloaded(t *testing.T) {
	onBackends(t, func(t *testing.T, sb weir.StateBackend) {
		o, reads := localRecoveryJob(t, sb)
		cancelAfter(t, o, 2)
		if err := os.RemoveAll(o.LocalRecoveryDir); err != nil {
			t.Fatal(err)
		}
		o.Restore = "latest"
		cancelAfter(t, o, 1)
		if reads.n.Load() == 0 {
			t.Fatal("the restore without a local copy read no state file of the checkpoint storage")
		}
		reads.n.Store(0)
		var logs bytes.Buffer
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		if _, err := executeErr(t, o); err != nil {
			t.Fatal(err)
		}
		if rep := report(t, o); !rep.OK() {
			t.Fatalf("output after the restores: %v", rep)
		}
		if local, remote := restoredBytes(t, logs.String()); local == 0 || remote != 0 || reads.n.Load() != 0 {
			t.Fatalf("restored %d bytes locally, %d remotely, reading %d state files of the checkpoint storage; want only local", local, remote, reads.n.Load())
		}
	})
}

// taskDirs lists the local copy's task directories of job.
func taskDirs(t *testing.T, localDir, job string) []string {
	t.Helper()
	es, err := os.ReadDir(filepath.Join(localDir, job))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// After a scale-down (parallelism 2 to 1), the local copies of the
// subtasks the job no longer has are deleted once a checkpoint of the
// scaled-down job completes, not left on the disk for good.
func TestLocalRecoveryScaleDownDeletesTheOldSubtasksCopies(t *testing.T) {
	dir := t.TempDir()
	o := manyWords(t, dir)
	o.LocalRecovery, o.LocalRecoveryDir = true, filepath.Join(dir, "local")
	cancelAfter(t, o, 2)
	before := taskDirs(t, o.LocalRecoveryDir, "wordcount")
	if !slices.ContainsFunc(before, func(d string) bool { return strings.HasSuffix(d, "-1") }) {
		t.Fatalf("at parallelism 2 the local copy holds %v: no subtask 1", before)
	}
	o.Parallelism, o.Restore = 1, "latest"
	if _, err := executeErr(t, o); err != nil {
		t.Fatal(err)
	}
	if rep := report(t, o); !rep.OK() {
		t.Fatalf("output after the scale-down: %v", rep)
	}
	after := taskDirs(t, o.LocalRecoveryDir, "wordcount")
	if len(after) == 0 || slices.ContainsFunc(after, func(d string) bool { return !strings.HasSuffix(d, "-0") }) {
		t.Fatalf("after a checkpoint at parallelism 1 the local copy holds %v (before: %v); want only subtask 0's", after, before)
	}
}

var restoredAt = regexp.MustCompile(`time=(\S+) level=INFO msg="restored state"`)

var recoveryMiB = flag.Int("recovery-mib", 32, "BenchmarkLocalRecovery: MiB of Pebble state (1 KiB values that do not compress)")

// padded is keyed state of 1 KiB per key, values that do not compress.
type padded struct {
	v *weir.ValueState[int64, []byte]
}

func (p *padded) Open(c *weir.KeyedContext[int64]) (err error) {
	p.v, err = weir.NewValueState[int64, []byte](c, "v")
	return err
}

func (p *padded) Process(c *weir.KeyedContext[int64], i int64, _ weir.Collector[int64]) error {
	if i >= int64(*recoveryMiB)<<10 {
		return nil // the load is over: the job idles on
	}
	v := make([]byte, 1<<10)
	x := uint64(i)*0x9e3779b97f4a7c15 + 1
	for j := range v {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		v[j] = byte(x)
	}
	p.v.Update(v)
	return nil
}

// BenchmarkLocalRecovery times a restart of a job with -recovery-mib of
// Pebble state on S3 (in memory, on loopback): from Execute to the first
// checkpoint completed after the restore (the first new committed output),
// restoring from the local copy (local) or downloading (remote: the local
// directory is empty). The state is loaded once; each iteration restores
// the latest checkpoint. It reports seconds to the first commit and the
// bytes restored from each source.
func BenchmarkLocalRecovery(b *testing.B) {
	s3 := s3test.Start(b)
	dir := b.TempDir()
	keys := int64(*recoveryMiB) << 10
	cfg := func(localDir string, logs *bytes.Buffer, onEvent func(weir.JobEvent)) *weir.Environment {
		e := weir.New(weir.Config{Job: "recovery", Parallelism: 1, Restore: "latest",
			Checkpoint:    weir.CheckpointConfig{Interval: 200 * time.Millisecond, Dir: s3.URL},
			StateBackend:  weir.StateBackend{Kind: weir.PebbleState, Dir: filepath.Join(dir, "state")},
			LocalRecovery: true, LocalRecoveryDir: localDir, OnEvent: onEvent,
			Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
		src, err := generator.New(generator.Config[int64]{Make: func(i int64) int64 { return i }, RatePerSecond: 100_000})
		if err != nil {
			b.Fatal(err)
		}
		keyed := weir.KeyBy(weir.Source(e, "numbers", src), func(i int64) int64 { return i })
		weir.Sink(weir.Process(keyed, "load", func() weir.KeyedProcessFunction[int64, int64, int64] { return &padded{} }), "drop",
			weir.SinkFunc(func(int64) error { return nil }))
		return e
	}
	// run runs until done says so at a completed checkpoint, and returns
	// the time to the first one and the logs.
	run := func(localDir string, done func(weir.JobEvent) bool) (time.Duration, string) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var first atomic.Int64
		start := time.Now()
		var logs bytes.Buffer
		e := cfg(localDir, &logs, func(ev weir.JobEvent) {
			if ev.Kind == weir.EventCheckpointCompleted {
				first.CompareAndSwap(0, int64(time.Since(start)))
				if done(ev) {
					cancel()
				}
			}
		})
		if _, err := e.Execute(ctx); !errors.Is(err, context.Canceled) {
			b.Fatal(err)
		}
		if m := restoredAt.FindStringSubmatch(logs.String()); m != nil {
			at, _ := time.Parse(time.RFC3339Nano, m[1])
			b.Logf("restored %v after the start", at.Sub(start))
		}
		return time.Duration(first.Load()), logs.String()
	}
	local := filepath.Join(dir, "local")
	loadedAt := time.Now().Add(time.Duration(keys) * time.Second / 100_000)
	run(local, func(ev weir.JobEvent) bool {
		return time.Now().After(loadedAt.Add(time.Second)) && ev.Size >= keys<<10*9/10
	})
	b.ResetTimer()
	var firstLocal, firstRemote time.Duration
	var bytesLocal, bytesRemote [2]int64
	for range b.N {
		// The local run restores from the copy the previous run left (of
		// the latest checkpoint, which it took); the remote one from an
		// empty directory, which then holds the copy of the next latest.
		d, logs := run(local, func(weir.JobEvent) bool { return true })
		firstLocal += d
		l, r := restoredBytes(b, logs)
		bytesLocal[0], bytesLocal[1] = bytesLocal[0]+l, bytesLocal[1]+r
		local = filepath.Join(b.TempDir(), "local")
		dr, logs := run(local, func(weir.JobEvent) bool { return true })
		firstRemote += dr
		b.Logf("to the first commit: local %v, remote %v", d, dr)
		l, r = restoredBytes(b, logs)
		bytesRemote[0], bytesRemote[1] = bytesRemote[0]+l, bytesRemote[1]+r
	}
	n := float64(b.N)
	b.ReportMetric(firstLocal.Seconds()/n, "s-local")
	b.ReportMetric(firstRemote.Seconds()/n, "s-remote")
	b.ReportMetric(float64(bytesLocal[0])/n/(1<<20), "MiB-local-from-local")
	b.ReportMetric(float64(bytesLocal[1])/n/(1<<20), "MiB-local-from-remote")
	b.ReportMetric(float64(bytesRemote[1])/n/(1<<20), "MiB-remote-from-remote")
}

// TestDefaultLocalDirsOfOtherStorageKeepApart: without
// LocalRecoveryDir, runs of one job with other checkpoint storage (which
// may run at once) get local directories of their own; before, they
// shared <temp dir>/weir-local-recovery/<job>, swept each other's copies
// and overwrote each other's markers (found by an outside review, session
// 35). The same storage, however written, gets the same directory, so a
// restart finds its copies.
func TestDefaultLocalDirsOfOtherStorageKeepApart(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	a, b := weir.DefaultLocalDir(filepath.Join(dir, "a")), weir.DefaultLocalDir(filepath.Join(dir, "b"))
	if a == b {
		t.Fatalf("checkpoints in %s/a and %s/b share local directory %s", dir, dir, a)
	}
	for _, same := range []string{"a", "./a", "file://" + filepath.Join(dir, "a"), filepath.Join(dir, "x", "..", "a")} {
		if got := weir.DefaultLocalDir(same); got != a {
			t.Errorf("checkpoints at %q: local directory %s, want %s (as for %s/a)", same, got, a, dir)
		}
	}
	if s3a, s3b := weir.DefaultLocalDir("s3://bucket/a"), weir.DefaultLocalDir("s3://bucket/b"); s3a == s3b || filepath.Dir(s3a) != filepath.Join(os.TempDir(), "weir-local-recovery") {
		t.Errorf("checkpoints on S3: local directories %s and %s, want two under %s", s3a, s3b, filepath.Join(os.TempDir(), "weir-local-recovery"))
	}
}
