// Package cacheline allocates what one task writes for every record so
// that it shares no cache line with what another task writes.
//
// The parts of an operator's subtasks (their operators, chains and
// emitters) are built one after another by one goroutine, and Go's
// allocator places objects of one size class next to each other: the
// counter of subtask 0 and the counter of subtask 1 were 8 bytes apart,
// and two cores that each wrote their own took turns owning the line
// (false sharing; design note 103).
package cacheline

import "unsafe"

// Size is the cache line of amd64 and most arm64 servers, which the
// padding spans. (A core's adjacent-line prefetch, which fetches lines in
// aligned pairs, may still bring a neighbour's line along; padding for it
// would double the padding and was not tried.)
const Size = 64

type pad [Size]byte

// New returns a pointer to a copy of v with no other object within Size
// bytes of it. The pointer keeps the whole padded allocation alive.
func New[T any](v T) *T {
	p := &struct {
		_ pad
		v T
		_ pad
	}{v: v}
	return &p.v
}

// Slice returns n zero elements with no other object within Size bytes of
// them; appending beyond n reallocates (its capacity is n).
func Slice[T any](n int) []T {
	var zero T
	k := Size
	if sz := int(unsafe.Sizeof(zero)); sz > 0 {
		k = (Size + sz - 1) / sz
	}
	s := make([]T, k+n+k)
	return s[k : k+n : k+n]
}
