package wordcount

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
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
