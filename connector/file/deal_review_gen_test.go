package file

import (
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestReviewRestoreChainGenerated: seeded files (empty ones, ones just
// over a split, many splits), a fresh run at p, then restores at other
// parallelisms, each after new files land (some empty, some sorting
// first), stopping at random points; the same checkpoint restored twice
// reads the same lines; a rewind to each checkpoint reads what was read
// before it; at the end every line was read once. In a restore a file
// may land between two subtasks' builds (a cluster's processes), and in
// the fresh start files grow between them (one empty in the first
// process's listing, or shorter). Every subtask is built by its own Lines
// call (a cluster) after the files of the run landed.
var chainSeeds = flag.Int("chain.seeds", 300, "seeds of TestReviewRestoreChainGenerated")

func TestReviewRestoreChainGenerated(t *testing.T) {
	for seed := range uint64(*chainSeeds) {
		if err := restoreChain(seed); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

var debugChain = false

func restoreChain(seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 0xdea1))
	fs := vfs.NewMem()
	fs.MkdirAll("/in", 0o755)
	split := int64(20 + rng.IntN(60))
	// written are the lines of the files, each with its file and the
	// offset where it ends; all, those the job reads (set at the end).
	type lineAt struct {
		file, line string
		end        int64
	}
	var written []lineAt
	var all []string
	nfile := 0
	land := func(n int) {
		for k := range n {
			name := fmt.Sprintf("/in/%c%d.txt", "amz"[rng.IntN(3)], nfile)
			nfile++
			var lines []string
			switch rng.IntN(4) {
			case 0: // empty
			case 1: // just over a split
				for len(lines) == 0 || int64(len(fmt.Sprint(lines))) < split+5 {
					lines = append(lines, fmt.Sprintf("%s %d", name, len(lines)))
				}
			default:
				for range rng.IntN(40) {
					lines = append(lines, fmt.Sprintf("%s %d", name, len(lines)))
				}
			}
			if nfile == 1 && k == 0 && len(lines) == 0 {
				// The first file has lines: a checkpoint that knows no
				// file is TestReviewACheckpointThatKnowsNoFile….
				lines = append(lines, name+" 0")
			}
			var b []byte
			for _, l := range lines {
				b = append(append(b, l...), '\n')
				written = append(written, lineAt{name, l, int64(len(b))})
			}
			if debugChain {
				fmt.Printf("land %s: %d lines\n", name, len(lines))
			}
			f, _ := fs.Create(name, vfs.WriteCategoryUnspecified)
			f.Write(b)
			f.Close()
		}
	}
	land(1 + rng.IntN(5))
	// grow appends lines to a file that landed (an empty one too), as
	// while it is being written: a fresh start's processes each list the
	// input themselves, and see it at different sizes.
	grow := func() {
		names, _ := fs.List("/in")
		slices.Sort(names)
		name := "/in/" + names[rng.IntN(len(names))]
		f, err := fs.OpenReadWrite(name, vfs.WriteCategoryUnspecified)
		if err != nil {
			panic(err)
		}
		st, _ := f.Stat()
		var b []byte
		for i := range 1 + rng.IntN(30) {
			l := fmt.Sprintf("%s +%d.%d", name, st.Size(), i)
			b = append(append(b, l...), '\n')
			written = append(written, lineAt{name, l, st.Size() + int64(len(b))})
		}
		f.WriteAt(b, st.Size())
		f.Close()
		if debugChain {
			fmt.Printf("grow %s by %d bytes\n", name, len(b))
		}
	}
	w := &operatortest.MemWriter{}
	var done lines
	var hs []checkpoint.Handle
	cfg := LinesConfig{FS: fs, Pattern: "/in/*.txt", SplitBytes: split, BatchLines: 1 + rng.IntN(4)}
	// views are, at the fresh start, each subtask's process's listing: the
	// files' sizes when it built the job.
	var views []map[string]int64
	run := func(p int, restore []checkpoint.Handle, reads int, rewind bool) (lines, []checkpoint.Handle, error) {
		var got lines
		var out []checkpoint.Handle
		landAt := -1
		if restore != nil && !rewind && reads >= 0 && rng.IntN(2) == 0 {
			landAt = rng.IntN(p) // a file lands after this subtask's process built the job
		}
		// A fresh start's processes list the input in any order, files
		// growing in between.
		builds := make([]func() weir.SourceReader[string], p)
		if restore == nil {
			views = make([]map[string]int64, p)
			for i, sub := range rng.Perm(p) {
				var err error
				if builds[sub], err = Lines(cfg); err != nil {
					return nil, nil, err
				}
				names, _ := fs.List("/in")
				views[sub] = map[string]int64{}
				for _, n := range names {
					st, _ := fs.Stat("/in/" + n)
					views[sub]["/in/"+n] = st.Size()
				}
				if i < p-1 && rng.IntN(2) == 0 {
					grow() // after this subtask's process listed the input
				}
			}
		}
		for sub := range p {
			newReader := builds[sub]
			if newReader == nil {
				var err error
				if newReader, err = Lines(cfg); err != nil {
					return nil, nil, err
				}
			}
			if sub == landAt {
				land(1)
			}
			var rs *operator.Restore
			if restore != nil {
				rs = &operator.Restore{Checkpoint: 1, Handles: restore, Read: w.Read}
			}
			ctx := opCtx(sub, p, rs)
			ctx.Rewind = rewind
			rd := newReader()
			if err := rd.Open(ctx); err != nil {
				return nil, nil, err
			}
			if debugChain {
				fmt.Printf("sub %d/%d restore=%v rewind=%v reads=%d mine=%+v\n", sub, p, restore != nil, rewind, reads, rd.(*lineReader).mine)
			}
			for n := 0; reads < 0 || n < reads; n++ {
				res, err := rd.Read(&got)
				if err != nil {
					return nil, nil, err
				}
				if res.Exhausted {
					break
				}
			}
			if !rewind {
				async, err := rd.Snapshot(1)
				if err != nil {
					return nil, nil, err
				}
				more, err := async(w)
				if err != nil {
					return nil, nil, err
				}
				out = append(out, more...)
			}
			rd.Close()
		}
		return got, out, nil
	}
	got, hs, err := run(1+rng.IntN(4), nil, rng.IntN(8), false)
	if err != nil {
		return err
	}
	done = append(done, got...)
	for step := range 1 + rng.IntN(4) {
		land(rng.IntN(3))
		again, _, err := run(1+rng.IntN(4), hs, -1, true)
		if err != nil {
			return fmt.Errorf("step %d: rewind: %w", step, err)
		}
		if !slices.Equal(slices.Sorted(slices.Values(again)), slices.Sorted(slices.Values(done))) {
			return fmt.Errorf("step %d: rewind read %d lines, %d read before: %q, %q", step, len(again), len(done), again[:min(5, len(again))], done[:min(5, len(done))])
		}
		p := 1 + rng.IntN(5)
		reads := rng.IntN(8)
		got1, hs1, err := run(p, hs, reads, false)
		if err != nil {
			return fmt.Errorf("step %d: restore: %w", step, err)
		}
		// The same checkpoint restored again, at another parallelism, reads
		// the same lines when read to the end.
		end1, _, err := run(p, hs, -1, false)
		if err != nil {
			return err
		}
		end2, _, err := run(1+rng.IntN(5), hs, -1, false)
		if err != nil {
			return err
		}
		if !slices.Equal(slices.Sorted(slices.Values(end1)), slices.Sorted(slices.Values(end2))) {
			return fmt.Errorf("step %d: one checkpoint restored twice read %d and %d lines", step, len(end1), len(end2))
		}
		done = append(done, got1...)
		hs = hs1
	}
	rest, _, err := run(1+rng.IntN(5), hs, -1, false)
	if err != nil {
		return err
	}
	done = append(done, rest...)
	// What the job reads of a file its fresh start's processes listed:
	// up to the greatest size subtask 0's process or a process whose
	// subtask took a split of it (a split is dealt by its index: subtask
	// (place+k) mod p, in each process) saw. What only another process
	// saw is not read (no record of it is kept: design note 137), nor
	// what was appended after the last of those listed the input (files
	// are taken as unchanging). A file none of them saw with lines is
	// read whole by the first restore.
	took := map[string]int64{}
	names := slices.Sorted(maps.Keys(views[0]))
	for place, f := range names {
		for j, view := range views {
			for k := int64(0); k*split < view[f]; k++ {
				if (int64(place)+k)%int64(len(views)) == int64(j) {
					took[f] = max(took[f], view[f])
				}
			}
		}
		if views[0][f] > 0 {
			took[f] = max(took[f], views[0][f])
		}
	}
	for _, l := range written {
		if size, ok := took[l.file]; !ok || l.end <= size {
			all = append(all, l.line)
		}
	}
	slices.Sort(done)
	slices.Sort(all)
	if !slices.Equal(done, all) {
		var missing, twice []string
		for _, l := range all {
			if _, found := slices.BinarySearch(done, l); !found {
				missing = append(missing, l)
			}
		}
		for i := 1; i < len(done); i++ {
			if done[i] == done[i-1] {
				twice = append(twice, done[i])
			}
		}
		return fmt.Errorf("read %d lines in all, the files hold %d: missing %q, read twice %q", len(done), len(all), missing[:min(5, len(missing))], twice[:min(5, len(twice))])
	}
	return nil
}
