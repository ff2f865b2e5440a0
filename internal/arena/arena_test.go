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
