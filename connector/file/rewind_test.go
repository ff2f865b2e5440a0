package file

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

var rewindSeeds = flag.Int("rewind.seeds", 300, "seeds of TestRewindGenerated")

// TestRewindGenerated: seeded random files (empty lines, CRLF, a last
// line without newline, empty files, lines longer than a split), split
// sizes (another for the rewind), parallelisms and stopping points. Each subtask reads a random
// number of batches, all snapshot; readers rewound to that snapshot, at
// another parallelism, read again exactly the lines read before it — the
// multisets are equal — and then a restore of it reads exactly the rest.
// Run more with -rewind.seeds; a failure names its seed.
func TestRewindGenerated(t *testing.T) {
	for seed := range uint64(*rewindSeeds) {
		if err := rewindOnce(seed); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

func rewindOnce(seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	fs := vfs.NewMem()
	fs.MkdirAll("/in", 0o755)
	var all []string
	for f := range 1 + rng.IntN(4) {
		var b strings.Builder
		n := rng.IntN(30)
		for i := range n {
			line := strings.Repeat("abcd"[f:f+1], rng.IntN(3)*rng.IntN(12)) + fmt.Sprintf("%d.%d", f, i)
			b.WriteString(line)
			all = append(all, line)
			switch {
			case i == n-1 && rng.IntN(3) == 0: // no newline at the end
			case rng.IntN(4) == 0:
				b.WriteString("\r\n")
			default:
				b.WriteString("\n")
			}
		}
		wf, err := fs.Create(fmt.Sprintf("/in/f%d.txt", f), vfs.WriteCategoryUnspecified)
		if err != nil {
			return err
		}
		wf.Write([]byte(b.String()))
		wf.Close()
	}
	cfg := LinesConfig{FS: fs, Pattern: "/in/*.txt", SplitBytes: int64(1 + rng.IntN(64)), BatchLines: 1 + rng.IntN(5)}
	newReader, err := Lines(cfg)
	if err != nil {
		return err
	}
	// The rewind and the restore are configured with another split size:
	// the checkpoint says how the job split each file.
	cfg2 := cfg
	cfg2.SplitBytes = int64(1 + rng.IntN(64))
	newReader2, err := Lines(cfg2)
	if err != nil {
		return err
	}
	p, p2 := 1+rng.IntN(3), 1+rng.IntN(3)
	w := &operatortest.MemWriter{}
	var before lines
	var handles []checkpoint.Handle
	for sub := range p {
		r := newReader()
		if err := r.Open(opCtx(sub, p, nil)); err != nil {
			return err
		}
		for range rng.IntN(12) {
			if _, err := r.Read(&before); err != nil {
				return err
			}
		}
		async, err := r.Snapshot(1)
		if err != nil {
			return err
		}
		hs, err := async(w)
		if err != nil {
			return err
		}
		handles = append(handles, hs...)
		r.Close()
	}
	read := func(rewind bool) (lines, error) {
		var got lines
		for sub := range p2 {
			r := newReader2()
			ctx := opCtx(sub, p2, &operator.Restore{Checkpoint: 1, Handles: handles, Read: w.Read})
			ctx.Rewind = rewind
			if err := r.Open(ctx); err != nil {
				return nil, err
			}
			for {
				res, err := r.Read(&got)
				if err != nil {
					return nil, err
				}
				if res.Exhausted {
					break
				}
			}
			r.Close()
		}
		slices.Sort(got)
		return got, nil
	}
	again, err := read(true)
	if err != nil {
		return err
	}
	slices.Sort(before)
	if !slices.Equal(again, before) {
		return fmt.Errorf("split %d bytes, parallelism %d, rewound at %d: read %q again, want %q", cfg.SplitBytes, p, p2, again, before)
	}
	rest, err := read(false)
	if err != nil {
		return err
	}
	got := slices.Sorted(slices.Values(slices.Concat(before, rest)))
	slices.Sort(all)
	if !slices.Equal(got, all) {
		return fmt.Errorf("split %d bytes: before the snapshot and after it, %q; the files hold %q", cfg.SplitBytes, got, all)
	}
	return nil
}
