package arena

import (
	"fmt"
	"strings"
	"testing"
)

// Every string handed out keeps its bytes while many more are cut after
// it, across chunks, long ones included.
func TestCopiesStayIntact(t *testing.T) {
	var a Strings
	var want, got []string
	buf := make([]byte, 0, ChunkBytes)
	for i := range 20000 {
		s := fmt.Sprintf("word%d", i)
		if i%997 == 0 {
			s = strings.Repeat(s, ChunkBytes/len(s)) // longer than an eighth of a chunk
		}
		buf = append(buf[:0], s...)
		got = append(got, a.Copy(buf))
		want = append(want, s)
		buf[0] = '!' // the caller's bytes are its own again
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("string %d is %q, want %q", i, got[i], want[i])
		}
	}
}

// Short strings cost an allocation per chunk, not one each.
func TestAllocatesPerChunk(t *testing.T) {
	var a Strings
	p := []byte("a word of 16 b..")
	const n = 1024
	allocs := testing.AllocsPerRun(10, func() {
		for range n {
			a.Copy(p)
		}
	})
	if want := float64(n*len(p)/ChunkBytes + 1); allocs > want {
		t.Fatalf("%d copies of %d bytes made %.0f allocations, want at most %.0f", n, len(p), allocs, want)
	}
}

// Strings cut from a slice keep their bytes once the slice is written
// again, long ones (longer than a chunk) included, and short ones cost an
// allocation a chunk.
func TestCutsAreCopies(t *testing.T) {
	var src []byte
	var want []string
	for i := range 5000 {
		s := fmt.Sprintf("word%d", i)
		if i%997 == 0 {
			s = strings.Repeat(s, 2*ChunkBytes/len(s))
		}
		src = append(src, s...)
		want = append(want, s)
	}
	var c Cuts
	cut := func() []string {
		c.Reset(src)
		var got []string
		rest := src
		for _, w := range want {
			got = append(got, c.Cut(rest, len(w)))
			rest = rest[len(w):]
		}
		return got
	}
	got := cut()
	clear(src)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("string %d is %.40q, want %.40q", i, got[i], want[i])
		}
	}
	allocs := testing.AllocsPerRun(5, func() { cut() })
	// cut's own slice grows ~14 times; each chunk, long strings included,
	// is one allocation.
	if most := float64(len(src)/ChunkBytes + 6 + 14); allocs > most {
		t.Fatalf("cutting %d strings from %d bytes made %.0f allocations, want at most %.0f", len(want), len(src), allocs, most)
	}
}
