package pebble

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/operator/operatortest"
)

// This file compiles against both the change and the commit before it
// (4e8568e), so that the numbers can be compared.

func r26Open(t testing.TB, r keygroup.Range) *Backend {
	t.Helper()
	b, err := New(Options{Dir: t.TempDir(), Incremental: true, MemTableBytes: 1 << 20}, Scope{Job: "j", Operator: "op", Subtask: r.First, KeyGroups: r}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// BenchmarkReview26GrowingListUpload: one key's list grows by the same
// delta (3,000 elements of 100 bytes, ~292 KB) between 100 checkpoints, as
// a long window's pane of a hot key or a join side does, and reports what
// the incremental checkpoints uploaded. With a list as one key, a
// compaction that touches the key rewrites the whole list into a new data
// file, which the next checkpoint uploads whole (as with Flink's RocksDB
// list state): the review measured a largest checkpoint of 19.8–23.7 MB
// for 29 MB of state, where an element per key uploaded at most 6.7 MB.
// (It was a test asserting at most half the state in one checkpoint; it
// states the cost of the format, design note 114.)
func BenchmarkReview26GrowingListUpload(bm *testing.B) {
	const checkpoints, perCheckpoint, elemBytes = 100, 3000, 100
	for bm.Loop() {
		b := r26Open(bm, all)
		l, err := NewList(b, "l", codec.For[string](), codec.For[string]())
		if err != nil {
			bm.Fatal(err)
		}
		b.SetGroup(5)
		w := &counting{MemWriter: &operatortest.MemWriter{}}
		rng := rand.New(rand.NewPCG(1, 2))
		pad := func() string { // incompressible
			var sb strings.Builder
			for range elemBytes - 10 {
				sb.WriteByte(byte('a' + rng.IntN(26)))
			}
			return sb.String()
		}
		var maxOne int64
		for c := range checkpoint.ID(checkpoints) {
			for i := range perCheckpoint {
				l.Add("hot", fmt.Sprintf("%04d.%04d%s", c, i, pad()))
			}
			before := w.bytes
			take(bm, b, c+1, w)
			b.NotifyComplete(c + 1)
			maxOne = max(maxOne, w.bytes-before)
		}
		if got := len(l.Get("hot")); got != checkpoints*perCheckpoint {
			bm.Fatalf("list has %d elements, want %d", got, checkpoints*perCheckpoint)
		}
		state := int64(checkpoints * perCheckpoint * elemBytes)
		bm.ReportMetric(float64(w.bytes)/float64(state), "uploaded/state")
		bm.ReportMetric(float64(maxOne)/float64(state), "largest/state")
	}
}

// BenchmarkReview26PaneReadMany: a pane's list appended to n times
// (merge operands in the memtable, not yet compacted) and then read by
// many overlapping sliding windows, each read whole.
func BenchmarkReview26PaneReadMany(bm *testing.B) {
	for _, n := range []int{100, 5000} {
		bm.Run(fmt.Sprint("n=", n), func(bm *testing.B) {
			b := r26Open(bm, all)
			l, err := NewList(b, "l", codec.For[string](), codec.For[int64]())
			if err != nil {
				bm.Fatal(err)
			}
			b.SetGroup(3)
			for i := range n {
				l.Add("pane", int64(i))
			}
			bm.ResetTimer()
			for range bm.N {
				s := int64(0)
				for v := range l.All("pane") {
					s += v
				}
				if s != int64(n*(n-1)/2) {
					bm.Fatal(s)
				}
			}
		})
	}
}

// BenchmarkReview26AddRead: each record appends to its key's list and
// reads it back (a count trigger, a process function that looks at the
// whole list) — quadratic in both formats, compare constants.
func BenchmarkReview26AddRead(bm *testing.B) {
	b := r26Open(bm, all)
	l, err := NewList(b, "l", codec.For[string](), codec.For[int64]())
	if err != nil {
		bm.Fatal(err)
	}
	b.SetGroup(3)
	for range bm.N {
		l.Delete("k")
		for i := range 2000 {
			l.Add("k", int64(i))
			if len(l.Get("k")) != i+1 {
				bm.Fatal("short")
			}
		}
	}
}
