package runtime

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
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

// TestStringBatchesAsTheStringCodec: the string batches' own loops
// (stringBatches) write exactly what the generic batch codec writes with
// codec.For's string codec, record by record, and read it back, for
// random batches of strings of 0 to 300 bytes (lengths of one uvarint byte
// and of two), and refuse what the generic codec refuses: every cut of a
// batch short of its end, and a batch with bytes after its last record.
func TestStringBatchesAsTheStringCodec(t *testing.T) {
	generic := batches[string]{c: codec.For[string]()}
	if _, own := Batches(codec.For[string]()).(stringBatches); !own {
		t.Fatal("Batches of codec.For[string] is not stringBatches")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for seed := range 300 {
		batch := make([]string, r.IntN(40))
		for i := range batch {
			n := r.IntN(20)
			if r.IntN(8) == 0 {
				n = 100 + r.IntN(200)
			}
			batch[i] = strings.Repeat(string(rune('a'+r.IntN(26))), n)
		}
		want := generic.Append(nil, batch)
		got := stringBatches{}.Append(nil, batch)
		if !bytes.Equal(got, want) {
			t.Fatalf("seed %d: %d strings encode as %x, want %x", seed, len(batch), got, want)
		}
		dec, n, err := stringBatches{}.Decode(got, nil)
		if err != nil || n != len(batch) || !slices.Equal(dec.([]string), batch) {
			t.Fatalf("seed %d: decoded %q (%d, %v), want %q", seed, dec, n, err, batch)
		}
		for cut := range len(want) {
			_, _, gerr := generic.Decode(want[:cut], nil)
			_, _, serr := stringBatches{}.Decode(want[:cut], nil)
			if (gerr == nil) != (serr == nil) {
				t.Fatalf("seed %d: cut at %d of %d: generic %v, strings %v", seed, cut, len(want), gerr, serr)
			}
		}
		if _, _, err := (stringBatches{}).Decode(append(want, 0), nil); err == nil {
			t.Fatalf("seed %d: a byte after the last record decoded", seed)
		}
	}
}

// BenchmarkAppendBatch encodes a word count's batch of 512 words with
// their key groups (as a connection's writer does).
func BenchmarkAppendBatch(b *testing.B) {
	bc := Batches(codec.For[string]())
	ws := words(512, 1)
	groups := make([]uint16, len(ws))
	for i := range groups {
		groups[i] = uint16(i % 128)
	}
	e := Event{Kind: KindBatch, Batch: ws, Groups: groups}
	buf := AppendBatch(nil, e, bc)
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		buf = AppendBatch(buf[:0], e, bc)
	}
}
