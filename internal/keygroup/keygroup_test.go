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
