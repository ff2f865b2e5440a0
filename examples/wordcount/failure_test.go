package wordcount

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
)

// committedLines is the sorted lines of the committed output files.
func committedLines(t *testing.T, dir string) []string {
	t.Helper()
	var err error
	lines := slices.Sorted(CommittedLines(vfs.Default, dir, &err))
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// panicAt panics in the counting operator at each of the given counts of
// words handled (replays included), once each.
type panicAt struct {
	mu    sync.Mutex
	n     int64
	at    map[int64]bool
	fired int
}

func (p *panicAt) before(string) {
	p.mu.Lock()
	p.n++
	n := p.n
	hit := p.at[n]
	if hit {
		delete(p.at, n)
		p.fired++
	}
	p.mu.Unlock()
	if hit {
		panic(fmt.Sprintf("injected failure at word %d", n))
	}
}

type runOpts struct {
	mode     weir.Mode
	failures []int64
	ckptFS   vfs.FS
	tolerate int
	onEvent  func(weir.JobEvent)
	// before, if set, is called with every word before it is counted.
	before func(word string)
}

func runJob(t *testing.T, dir, input string, o runOpts) (weir.Result, *panicAt) {
	t.Helper()
	p := &panicAt{at: map[int64]bool{}}
	for _, f := range o.failures {
		p.at[f] = true
	}
	mode := o.mode
	if mode == 0 {
		mode = weir.ExactlyOnce
	}
	env, err := Build(Options{
		Input: input, Output: filepath.Join(dir, "out"), Parallelism: 2,
		Checkpoint: weir.CheckpointConfig{Mode: mode, Interval: 5 * time.Millisecond, Dir: filepath.Join(dir, "ckpt"),
			FS: o.ckptFS, TolerableFailures: o.tolerate, Retained: 2},
		Restart: weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: len(o.failures) + 1},
		BeforeCount: func(w string) {
			p.before(w)
			if o.before != nil {
				o.before(w)
			}
		},
		OnEvent: o.onEvent,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := env.Execute(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return res, p
}

// TestGoldenPipeline runs the word count straight through, and again with
// the counting operator panicking at random points, and requires the same
// committed output.
func TestGoldenPipeline(t *testing.T) {
	base := t.TempDir()
	files := corpus(t, base, 3, 3000, 2)
	input := filepath.Join(base, "in-*.txt")
	want, _ := Expected(vfs.Default, files)
	var total int64
	for _, n := range want {
		total += n
	}
	straightDir := filepath.Join(base, "straight")
	runJob(t, straightDir, input, runOpts{})
	golden := committedLines(t, filepath.Join(straightDir, "out"))
	if int64(len(golden)) != total {
		t.Fatalf("straight run wrote %d lines for %d words", len(golden), total)
	}
	for trial := range 4 {
		t.Run(fmt.Sprint("trial", trial), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(trial), 3))
			var failures []int64
			for range 1 + rng.IntN(3) {
				failures = append(failures, 1+rng.Int64N(total))
			}
			dir := filepath.Join(base, fmt.Sprint("trial", trial))
			res, p := runJob(t, dir, input, runOpts{failures: failures})
			// Two failures can fire in one attempt: both counting subtasks
			// share the counter.
			if p.fired != len(failures) || res.Attempts < 2 || res.Attempts > len(failures)+1 {
				t.Fatalf("%d of %d failures fired, %d attempts", p.fired, len(failures), res.Attempts)
			}
			got := committedLines(t, filepath.Join(dir, "out"))
			if !slices.Equal(got, golden) {
				rep, _ := Verify(vfs.Default, filepath.Join(dir, "out"), want, false)
				t.Fatalf("output after failures at %v differs from the straight run: %v", failures, rep)
			}
			t.Logf("failures at words %v: %d attempts, %d checkpoints, output identical", failures, res.Attempts, res.Checkpoints)
		})
	}
}

