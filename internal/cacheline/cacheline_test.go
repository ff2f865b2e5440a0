package cacheline

import (
	"testing"
	"unsafe"
)

// apart reports whether no byte of [a, a+an) is within Size of a byte of
// [b, b+bn).
func apart(a, an, b, bn uintptr) bool {
	if a > b {
		a, an, b, bn = b, bn, a, an
	}
	return a+an+Size <= b+1
}

func TestNewKeepsNeighboursAway(t *testing.T) {
	type counter struct{ n int64 }
	var ps []*counter
	for range 64 {
		ps = append(ps, New(counter{n: 7}))
	}
	for i, p := range ps {
		if p.n != 7 {
			t.Fatalf("New(%d): the copy holds %d, want 7", i, p.n)
		}
		for j := range i {
			a, b := uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(ps[j]))
			if !apart(a, unsafe.Sizeof(*p), b, unsafe.Sizeof(*ps[j])) {
				t.Fatalf("objects %d and %d are %d bytes apart, closer than a cache line", j, i, int64(a)-int64(b))
			}
		}
	}
}

func TestSliceKeepsNeighboursAway(t *testing.T) {
	check := func(t *testing.T, ss [][]byte, size uintptr) {
		for i, s := range ss {
			for j := range i {
				a, b := uintptr(unsafe.Pointer(unsafe.SliceData(s))), uintptr(unsafe.Pointer(unsafe.SliceData(ss[j])))
				if !apart(a, uintptr(len(s))*size, b, uintptr(len(ss[j]))*size) {
					t.Fatalf("slices %d and %d are %d bytes apart, closer than a cache line", j, i, int64(a)-int64(b))
				}
			}
		}
	}
	for _, n := range []int{1, 2, 3, 9} {
		var ints [][]byte
		var headers [][]byte
		for range 32 {
			s := Slice[int64](n)
			if len(s) != n || cap(s) != n {
				t.Fatalf("Slice[int64](%d): len %d, cap %d", n, len(s), cap(s))
			}
			for i := range s {
				if s[i] != 0 {
					t.Fatalf("Slice[int64](%d)[%d] = %d, want 0", n, i, s[i])
				}
			}
			ints = append(ints, unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 8*n))
			h := Slice[[]string](n)
			headers = append(headers, unsafe.Slice((*byte)(unsafe.Pointer(&h[0])), int(unsafe.Sizeof(h[0]))*n))
		}
		check(t, ints, 1)
		check(t, headers, 1)
	}
	if s := Slice[struct{}](3); len(s) != 3 {
		t.Fatalf("Slice[struct{}](3) has length %d", len(s))
	}
}
