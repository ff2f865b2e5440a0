package keygroup

import "testing"

func TestForSubtaskCoversEveryGroupOnce(t *testing.T) {
	for _, maxP := range []int{1, 7, 128, 1000} {
		for p := 1; p <= min(maxP, 40); p++ {
			next := 0
			for i := range p {
				r := ForSubtask(maxP, p, i)
				if r.First != next {
					t.Fatalf("max %d p %d subtask %d: range %v starts at %d, want %d", maxP, p, i, r, r.First, next)
				}
				for g := r.First; g <= r.Last; g++ {
					if s := Subtask(maxP, p, g); s != i {
						t.Fatalf("max %d p %d: group %d in range of %d but Subtask says %d", maxP, p, g, i, s)
					}
				}
				next = r.Last + 1
			}
			if next != maxP {
				t.Fatalf("max %d p %d: ranges end at %d", maxP, p, next)
			}
		}
	}
}

func TestOfSpreadsSequentialHashes(t *testing.T) {
	counts := make([]int, 128)
	for h := range uint64(128 * 100) {
		counts[Of(h, 128)]++
	}
	for g, c := range counts {
		if c < 50 || c > 150 {
			t.Fatalf("key group %d got %d of 12800 sequential hashes; the mix does not spread", g, c)
		}
	}
}

func TestIntersect(t *testing.T) {
	cases := []struct{ a, b, want Range }{
		{Range{0, 9}, Range{5, 20}, Range{5, 9}},
		{Range{0, 4}, Range{5, 20}, Empty},
		{Range{3, 3}, Range{0, 127}, Range{3, 3}},
	}
	for _, c := range cases {
		if got := c.a.Intersect(c.b); got != c.want {
			t.Errorf("%v ∩ %v = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// Key groups are part of every checkpoint: the assignment must never
// change. Of is checked against the definition (murmur3's finaliser, then
// modulo) for powers of two, where it masks instead, and others, and
// pinned by a few values.
func TestOfIsTheDefinition(t *testing.T) {
	def := func(h uint64, maxP int) int {
		h ^= h >> 33
		h *= 0xff51afd7ed558ccd
		h ^= h >> 33
		h *= 0xc4ceb9fe1a85ec53
		h ^= h >> 33
		return int(h % uint64(maxP))
	}
	h := uint64(0x9e3779b97f4a7c15)
	for i := range 10000 {
		h = h*6364136223846793005 + 1442695040888963407
		for _, maxP := range []int{1, 2, 3, 100, 128, 1000, 4096, MaxMaxParallelism} {
			if got, want := Of(h, maxP), def(h, maxP); got != want {
				t.Fatalf("Of(%#x, %d) = %d, want %d (step %d)", h, maxP, got, want, i)
			}
		}
	}
	for _, c := range []struct {
		hash       uint64
		maxP, want int
	}{{0, 128, 0}, {1, 128, 44}, {42, 128, 76}, {1 << 63, 32768, 9363}} {
		if got := Of(c.hash, c.maxP); got != c.want {
			t.Errorf("Of(%d, %d) = %d, pinned at %d", c.hash, c.maxP, got, c.want)
		}
	}
}