// TestAtLeastOnceLosesNothing: in at-least-once mode, crashes may
// duplicate, but every count of every word is committed.
func TestAtLeastOnceLosesNothing(t *testing.T) {
	base := t.TempDir()
	files := corpus(t, base, 2, 3000, 4)
	want, _ := Expected(vfs.Default, files)
	res, p := runJob(t, base, filepath.Join(base, "in-*.txt"), runOpts{mode: weir.AtLeastOnce, failures: []int64{9000, 20000, 31000}})
	if p.fired != 3 {
		t.Fatalf("%d failures fired", p.fired)
	}
	rep, err := Verify(vfs.Default, filepath.Join(base, "out"), want, true)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Lost != 0 || rep.Unexpected != 0 {
		t.Fatalf("at-least-once lost records: %v", rep)
	}
	t.Logf("%v (%d lines beyond a word's count: replays); %d attempts", rep, rep.Beyond, res.Attempts)
}

// TestFailingCheckpointStorage: while the checkpoint directory's disk is
// full, checkpoints are declined or aborted; the job carries on, a later
// checkpoint completes, and the output is exactly-once.
func TestFailingCheckpointStorage(t *testing.T) {
	base := t.TempDir()
	// Many distinct words: the keyed state outgrows the metadata and is
	// written to files of its own, which fail too.
	var paths []string
	for f := range 2 {
		var b strings.Builder
		for i := range 20000 {
			fmt.Fprintf(&b, "w%d common\n", (i*7919+f)%30000)
		}
		p := filepath.Join(base, fmt.Sprintf("in-%d.txt", f))
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	var full atomic.Bool // the disk fills once the first checkpoint completed
	var injected atomic.Int64
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		dataWrite := op.Kind == errorfs.OpCreate || op.Kind == errorfs.OpFileWrite
		if full.Load() && dataWrite && strings.Contains(op.Path, "ckpt") {
			injected.Add(1)
			return fmt.Errorf("%w: %w", errorfs.ErrInjected, syscall.ENOSPC)
		}
		return nil
	}))
	var mu sync.Mutex
	var aborted []string
	completedAfter, completed := 0, 0
	// A state file is written only while the state changes: once the input
	// is counted, checkpoints fail on their metadata alone. So the words go
	// slower until a subtask declined for a state file (a busy machine can
	// otherwise count them all before the disk fills, or while it is full).
	var stateWriteFailed atomic.Bool
	pace := Paced(200)
	before := func(w string) {
		if !stateWriteFailed.Load() {
			pace(w)
		}
	}
	declinedForState := func(s string) bool { return strings.Contains(s, "declined") && strings.Contains(s, "count subtask") }
	res, _ := runJob(t, base, filepath.Join(base, "in-*.txt"), runOpts{ckptFS: fs, tolerate: 1000, before: before, onEvent: func(e weir.JobEvent) {
		mu.Lock()
		defer mu.Unlock()
		switch e.Kind {
		case weir.EventCheckpointAborted:
			if e.Reason == checkpoint.ReasonDeclined || e.Reason == checkpoint.ReasonPersistFailed {
				aborted = append(aborted, fmt.Sprintf("%d %v: %v", e.ID, e.Reason, e.Err))
				if declinedForState(aborted[len(aborted)-1]) {
					stateWriteFailed.Store(true)
				}
			}
			// Space is freed; after 100 failures without a state file's, the
			// assertions below say so.
			if len(aborted) >= 3 && stateWriteFailed.Load() || len(aborted) >= 100 {
				full.Store(false)
			}
		case weir.EventCheckpointCompleted:
			completed++
			if completed == 1 {
				full.Store(true)
			}
			if len(aborted) > 0 {
				completedAfter++
			}
		}
	}})
	if len(aborted) < 3 || completedAfter == 0 || injected.Load() == 0 {
		t.Fatalf("aborted %d, completed after the failures %d, injected %d", len(aborted), completedAfter, injected.Load())
	}
	if !strings.Contains(aborted[0], "no space left on device") {
		t.Fatalf("the abort does not say why: %s", aborted[0])
	}
	// The failed writes are those of the asynchronous snapshot part (state
	// files of the counting operator), so the task declined.
	if !slices.ContainsFunc(aborted, declinedForState) {
		t.Fatalf("no checkpoint was declined for a failed state write: %v", aborted)
	}
	want, _ := Expected(vfs.Default, paths)
	rep, err := Verify(vfs.Default, filepath.Join(base, "out"), want, false)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("not exactly-once after storage failures: %v", rep)
	}
	t.Logf("%d checkpoints failed (first: %s), %d completed after; %d attempts; %v", len(aborted), aborted[0], completedAfter, res.Attempts, rep)
}
