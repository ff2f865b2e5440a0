package file

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestS41uProbeLongLinesRestRestoreRestoreRewind: lines longer than a split
// in the untaken rest of a file that grew between listings; restores at
// other parallelisms mid-way, then rewinds.
func TestS41uProbeLongLinesRestRestoreRestoreRewind(t *testing.T) {
	for reads1 := 0; reads1 < 6; reads1++ {
		for reads2 := 0; reads2 < 6; reads2++ {
			fs := vfs.NewMem()
			fs.MkdirAll("/in", 0o755)
			var all []string
			write := func(n int) {
				var b strings.Builder
				all = all[:0]
				for i := range n {
					l := fmt.Sprintf("/in/a.txt %d %s", i, strings.Repeat("x", (i*37)%230))
					all = append(all, l)
					b.WriteString(l + "\n")
				}
				writeFile(t, fs, "/in/a.txt", b.String())
			}
			write(3)
			early := review(t, fs)
			write(12)
			late := review(t, fs)
			w := &operatortest.MemWriter{}
			var got lines
			var hs []checkpoint.Handle
			for sub, nr := range []func() weir.SourceReader[string]{late, early} {
				rd := s41uOpen(t, w, nr, sub, 2, nil, false)
				drain(t, rd, &got)
				hs = append(hs, s41uSnap(t, w, rd)...)
				rd.Close()
			}
			step := func(p, reads int) {
				var out []checkpoint.Handle
				for sub := range p {
					rd := s41uOpen(t, w, late, sub, p, hs, false)
					for range reads {
						if res, err := rd.Read(&got); err != nil {
							t.Fatal(err)
						} else if res.Exhausted {
							break
						}
					}
					out = append(out, s41uSnap(t, w, rd)...)
					rd.Close()
				}
				hs = out
				for _, rp := range []int{1, 3} {
					var again lines
					for sub := range rp {
						rw := s41uOpen(t, w, late, sub, rp, hs, true)
						drain(t, rw, &again)
						rw.Close()
					}
					a, b := slices.Sorted(slices.Values(again)), slices.Sorted(slices.Values(got))
					if !slices.Equal(a, b) {
						t.Fatalf("reads %d,%d: rewind at %d read %d, before %d", reads1, reads2, rp, len(a), len(b))
					}
				}
			}
			step(3, reads1)
			step(2, reads2)
			rd := s41uOpen(t, w, late, 0, 1, hs, false)
			drain(t, rd, &got)
			once(t, fmt.Sprint("a.txt ", reads1, reads2), got, all)
		}
	}
}
