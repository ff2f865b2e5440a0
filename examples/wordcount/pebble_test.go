package wordcount

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/storage"
)

// TestDamagedCheckpointFallsBack: the word count on Pebble with
// incremental checkpoints is stopped; a data file only its latest
// checkpoint references is lost (or its bytes change). Restoring latest
// names the damage and restores the checkpoint before; the output is
// still exactly once.
func TestDamagedCheckpointFallsBack(t *testing.T) {
	for _, damage := range []string{"missing", "corrupt"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			files := corpus(t, dir, 3, 40_000, 7)
			out, ckpt := filepath.Join(dir, "out"), filepath.Join(dir, "ckpt")
			var log bytes.Buffer
			opts := Options{Input: filepath.Join(dir, "in-*.txt"), Output: out, Parallelism: 2,
				Checkpoint:   weir.CheckpointConfig{Interval: 20 * time.Millisecond, Dir: ckpt, Retained: 3},
				StateBackend: weir.StateBackend{Kind: weir.PebbleState, Dir: filepath.Join(dir, "state")},
				Logger:       slog.New(slog.NewTextHandler(&log, nil))}
			// The first run is paced, to outlast four checkpoints.
			opts.BeforeCount = Paced(200)
			ctx, cancel := context.WithCancel(context.Background())
			completed := 0
			opts.OnEvent = func(e weir.JobEvent) {
				if e.Kind == weir.EventCheckpointCompleted {
					if completed++; completed == 4 {
						cancel()
					}
				}
			}
			env, err := Build(opts)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := env.Execute(ctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("first run: %v (the input must outlast four checkpoints)", err)
			}
			d, err := storage.NewDir(vfs.Default, ckpt, "wordcount", 0)
			if err != nil {
				t.Fatal(err)
			}
			scan, err := d.Scan()
			if err != nil || len(scan.Completed) < 2 {
				t.Fatalf("%d checkpoints retained: %v", len(scan.Completed), err)
			}
			latest, before := scan.Latest(), scan.Completed[len(scan.Completed)-2]
			victim := onlyIn(latest, before)
			if victim.Path == "" {
				t.Fatal("the latest checkpoint shares every data file with the one before")
			}
			path := filepath.Join(d.JobDir(), victim.Path)
			if damage == "missing" {
				err = os.Remove(path)
			} else {
				var b []byte
				if b, err = os.ReadFile(path); err == nil {
					b[len(b)/2] ^= 0xff
					err = os.WriteFile(path, b, 0o644)
				}
			}
			if err != nil {
				t.Fatal(err)
			}

			opts.OnEvent, opts.BeforeCount, opts.Restore = nil, nil, "latest"
			if env, err = Build(opts); err != nil {
				t.Fatal(err)
			}
			ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := env.Execute(ctx); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(log.String(), "restoring the previous checkpoint") || !strings.Contains(log.String(), victim.File) {
				t.Fatalf("the log does not name the damage and the fallback:\n%s", log.String())
			}
			want, _ := Expected(vfs.Default, files)
			if rep, err := Verify(vfs.Default, out, want, false); err != nil || !rep.OK() {
				t.Fatalf("output after the fallback: %v %v", rep, err)
			}
		})
	}
}

// onlyIn is a data file m references and before does not.
func onlyIn(m, before *checkpoint.Metadata) checkpoint.Handle {
	old := map[string]bool{}
	for _, ts := range before.Tasks {
		for _, h := range ts.Handles {
			old[h.Path] = true
		}
	}
	for _, ts := range m.Tasks {
		for _, h := range ts.Handles {
			if h.Kind == "pebble-data" && !old[h.Path] {
				return h
			}
		}
	}
	return checkpoint.Handle{}
}
