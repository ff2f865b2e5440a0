package file

import (
	"flag"
	"fmt"
	"maps"
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
// guarantees). Dealt fresh (dealFresh), a file's splits go round the
// subtasks, and no split moves when files grow or new ones that sort last
// appear (each process of a cluster made its own splits).
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

		// A fresh start: files of random sizes, some growing or new (sorting
		// last) in another process's view.
		sizes := map[string]int64{}
		for f := range rng.IntN(12) {
			sizes[fmt.Sprintf("/in/f%02d", f)] = []int64{0, 1 + rng.Int64N(99), 100, 101 + rng.Int64N(350)}[rng.IntN(4)]
		}
		early := freshReader(sizes)
		owner := map[string]int{}
		for i, mine := range dealt(t, seed, early.all, p, func(_ []split, i, p int) []split { return early.dealFresh(i, p) }) {
			perFile := map[string]int{}
			for _, s := range mine {
				owner[s.id()] = i
				perFile[s.Path]++
			}
			for path, size := range sizes {
				if n, want := perFile[path], int((size+99)/100); n < want/p || n > (want+p-1)/p {
					t.Fatalf("seed %d: subtask %d of %d is dealt %d of the %d splits of %s", seed, i, p, n, want, path)
				}
			}
		}
		for path := range sizes {
			sizes[path] += []int64{0, 0, rng.Int64N(10), rng.Int64N(300)}[rng.IntN(4)]
		}
		for f := range rng.IntN(3) {
			sizes[fmt.Sprintf("/in/z%02d", f)] = rng.Int64N(300)
		}
		late := freshReader(sizes)
		for i, mine := range dealt(t, seed, late.all, p, func(_ []split, i, p int) []split { return late.dealFresh(i, p) }) {
			for _, s := range mine {
				if was, ok := owner[s.id()]; ok && was != i {
					t.Fatalf("seed %d: split %s moved from subtask %d to %d of %d when files grew or appeared after the others", seed, s.id(), was, i, p)
				}
			}
		}
	}
}

// freshReader is a fresh start's reader of files of these sizes, in splits
// of 100 bytes, as Lines makes it.
func freshReader(sizes map[string]int64) *lineReader {
	r := &lineReader{cfg: LinesConfig{SplitBytes: 100}, ids: map[string]string{}}
	for _, path := range slices.Sorted(maps.Keys(sizes)) {
		r.ids[path] = path
		for start := int64(0); start < sizes[path]; start += 100 {
			r.all = append(r.all, split{Path: path, Start: start, End: min(start+100, sizes[path]), Pos: start})
		}
	}
	return r
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
