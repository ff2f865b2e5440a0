package runtime

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/arena"
)

// reviewString is a random string: empty, short, about a chunk long or
// longer, of any bytes (invalid UTF-8 included).
func reviewString(rng *rand.Rand, fill *rand.ChaCha8) string {
	var n int
	switch rng.IntN(8) {
	case 0:
		n = 0
	case 1:
		n = arena.ChunkBytes - 2 + rng.IntN(5)
	case 2:
		n = arena.ChunkBytes + rng.IntN(3*arena.ChunkBytes)
	default:
		n = rng.IntN(40)
	}
	b := make([]byte, n)
	fill.Read(b)
	return string(b)
}

// TestReviewDecodeSharedAgainstRandomBatches: batches of random strings
// (empty ones, ones at and across the 4 KiB chunk boundary, any bytes),
// with and without event times and key groups, decode exactly as encoded,
// each into the batch decoded before it, and stay so once the bytes they
// were decoded from are overwritten.
func TestReviewDecodeSharedAgainstRandomBatches(t *testing.T) {
	bc := Batches(codec.For[string]())
	rng := rand.New(rand.NewPCG(23, 1))
	fill := rand.NewChaCha8([32]byte{1})
	var buf []byte
	var reuse Event
	type sent struct {
		recs   []string
		times  []int64
		groups []uint16
	}
	var all []sent
	var kept [][]string
	for range 100 {
		var s sent
		for range rng.IntN(300) {
			s.recs = append(s.recs, reviewString(rng, fill))
		}
		if len(s.recs) > 0 && rng.IntN(2) == 0 {
			for range s.recs {
				s.times = append(s.times, rng.Int64N(1<<40)-1<<39)
				s.groups = append(s.groups, uint16(rng.IntN(1<<15)))
			}
		}
		buf = AppendBatch(buf[:0], Event{Kind: KindBatch, Batch: s.recs, Times: s.times, Groups: s.groups}, bc)
		e, err := DecodeBatch(buf, bc, reuse)
		if err != nil {
			t.Fatal(err)
		}
		got := e.Batch.([]string)
		if !slices.Equal(got, s.recs) && (len(got) != 0 || len(s.recs) != 0) {
			t.Fatalf("batch %d: decoded %d records, want %d (or different bytes)", len(all), len(got), len(s.recs))
		}
		if !slices.Equal(e.Times, s.times) || !slices.Equal(e.Groups, s.groups) {
			t.Fatalf("batch %d: times or groups differ", len(all))
		}
		kept = append(kept, slices.Clone(got))
		all = append(all, s)
		fill.Read(buf) // the next frame is read into the same bytes
		reuse = e
	}
	for i, got := range kept {
		if !slices.Equal(got, all[i].recs) && (len(got) != 0 || len(all[i].recs) != 0) {
			t.Fatalf("batch %d changed after its bytes were reused", i)
		}
	}
}

// TestReviewDecodeSharedNeverPanics: a batch with bytes flipped, or cut
// short, or with a length prefix made huge, decodes or fails with an
// error: never a panic (the reader goroutine would take the process down).
func TestReviewDecodeSharedNeverPanics(t *testing.T) {
	bc := Batches(codec.For[string]())
	rng := rand.New(rand.NewPCG(23, 2))
	fill := rand.NewChaCha8([32]byte{2})
	for i := range 1000 {
		var recs []string
		for range 1 + rng.IntN(20) {
			recs = append(recs, reviewString(rng, fill))
		}
		p := AppendBatch(nil, Event{Kind: KindBatch, Batch: recs}, bc)
		switch rng.IntN(3) {
		case 0:
			for range 1 + rng.IntN(4) {
				p[rng.IntN(len(p))] ^= byte(1 + rng.IntN(255))
			}
		case 1:
			p = p[:rng.IntN(len(p))]
		default:
			at := rng.IntN(len(p))
			p = append(p[:at:at], append([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, p[at:]...)...)
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("case %d: decoding %d mangled bytes panicked: %v", i, len(p), r)
				}
			}()
			DecodeBatch(p, bc, Event{})
		}()
	}
}
