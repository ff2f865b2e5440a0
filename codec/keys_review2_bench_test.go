package codec

import "testing"

type rev2BLoc struct{ Lat, Lon float64 }

type rev2BPlace struct {
	rev2BLoc
	Name string
}

type rev2BFlat struct {
	Lat, Lon float64
	Name     string
}

func BenchmarkHashEmbeddedKey(b *testing.B) {
	h := NewHasher(ForKey[rev2BPlace]())
	k := rev2BPlace{rev2BLoc{1.5, -2.25}, "equator"}
	b.ReportAllocs()
	for b.Loop() {
		h.Hash(k)
	}
}

func BenchmarkHashFlatKey(b *testing.B) {
	h := NewHasher(ForKey[rev2BFlat]())
	k := rev2BFlat{1.5, -2.25, "equator"}
	b.ReportAllocs()
	for b.Loop() {
		h.Hash(k)
	}
}
