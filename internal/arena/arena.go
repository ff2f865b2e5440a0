// Package arena cuts many small strings out of few allocations.
//
// A stream processor makes a string per record (a line read, a word
// lower-cased); allocating each on its own is most of what such a record
// costs the garbage collector. Strings copies them into shared chunks
// instead, in ordinary Go: a strings.Builder only ever appends, so a string
// it returned is never written again, and a full chunk is dropped, not
// reused.
//
// NB: a string cut from a chunk keeps the whole chunk alive, so whoever
// keeps one for long should keep a copy (strings.Clone). Weir's heap state
// copies the keys it keeps.
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
