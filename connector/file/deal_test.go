package file

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

var dealSeeds = flag.Int("deal.seeds", 500, "seeds of TestDealAgainstAModel")

// TestDealAgainstAModel deals random splits (sizes from empty to large, some
// started or read to the end) to 1–9 subtasks and checks what every subtask
// must agree on: each split goes to exactly one subtask, a subtask's share
// keeps the splits' order, and no share's bytes left to read exceed
// another's by more than the largest split's (what dealing the largest first
// to the least loaded guarantees).
func TestDealAgainstAModel(t *testing.T) {
	for seed := range *dealSeeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		splits := make([]split, rng.IntN(40))
		largest := int64(0)
		for j := range splits {
			size := []int64{0, 1, 100, 64 << 20}[rng.IntN(4)] + rng.Int64N(1000)
			s := split{Path: fmt.Sprintf("/in/%d", j/3), Start: int64(j%3) * (64 << 20)}
			s.End, s.Pos = s.Start+size, s.Start
			if rng.IntN(4) == 0 {
				s.Pos += rng.Int64N(size + 2) // started, or read to the end (or past it)
				s.started = true
			}
			splits[j] = s
			largest = max(largest, s.left())
		}
		p := 1 + rng.IntN(9)
		seen := map[string]int{}
		var lo, hi int64 = -1, 0
		for i := range p {
			mine := deal(splits, i, p)
			var bytes int64
			last := -1
			for _, s := range mine {
				at := slices.IndexFunc(splits, func(o split) bool { return o == s })
				if at <= last {
					t.Fatalf("seed %d: subtask %d of %d: split %s out of order in its share", seed, i, p, s.id())
				}
				last = at
				seen[s.id()]++
				bytes += s.left()
			}
			if lo < 0 || bytes < lo {
				lo = bytes
			}
			hi = max(hi, bytes)
		}
		for _, s := range splits {
			if seen[s.id()] != 1 {
				t.Fatalf("seed %d: split %s dealt %d times over %d subtasks", seed, s.id(), seen[s.id()], p)
			}
		}
		if len(seen) != len(splits) {
			t.Fatalf("seed %d: %d splits dealt, want %d", seed, len(seen), len(splits))
		}
		if hi-lo > largest {
			t.Fatalf("seed %d: shares of %d subtasks range from %d to %d bytes, more apart than the largest split (%d)", seed, p, lo, hi, largest)
		}
	}
}

// TestSplitsAreDealtByTheirBytes: files a little larger than the split size
// are cut into a full split and a small tail each. Dealt every p-th, one
// subtask read every full split and the other every tail (the cluster
// bench's two sources: 64 MiB and 0.4 MiB of each of four files). Both a
// fresh start and a restore must give each of two subtasks about half.
func TestSplitsAreDealtByTheirBytes(t *testing.T) {
	fs := vfs.NewMem()
	fs.MkdirAll("/in", 0o755)
	for f := range 4 {
		numbered(t, fs, fmt.Sprintf("/in/f%d.txt", f), 80) // 1,110 bytes: a split of 1,000 and a tail of 110
	}
	newReader, err := Lines(LinesConfig{FS: fs, Pattern: "/in/*.txt", SplitBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	shares := func(rs *operator.Restore) [2]int64 {
		t.Helper()
		var left [2]int64
		for sub := range 2 {
			r := newReader().(*lineReader)
			if err := r.Open(opCtx(sub, 2, rs)); err != nil {
				t.Fatal(err)
			}
			left[sub], _ = r.Progress()
			r.Close()
		}
		return left
	}
	balanced := func(what string, left [2]int64) {
		t.Helper()
		if left[0] == 0 || left[1] == 0 || max(left[0], left[1]) > 2*min(left[0], left[1]) {
			t.Fatalf("%s: the two subtasks have %d and %d bytes to read; want about half each", what, left[0], left[1])
		}
	}
	balanced("fresh start", shares(nil))

	// A checkpoint of one subtask that read nothing, restored at two.
	r := newReader().(*lineReader)
	if err := r.Open(opCtx(0, 1, nil)); err != nil {
		t.Fatal(err)
	}
	async, err := r.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	w := &operatortest.MemWriter{}
	hs, err := async(w)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	balanced("restore", shares(&operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read}))
}
