package weir_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/generator"
)

// kibPerKey is keyed state of 1 KiB per key for the keys below keys; it
// ignores the records after them, so that the state stays as loaded.
// (The load of BenchmarkLocalRecovery, with its bound a field.)
type kibPerKey struct {
	keys int64
	v    *weir.ValueState[int64, []byte]
}

func (p *kibPerKey) Open(c *weir.KeyedContext[int64]) (err error) {
	p.v, err = weir.NewValueState[int64, []byte](c, "v")
	return err
}

func (p *kibPerKey) Process(_ *weir.KeyedContext[int64], i int64, _ weir.Collector[int64]) error {
	if i >= p.keys {
		return nil
	}
	v := make([]byte, 1<<10) // that do not compress
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

// The first checkpoint after a restore of the job's own latest checkpoint
// at the same parallelism uploads what changed since, not the restored
// state again: it references the restored shared files (Flink's CLAIM on
// failover). After a restore at another parallelism, or of a checkpoint
// named by path (it may be another job's), it uploads the state again
// (NO_CLAIM). Full checkpoints upload everything every time.
func TestFirstCheckpointAfterARestoreUploadsWhatChanged(t *testing.T) {
	onBackends(t, func(t *testing.T, sb weir.StateBackend) {
		const keys = 2048
		ckpt := t.TempDir()
		// run runs the job until a checkpoint completes that done accepts,
		// and returns that checkpoint's event.
		run := func(parallelism int, restore string, done func(weir.JobEvent) bool) weir.JobEvent {
			t.Helper()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var last weir.JobEvent
			e := weir.New(weir.Config{Job: "claim", Parallelism: parallelism, Restore: restore,
				Checkpoint:   weir.CheckpointConfig{Interval: 50 * time.Millisecond, Dir: ckpt},
				StateBackend: sb, Logger: slog.New(slog.DiscardHandler),
				OnEvent: func(ev weir.JobEvent) {
					if ev.Kind == weir.EventCheckpointCompleted && last.ID == 0 && done(ev) {
						last = ev
						cancel()
					}
				}})
			src, err := generator.New(generator.Config[int64]{Make: func(i int64) int64 { return i }, RatePerSecond: 200_000})
			if err != nil {
				t.Fatal(err)
			}
			keyed := weir.KeyBy(weir.Source(e, "numbers", src), func(i int64) int64 { return i })
			weir.Sink(weir.Process(keyed, "load", func() weir.KeyedProcessFunction[int64, int64, int64] { return &kibPerKey{keys: keys} }), "drop",
				weir.SinkFunc(func(int64) error { return nil }))
			if _, err := e.Execute(ctx); !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
			return last
		}
		run(1, "", func(ev weir.JobEvent) bool { return ev.Size >= keys<<10 })
		first := func(weir.JobEvent) bool { return true }
		same := run(1, "latest", first)
		t.Logf("same parallelism: uploaded %d bytes of %d", same.Uploaded, same.Size)
		if !sb.Full && same.Uploaded*4 > same.Size {
			t.Errorf("the first checkpoint after a restore at the same parallelism uploaded %d bytes of %d", same.Uploaded, same.Size)
		}
		rescaled := run(2, "latest", first)
		t.Logf("rescaled: uploaded %d bytes of %d", rescaled.Uploaded, rescaled.Size)
		if rescaled.Uploaded*2 < rescaled.Size {
			t.Errorf("the first checkpoint after a rescaled restore uploaded %d bytes of %d: it must write the state again", rescaled.Uploaded, rescaled.Size)
		}
		metas, _ := filepath.Glob(filepath.Join(ckpt, "claim", "chk-*", "_metadata"))
		newest, newestID := "", 0
		for _, m := range metas {
			var id int
			if _, err := fmt.Sscanf(filepath.Base(filepath.Dir(m)), "chk-%d", &id); err == nil && id > newestID {
				newest, newestID = filepath.Dir(m), id
			}
		}
		if newest == "" {
			t.Fatal("no completed checkpoint left")
		}
		named := run(2, newest, first)
		t.Logf("named by path: uploaded %d bytes of %d", named.Uploaded, named.Size)
		if named.Uploaded*2 < named.Size {
			t.Errorf("the first checkpoint after the restore of a checkpoint named by path uploaded %d bytes of %d: it must write the state again", named.Uploaded, named.Size)
		}
	})
}
