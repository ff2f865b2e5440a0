package weir

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/operator"
)

// TestRescaleKeepsLateUpdates: a restore at another parallelism takes the
// least of the subtasks' watermarks (restoreWatermarks), so a window that
// had fired on a subtask ahead of the others looks unfired after it. A
// record within its allowed lateness goes to the window's pane, which
// exists, so addToPane registered no timer ("an existing pane's have
// them": but its firing timer had fired) and the update was never emitted
// (found by an outside review, session 32). Now the window's timer is
// registered again, and it fires when the watermark passes its end, as in
// Flink.
func TestRescaleKeepsLateUpdates(t *testing.T) { rescaleLateUpdate(t, 1) }

// TestLateUpdateWithoutRescale: the same at the same parallelism.
func TestLateUpdateWithoutRescale(t *testing.T) { rescaleLateUpdate(t, 2) }

func rescaleLateUpdate(t *testing.T, p int) {
	c := genConfig{a: Tumbling(10 * time.Millisecond), lateness: 100, keys: 1}
	g := &genRun{c: c, hasher: codec.NewHasher(codec.For[string]())}
	defer g.run.Close()
	if err := g.open(2); err != nil {
		t.Fatal(err)
	}
	// A key of subtask 1 of 2.
	var key string
	for k := 'a'; k <= 'z'; k++ {
		group := keygroup.Of(g.hasher.Hash(string(k)), keygroup.DefaultMaxParallelism)
		if keygroup.ForSubtask(keygroup.DefaultMaxParallelism, 2, 1).Contains(group) {
			key = string(k)
			break
		}
	}
	if err := g.input(genStep{kind: stepRecord, key: key, ts: 3, v: 1}); err != nil {
		t.Fatal(err)
	}
	// The subtasks' watermarks differ at the checkpoint (as an unaligned
	// checkpoint, or idle inputs, can leave them): subtask 1 fired
	// [0,10), subtask 0 is behind.
	if err := g.subtasks[1].et.AdvanceWatermark(50); err != nil {
		t.Fatal(err)
	}
	if err := g.subtasks[0].et.AdvanceWatermark(5); err != nil {
		t.Fatal(err)
	}
	if err := g.step(genStep{kind: stepCheckpoint}); err != nil {
		t.Fatal(err)
	}
	if err := g.step(genStep{kind: stepCrash, p: p}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []genStep{{kind: stepRecord, key: key, ts: 4, v: 10}, {kind: stepWatermark, wm: 60}, {kind: stepWatermark, wm: operator.MaxTime}} {
		if err := g.step(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.close(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range g.out {
		got = append(got, fmt.Sprintf("%s [%d,%d) %s", f.Key, f.Start, f.End, f.Value))
	}
	want := []string{key + " [0,10) 1", key + " [0,10) 11"}
	if !slices.Equal(got, want) {
		t.Errorf("results %q, want %q: the record at 4, within the allowed lateness of [0,10), never updated it", got, want)
	}
}
