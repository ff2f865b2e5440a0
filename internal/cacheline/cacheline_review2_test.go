package cacheline

import (
	"testing"
	"unsafe"
)

// The package promises no other object within Size bytes of what New and
// Slice return, on both sides; the tests beside this one only check that
// two results keep apart from each other, which padding on one side
// satisfies too. Here each result is followed by an unrelated allocation
// of every size up to a few lines, one of which shares its size class and
// lands next to it.
func TestNewKeepsForeignObjectsAway_review2(t *testing.T) {
	type counter struct{ n int64 }
	for size := 1; size <= 320; size++ {
		var keep []any
		for range 16 {
			p := New(counter{})
			f := make([]byte, size)
			s := Slice[int64](1)
			g := make([]byte, size)
			keep = append(keep, p, f, s, g)
			a := uintptr(unsafe.Pointer(p))
			sa := uintptr(unsafe.Pointer(&s[0]))
			for _, o := range [][]byte{f, g} {
				b := uintptr(unsafe.Pointer(&o[0]))
				if !apart(a, 8, b, uintptr(size)) {
					t.Fatalf("New: a %d-byte object allocated beside it is %d bytes away", size, int64(b)-int64(a))
				}
				if !apart(sa, 8, b, uintptr(size)) {
					t.Fatalf("Slice: a %d-byte object allocated beside it is %d bytes away", size, int64(b)-int64(sa))
				}
			}
		}
		_ = keep
	}
}
