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
// must agree on: each split goes to exactly one subtask, and a subtask's
// share keeps the splits' order. Dealt by their bytes (deal, a checkpoint's
// splits), no share's bytes left to read exceed another's by more than the
// largest split's (what dealing the largest first to the least loaded
// guarantees). Dealt fresh (dealFresh), the shares do not change when the
// splits' sizes do (each process of a cluster made its own), and of the
// splits at each offset no subtask has two more than another.
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
		shares := dealt(t, seed, splits, p, deal)
		var lo, hi int64 = -1, 0
		for _, mine := range shares {
			var bytes int64
			for _, s := range mine {
				bytes += s.left()
			}
			if lo < 0 || bytes < lo {
				lo = bytes
			}
			hi = max(hi, bytes)
		}
		if hi-lo > largest {
			t.Fatalf("seed %d: shares of %d subtasks range from %d to %d bytes, more apart than the largest split (%d)", seed, p, lo, hi, largest)
		}

		fresh := dealt(t, seed, splits, p, dealFresh)
		grown := slices.Clone(splits)
		for j := range grown {
			grown[j].End += rng.Int64N(3) * 1000
		}
		for i, mine := range dealt(t, seed, grown, p, dealFresh) {
			for k := range mine {
				mine[k].End = fresh[i][k].End
			}
			if !slices.Equal(mine, fresh[i]) {
				t.Fatalf("seed %d: subtask %d of %d is dealt other splits when the files grew:\n%v\n%v", seed, i, p, fresh[i], mine)
			}
		}
		at := map[int64][]int{} // offset → splits per subtask
		for i, mine := range fresh {
			for _, s := range mine {
				if at[s.Start] == nil {
					at[s.Start] = make([]int, p)
				}
				at[s.Start][i]++
			}
		}
		for start, n := range at {
			if slices.Max(n)-slices.Min(n) > 1 {
				t.Fatalf("seed %d: splits at offset %d dealt %v over %d subtasks", seed, start, n, p)
			}
		}
	}
}

// dealt is every subtask's share of splits, after checking that each split
// goes to one subtask and a share keeps the splits' order.
func dealt(t *testing.T, seed int, splits []split, p int, deal func([]split, int, int) []split) [][]split {
	t.Helper()
	seen := map[string]int{}
	shares := make([][]split, p)
	for i := range p {
		shares[i] = deal(splits, i, p)
		last := -1
		for _, s := range shares[i] {
			at := slices.IndexFunc(splits, func(o split) bool { return o == s })
			if at <= last {
				t.Fatalf("seed %d: subtask %d of %d: split %s out of order in its share", seed, i, p, s.id())
			}
			last = at
			seen[s.id()]++
		}
	}
	for _, s := range splits {
		if seen[s.id()] != 1 {
			t.Fatalf("seed %d: split %s dealt %d times over %d subtasks", seed, s.id(), seen[s.id()], p)
		}
	}
	if len(seen) != len(splits) {
		t.Fatalf("seed %d: %d splits dealt, want %d", seed, len(seen), len(splits))
	}
	return shares
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
