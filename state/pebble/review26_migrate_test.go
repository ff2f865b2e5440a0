package pebble

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/internal/racetest"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestReview26MigrateAtMaxParallelismKeyGroups: an old-format list table
// in a subtask that owns all 32,768 key groups (a job at max parallelism
// 32768 run with parallelism 1), holding few lists. The rewrite opens an
// iterator per key group; it should not cost much more than the lists
// (logged: a wall-clock limit is no test).
func TestReview26MigrateAtMaxParallelismKeyGroups(t *testing.T) {
	big := keygroup.Range{First: 0, Last: 32767}
	w := &operatortest.MemWriter{}
	b := backendOf(t, big, nil, w)
	id, err := b.table("l")
	if err != nil {
		t.Fatal(err)
	}
	tb := &table{b: b, id: id}
	for g := 0; g < 32768; g += 4096 {
		for s := range uint64(3) {
			key := binary.BigEndian.AppendUint64(prefixAt(tb, g, str, "k"), s)
			if err := b.db.Set(key, str.Append(nil, "v"), pebble.NoSync); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := backendOf(t, big, checkpointOf(t, b, 1, w), w)
	start := time.Now()
	l := declareList(t, r, "l")
	took := time.Since(start)
	r.SetGroup(4096)
	if got := l.Get("k"); len(got) != 3 {
		t.Fatalf("list %v", got)
	}
	t.Logf("declaring the old-format list table over 32768 key groups (8 lists) took %v", took)
}

// TestReview26HugeListAcrossCompactionsAndRescales: 200,000 appends to
// one key in each of two subtasks' lists (flushes and compactions along
// the way, checkpoints between), restored at parallelism 1 and 3 and back
// to 2, every element in order each time.
func TestReview26HugeListAcrossCompactionsAndRescales(t *testing.T) {
	w := &operatortest.MemWriter{}
	halves := []keygroup.Range{{First: 0, Last: 63}, {First: 64, Last: 127}}
	keys := map[string]int{}
	for i := 0; len(keys) < 2; i++ {
		k := fmt.Sprint("hot-", i)
		g := r26Group(k)
		if _, dup := keys[k]; !dup && (len(keys) == 0 || halves[1].Contains(g) != halves[1].Contains(r26Group(firstKey(keys)))) {
			keys[k] = g
		}
	}
	n := 200_000
	if racetest.Enabled {
		n = 50_000 // still many flushes and compactions, in a quarter of the time
	}
	var hs []checkpoint.Handle
	start := time.Now()
	for _, r := range halves {
		b := backendOf(t, r, nil, w)
		l := declareList(t, b, "l")
		for k, g := range keys {
			if !r.Contains(g) {
				continue
			}
			b.SetGroup(g)
			for i := range n {
				l.Add(k, strconv.Itoa(i))
				if i%50_000 == 49_999 {
					checkpointOf(t, b, checkpoint.ID(i/50_000+1), w)
				}
			}
			if err := b.db.Compact(context.Background(), []byte{0}, []byte{0xff, 0xff}, true); err != nil {
				t.Fatal(err)
			}
		}
		hs = append(hs, checkpointOf(t, b, 10, w)...)
	}
	t.Logf("written in %v", time.Since(start))
	check := func(b *Backend, l *List[string, string]) {
		t.Helper()
		for k, g := range keys {
			if !b.scope.KeyGroups.Contains(g) {
				continue
			}
			b.SetGroup(g)
			got := l.Get(k)
			if len(got) != n {
				t.Fatalf("%s has %d elements, want %d", k, len(got), n)
			}
			for i, v := range got {
				if v != strconv.Itoa(i) {
					t.Fatalf("%s's element %d is %s", k, i, v)
				}
			}
		}
	}
	start = time.Now()
	for _, rs := range [][]keygroup.Range{{all}, {{First: 0, Last: 40}, {First: 41, Last: 90}, {First: 91, Last: 127}}} {
		var hs2 []checkpoint.Handle
		for _, r := range rs {
			b := backendOf(t, r, hs, w)
			l := declareList(t, b, "l")
			check(b, l)
			for k, g := range keys { // one more element, then back to the count
				if r.Contains(g) {
					b.SetGroup(g)
					l.Add(k, "extra")
					l.Update(k, l.Get(k)[:n])
				}
			}
			hs2 = append(hs2, checkpointOf(t, b, 20, w)...)
		}
		for _, r := range halves {
			b := backendOf(t, r, hs2, w)
			check(b, declareList(t, b, "l"))
		}
	}
	t.Logf("restored and read in %v", time.Since(start))
}

func firstKey(m map[string]int) string {
	for k := range m {
		return k
	}
	return ""
}
