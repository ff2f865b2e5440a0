package wordcount

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
)

// corpus writes files of random lines over a small vocabulary.
func corpus(t *testing.T, dir string, files, lines int, seed uint64) []string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	vocab := []string{"Weir", "stream", "barrier", "Checkpoint", "state", "key", "group", "sink", "source", "exactly", "once", "river", "flow", "dam", "go"}
	var paths []string
	for f := range files {
		var b strings.Builder
		for range lines {
			for w := range 1 + rng.IntN(8) {
				if w > 0 {
					b.WriteString([]string{" ", ", ", "; ", " - "}[rng.IntN(4)])
				}
				b.WriteString(vocab[rng.IntN(len(vocab))])
				if rng.IntN(5) == 0 {
					fmt.Fprint(&b, rng.IntN(50))
				}
			}
			b.WriteString("\n")
		}
		p := filepath.Join(dir, fmt.Sprintf("in-%d.txt", f))
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

func TestWordCountStraightThrough(t *testing.T) {
	dir := t.TempDir()
	files := corpus(t, dir, 3, 2000, 1)
	out := filepath.Join(dir, "out")
	env, err := Build(Options{
		Input: filepath.Join(dir, "in-*.txt"), Output: out, Parallelism: 2,
		Checkpoint: weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: filepath.Join(dir, "ckpt")},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := env.Execute(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Expected(vfs.Default, files)
	rep, err := Verify(vfs.Default, out, want, false)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("output not exactly-once: %v", rep)
	}
	t.Logf("%v; %d checkpoints", rep, res.Checkpoints)
}

// The word count allocates per block of input, not per line or word: the
// file source cuts lines out of shared blocks, Split lower-cases into
// shared chunks, state keeps a copy of each distinct word once, and
// batches go back to their senders. A string per line would be 0.125
// allocations per word on this corpus (8 words a line).
func TestNoAllocationPerWord(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop what it is given, so Split allocates")
	}
	dir := t.TempDir()
	want, err := WriteBenchCorpus(dir, 2, 125_000)
	if err != nil {
		t.Fatal(err)
	}
	var words int64
	for _, n := range want {
		words += n
	}
	env, err := Build(Options{
		Input: filepath.Join(dir, "in-*.txt"), Output: filepath.Join(dir, "out"), Parallelism: 2,
		// Every checkpoint costs an allocation per key written after it
		// (copy-on-write): 2,000 here, at most a few checkpoints.
		Checkpoint: weir.CheckpointConfig{Interval: time.Second, Dir: filepath.Join(dir, "ckpt")},
	})
	if err != nil {
		t.Fatal(err)
	}
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	before := ms.Mallocs
	if _, err := env.Execute(context.Background()); err != nil {
		t.Fatal(err)
	}
	goruntime.ReadMemStats(&ms)
	perWord := float64(ms.Mallocs-before) / float64(words)
	t.Logf("%d words, %d allocations: %.4f per word", words, ms.Mallocs-before, perWord)
	if perWord > 0.03 {
		t.Fatalf("%.4f allocations per word, want at most 0.03 (none per word or line)", perWord)
	}
}
