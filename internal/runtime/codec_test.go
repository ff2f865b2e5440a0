package runtime

import (
	"fmt"
	"slices"
	"testing"

	"github.com/weirstream/weir/codec"
)

// words is a batch like the word count's: short strings.
func words(n, seed int) []string {
	w := make([]string, n)
	for i := range w {
		w[i] = fmt.Sprintf("w%d-%d", seed, i%97)
	}
	return w
}

// Decoded strings share nothing with the bytes they were decoded from: a
// connection reads its next frame into the same buffer, and strings kept
// from the last one (heap state's keys, a window's contents) must not
// change.
func TestDecodedStringsOutliveTheirBytes(t *testing.T) {
	bc := Batches(codec.For[string]())
	var buf []byte
	var kept [][]string
	var reuse Event
	for i := range 50 {
		want := words(512, i)
		buf = AppendBatch(buf[:0], Event{Kind: KindBatch, Batch: want}, bc)
		e, err := DecodeBatch(buf, bc, reuse)
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, slices.Clone(e.Batch.([]string)))
		reuse = e
	}
	clear(buf[:cap(buf)])
	for i, got := range kept {
		if want := words(512, i); !slices.Equal(got, want) {
			t.Fatalf("batch %d decoded as %q, want %q", i, got[:3], want[:3])
		}
	}
}

// A batch of short strings costs a few allocations, not one a string.
func TestDecodeBatchAllocatesPerChunk(t *testing.T) {
	bc := Batches(codec.For[string]())
	p := AppendBatch(nil, Event{Kind: KindBatch, Batch: words(512, 1)}, bc)
	reuse, err := DecodeBatch(p, bc, Event{})
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(20, func() {
		if reuse, err = DecodeBatch(p, bc, reuse); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 8 {
		t.Fatalf("decoding %d bytes of 512 strings made %.0f allocations, want at most 8", len(p), allocs)
	}
}

// BenchmarkDecodeBatch decodes a word count's batch of 512 words, into the
// batch decoded last (as a connection's reader does).
func BenchmarkDecodeBatch(b *testing.B) {
	bc := Batches(codec.For[string]())
	p := AppendBatch(nil, Event{Kind: KindBatch, Batch: words(512, 1)}, bc)
	var reuse Event
	b.ReportAllocs()
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		e, err := DecodeBatch(p, bc, reuse)
		if err != nil {
			b.Fatal(err)
		}
		reuse = e
	}
}
