// Package arena cuts many small strings out of few allocations.
//
// A stream processor makes a string per record (a line read, a word
// lower-cased); allocating each on its own is most of what such a record
// costs the garbage collector. Strings copies them into shared chunks
// instead, in ordinary Go: a strings.Builder only ever appends, so a string
// it returned is never written again, and a full chunk is dropped, not
// reused. Cuts does the same for strings that lie next to each other in a
// buffer (a batch off the network), copying a chunk of it at once.
//
// NB: a string cut from a chunk keeps the whole chunk alive, so whoever
// keeps one for long should keep a copy (strings.Clone). Weir's heap state
// copies the strings of the keys and values it keeps.
package arena

import "strings"

// ChunkBytes is the size of one chunk: at most this much memory is kept
// alive by one string that outlives its neighbours.
const ChunkBytes = 4 << 10

// Strings hands out strings cut from shared chunks. The zero value is
// ready; it is not safe for concurrent use.
type Strings struct {
	b strings.Builder
}

// Copy returns p as a string. A string longer than an eighth of a chunk
// gets its own allocation, so that a chunk is never mostly wasted.
func (a *Strings) Copy(p []byte) string {
	if len(p) > ChunkBytes/8 {
		return string(p)
	}
	if a.b.Cap()-a.b.Len() < len(p) {
		a.b.Reset() // the old chunk stays with the strings cut from it
		a.b.Grow(ChunkBytes)
	}
	start := a.b.Len()
	a.b.Write(p)
	return a.b.String()[start:]
}

// Cuts cuts strings out of one byte slice in which they lie one after
// another (a batch decoded off the network), copying the slice a chunk at
// a time: one allocation and one copy a chunk, and no more than a chunk (or
// the string, if longer) kept alive by a string that outlives the others.
// The copies are its own: the slice may be written again once the strings
// are cut. The zero value cuts from an empty slice; it is not safe for
// concurrent use.
type Cuts struct {
	src  []byte
	s    string // a copy of src[base : base+len(s)]
	base int
}

// Reset makes c cut from src.
func (c *Cuts) Reset(src []byte) { *c = Cuts{src: src} }

// Cut returns rest[:n] as a string, where rest is a suffix of the slice c
// cuts from (what is left of it to decode). Cut strings in the order they
// lie in for a chunk to serve many.
func (c *Cuts) Cut(rest []byte, n int) string {
	off := len(c.src) - len(rest)
	if off < c.base || off+n > c.base+len(c.s) {
		end := min(len(c.src), off+max(n, ChunkBytes))
		c.s, c.base = string(c.src[off:end]), off
	}
	return c.s[off-c.base : off-c.base+n]
}
