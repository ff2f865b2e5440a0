package transport

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/runtime"
)

// A lone record, then a lone barrier, arrive with nothing sent after
// them: no buffer on either side waits for more traffic.
func TestLoneEventsArriveWithoutMoreTraffic(t *testing.T) {
	a, b := pair(t)
	ready := make(chan struct{}, 1)
	in, err := b.Input(3, strings_, 4, ready)
	if err != nil {
		t.Fatal(err)
	}
	out, err := a.Output(3, strings_)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := out.Push(ctx, runtime.Event{Kind: runtime.KindBatch, Batch: []string{"alone"}}); err != nil {
		t.Fatal(err)
	}
	if e := pop(t, in, ready); e.Kind != runtime.KindBatch || !slices.Equal(e.Batch.([]string), []string{"alone"}) {
		t.Fatalf("got %v, want the batch [alone]", e)
	}
	if err := out.Push(ctx, runtime.Event{Kind: runtime.KindBarrier, ID: checkpoint.ID(9)}); err != nil {
		t.Fatal(err)
	}
	if e := pop(t, in, ready); e.Kind != runtime.KindBarrier || e.ID != 9 {
		t.Fatalf("got %v, want barrier 9", e)
	}
}

// keptBatch is batch i of TestKeptStringsSurviveFrameReuse: distinct words,
// and in every seventh a record larger than the reader's buffer, so that
// its frame goes through the buffer kept for large frames.
func keptBatch(i int) []string {
	b := make([]string, 300)
	for j := range b {
		b[j] = fmt.Sprintf("b%d-w%d", i, j)
	}
	if i%7 == 0 {
		b[0] = strings.Repeat(fmt.Sprintf("long%d-", i), 100<<10/8)
	}
	return b
}

// The receiver reads each frame into buffers it reuses for the next
// (the connection's read buffer, or one kept for large frames), and
// decodes strings that outlive the frame: heap state keeps a key, a
// window keeps records. Strings kept from every batch must read as sent
// once many more frames have come through the same buffers.
func TestKeptStringsSurviveFrameReuse(t *testing.T) {
	a, b := pair(t)
	ready := make(chan struct{}, 1)
	in, err := b.Input(5, strings_, 8, ready)
	if err != nil {
		t.Fatal(err)
	}
	out, err := a.Output(5, strings_)
	if err != nil {
		t.Fatal(err)
	}
	const batches = 200
	sent := make(chan error, 1)
	go func() {
		for i := range batches {
			if err := out.Push(context.Background(), runtime.Event{Kind: runtime.KindBatch, Batch: keptBatch(i)}); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	counts := map[string]int{} // as keyed state keeps its keys
	var kept [][]string        // as a window keeps its records
	for range batches {
		e := pop(t, in, ready)
		recs := e.Batch.([]string)
		for _, w := range recs {
			counts[w]++
		}
		kept = append(kept, slices.Clone(recs))
		in.Recycle(e) // the next batch is decoded into its slice
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	for i, got := range kept {
		want := keptBatch(i)
		for j := range want {
			if got[j] != want[j] {
				t.Fatalf("batch %d record %d reads %.40q, sent %.40q", i, j, got[j], want[j])
			}
			if counts[want[j]] != 1 {
				t.Fatalf("key %.40q counted %d times, want 1 (a kept key changed)", want[j], counts[want[j]])
			}
		}
	}
	if len(counts) != batches*300 {
		t.Fatalf("%d keys, want %d", len(counts), batches*300)
	}
}

// keptFrames is what c keeps for reuse: frames and their bytes
// (capacities), and the largest.
func keptFrames(c *Conn) (n, bytes, largest int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.free {
		bytes += cap(f)
		largest = max(largest, cap(f))
	}
	return len(c.free), bytes, largest
}

// The frames a connection keeps for reuse are bounded in bytes, not only
// in count: frames of large batches are not kept, and many frames of a
// few hundred KiB are kept only up to the budget.
func TestFramesKeptForReuseAreBounded(t *testing.T) {
	a, b := pair(t)
	ready := make(chan struct{}, 1)
	in, err := b.Input(6, strings_, 4, ready)
	if err != nil {
		t.Fatal(err)
	}
	out, err := a.Output(6, strings_)
	if err != nil {
		t.Fatal(err)
	}
	large := strings.Repeat("x", 600<<10)
	sent := make(chan error, 1)
	go func() {
		for range 20 {
			if err := out.Push(context.Background(), runtime.Event{Kind: runtime.KindBatch, Batch: []string{large}}); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	for range 20 {
		e := pop(t, in, ready)
		if got := e.Batch.([]string); len(got) != 1 || got[0] != large {
			t.Fatal("a large batch arrived changed")
		}
		in.Recycle(e)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	// Every frame arrived, so every frame was written and handed back.
	if _, _, largest := keptFrames(a); largest > maxFreeFrameBytes {
		t.Fatalf("the connection keeps a written frame of %d bytes, more than %d", largest, maxFreeFrameBytes)
	}

	// Frames of a few hundred KiB, many handed back at once (as when the
	// writer drains a long queue): kept up to the budget.
	frames := make([][]byte, maxFree)
	for i := range frames {
		frames[i] = make([]byte, 0, maxFreeFrameBytes)
	}
	a.recycle(frames)
	if n, bytes, _ := keptFrames(a); bytes > maxFreeBytes || n == 0 {
		t.Fatalf("kept %d frames of %d bytes, want some and at most %d bytes", n, bytes, maxFreeBytes)
	}
	// Taking frames frees budget for others.
	for range 3 {
		a.frameBuf(0)
	}
	a.recycle(frames[:3])
	if _, bytes, _ := keptFrames(a); bytes > maxFreeBytes {
		t.Fatalf("kept %d bytes after frames were taken and handed back, want at most %d", bytes, maxFreeBytes)
	}
}
