package pebble

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/operator/operatortest"
	"github.com/weirstream/weir/state"
)

var str = codec.For[string]()

// backendOf opens a backend of key groups r, restored from hs (nil:
// empty), as subtask r.First.
func backendOf(t *testing.T, r keygroup.Range, hs []checkpoint.Handle, w *operatortest.MemWriter) *Backend {
	t.Helper()
	var rs *state.Restored
	if hs != nil {
		rs = &state.Restored{Handles: hs, Reader: w}
	}
	b, err := New(Options{Dir: t.TempDir(), Incremental: true, MemTableBytes: 1 << 20}, Scope{Job: "j", Operator: "op", Subtask: r.First, KeyGroups: r}, rs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// checkpointOf snapshots b as subtask r.First, as the operator's writer
// names handles.
func checkpointOf(t *testing.T, b *Backend, id checkpoint.ID, w *operatortest.MemWriter) []checkpoint.Handle {
	t.Helper()
	hs := take(t, b, id, &counting{MemWriter: w})
	for i := range hs {
		hs[i].Subtask, hs[i].Operator = hs[i].KeyGroups.First, "op"
	}
	b.NotifyComplete(id)
	return hs
}

// oldLists writes list table name into b as Weir wrote lists before they
// took one key each: the table registered, no mark, an element per key
// (the list's key, then a sequence number of 8 bytes, big-endian, in the
// order of the appends), the element's bytes the value. Key i of the
// keys in r gets the elements i.0 … i.(i%4), so some lists have one
// element and some four. It returns the lists written.
func oldLists(t *testing.T, b *Backend, name string, r keygroup.Range, keys int) map[string][]string {
	t.Helper()
	id, err := b.table(name)
	if err != nil {
		t.Fatal(err)
	}
	tb := &table{b: b, id: id}
	want := map[string][]string{}
	seq := uint64(1 << 40) // sequence numbers run on across keys
	for i := range keys {
		k := fmt.Sprint("key-", i)
		g := keygroup.Of(codec.NewHasher(str).Hash(k), 128)
		if !r.Contains(g) {
			continue
		}
		for e := range i%4 + 1 {
			v := fmt.Sprintf("%d.%d", i, e)
			key := binary.BigEndian.AppendUint64(prefixAt(tb, g, str, k), seq)
			seq++
			if err := b.db.Set(key, str.Append(nil, v), pebble.NoSync); err != nil {
				t.Fatal(err)
			}
			want[k] = append(want[k], v)
		}
	}
	return want
}

// checkLists reads every list of want from l, and finds no key of the
// table that is not a whole list.
func checkLists(t *testing.T, b *Backend, l *List[string, string], want map[string][]string) {
	t.Helper()
	for k, vs := range want {
		b.SetGroup(keygroup.Of(codec.NewHasher(str).Hash(k), 128))
		if got := l.Get(k); !slices.Equal(got, vs) {
			t.Fatalf("list %s = %v, want %v", k, got, vs)
		}
	}
	lists := 0
	for g := b.scope.KeyGroups.First; g <= b.scope.KeyGroups.Last; g++ {
		l.scan(binary.BigEndian.AppendUint16(groupKey(g), l.id), func(suffix, _ []byte) bool {
			n, w := binary.Uvarint(suffix)
			if w+int(n) != len(suffix) {
				t.Fatalf("key group %d holds a key of the list table with %d bytes after a list's key", g, len(suffix)-w-int(n))
			}
			lists++
			return true
		})
	}
	if lists != len(want) {
		t.Fatalf("the table holds %d lists, want %d", lists, len(want))
	}
}

func declareList(t *testing.T, b *Backend, name string) *List[string, string] {
	t.Helper()
	l, err := NewList(b, name, str, str)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestListsOfAnEarlierFormatAreRewritten: a checkpoint whose lists are an
// element per key (Weir before lists took one key each) restores with
// every list whole and in order, at the same parallelism and at others,
// and a list added to after the restore keeps its old elements first.
// The rewritten table's kind is recorded, so the next restore does not
// look again.
func TestListsOfAnEarlierFormatAreRewritten(t *testing.T) {
	w := &operatortest.MemWriter{}
	old := backendOf(t, all, nil, w)
	want := oldLists(t, old, "l", all, 500)
	hs := checkpointOf(t, old, 1, w)

	t.Run("same parallelism", func(t *testing.T) {
		b := backendOf(t, all, hs, w)
		if k := b.kinds["l"]; k != "" {
			t.Fatalf("a table of the old format has kind %q before it is declared", k)
		}
		l := declareList(t, b, "l")
		checkLists(t, b, l, want)
		b.SetGroup(keygroup.Of(codec.NewHasher(str).Hash("key-3"), 128))
		l.Add("key-3", "new")
		if got := l.Get("key-3"); !slices.Equal(got, append(slices.Clone(want["key-3"]), "new")) {
			t.Fatalf("key-3 after an Add: %v", got)
		}
		again := backendOf(t, all, checkpointOf(t, b, 2, w), w)
		if k := again.kinds["l"]; k != kindList {
			t.Fatalf("the rewritten table's kind is %q: every restore would scan it again", k)
		}
	})
	t.Run("to two subtasks", func(t *testing.T) {
		for _, r := range []keygroup.Range{{First: 0, Last: 63}, {First: 64, Last: 127}} {
			b := backendOf(t, r, hs, w)
			mine := map[string][]string{}
			for k, vs := range want {
				if r.Contains(keygroup.Of(codec.NewHasher(str).Hash(k), 128)) {
					mine[k] = vs
				}
			}
			checkLists(t, b, declareList(t, b, "l"), mine)
		}
	})
}

// TestListsOfMixedFormatsMerge: at a rescale, the database of one old
// subtask holds lists in the earlier format and another's in today's
// (as a job's checkpoint never does, but a restore must not depend on
// it); the merged database reads both, whichever is opened first.
func TestListsOfMixedFormatsMerge(t *testing.T) {
	low, high := keygroup.Range{First: 0, Last: 63}, keygroup.Range{First: 64, Last: 127}
	for _, oldOne := range []keygroup.Range{low, high} {
		t.Run(fmt.Sprintf("earlier format in key groups %v", oldOne), func(t *testing.T) {
			w := &operatortest.MemWriter{}
			want := map[string][]string{}
			var hs []checkpoint.Handle
			for _, r := range []keygroup.Range{low, high} {
				b := backendOf(t, r, nil, w)
				if r == oldOne {
					for k, vs := range oldLists(t, b, "l", r, 500) {
						want[k] = vs
					}
				} else {
					l := declareList(t, b, "l")
					for i := range 500 {
						k := fmt.Sprint("key-", i)
						g := keygroup.Of(codec.NewHasher(str).Hash(k), 128)
						if !r.Contains(g) {
							continue
						}
						b.SetGroup(g)
						l.Add(k, "n1")
						l.Add(k, "n2")
						want[k] = []string{"n1", "n2"}
					}
				}
				hs = append(hs, checkpointOf(t, b, 1, w)...)
			}
			b := backendOf(t, all, hs, w)
			checkLists(t, b, declareList(t, b, "l"), want)
		})
	}
}

// TestListsAcrossFlushes: a list's elements added before a checkpoint
// (in a data file) and after it (in the memtable) read as one list in
// order, and so after a restore; Update and Delete replace all of them.
func TestListsAcrossFlushes(t *testing.T) {
	w := &operatortest.MemWriter{}
	b := backendOf(t, all, nil, w)
	l := declareList(t, b, "l")
	b.SetGroup(7)
	var want []string
	for c := range checkpoint.ID(3) {
		for i := range 3 {
			v := fmt.Sprint(c, ".", i)
			l.Add("k", v)
			want = append(want, v)
		}
		checkpointOf(t, b, c+1, w)
	}
	l.Add("k", "last")
	want = append(want, "last")
	if got := l.Get("k"); !slices.Equal(got, want) {
		t.Fatalf("list %v, want %v", got, want)
	}
	r := backendOf(t, all, checkpointOf(t, b, 4, w), w)
	rl := declareList(t, r, "l")
	r.SetGroup(7)
	if got := rl.Get("k"); !slices.Equal(got, want) {
		t.Fatalf("restored list %v, want %v", got, want)
	}
	rl.Update("k", []string{"only"})
	rl.Add("k", "then")
	checkpointOf(t, r, 5, w)
	if got := rl.Get("k"); !slices.Equal(got, []string{"only", "then"}) {
		t.Fatalf("after Update and Add: %v", got)
	}
	rl.Delete("k")
	rl.Add("k", "fresh")
	if got := rl.Get("k"); !slices.Equal(got, []string{"fresh"}) {
		t.Fatalf("after Delete and Add: %v", got)
	}
}

// benchList is an empty backend with a memtable of the size given, and
// its list table.
func benchList(b *testing.B, memtable int64) (*Backend, *List[string, string]) {
	be, err := New(Options{Dir: b.TempDir(), MemTableBytes: memtable}, Scope{Job: "j", Operator: "op", KeyGroups: all}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	l, err := NewList(be, "l", str, str)
	if err != nil {
		b.Fatal(err)
	}
	return be, l
}

// BenchmarkListRewrite is q4's waiting bids: per key, a few elements
// added, then the list read and rewritten without its first element, over
// and over, as timers drop what the watermark passed.
func BenchmarkListRewrite(b *testing.B) {
	be, l := benchList(b, 16<<20)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprint("key-", i)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := keys[i%len(keys)]
		be.SetGroup(i % 128)
		l.Add(k, "bid")
		if i%3 == 0 {
			vs := l.Get(k)
			if len(vs) > 0 {
				vs = vs[1:]
			}
			l.Update(k, vs)
		}
	}
}

// TestConcatenateMergesInOrder: whatever order Pebble hands the operands
// in (older ones going back from the first, newer ones forward), the
// result is every operand, oldest first, as Pebble's default merger makes
// it.
func TestConcatenateMergesInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		n := rng.IntN(20) + 1
		ops := make([][]byte, n)
		for i := range ops {
			ops[i] = []byte(fmt.Sprint(i, strings.Repeat("x", rng.IntN(5)), ";"))
		}
		first := rng.IntN(n)
		m, err := concatenate.Merge(nil, ops[first])
		if err != nil {
			t.Fatal(err)
		}
		ref, _ := pebble.DefaultMerger.Merge(nil, ops[first])
		older, newer := first-1, first+1
		for older >= 0 || newer < n {
			if newer < n && (older < 0 || rng.IntN(2) == 0) {
				m.MergeNewer(ops[newer])
				ref.MergeNewer(ops[newer])
				newer++
			} else {
				m.MergeOlder(ops[older])
				ref.MergeOlder(ops[older])
				older--
			}
		}
		got, _, _ := m.Finish(true)
		want, _, _ := ref.Finish(true)
		if string(got) != string(want) || string(want) != string(bytes.Join(ops, nil)) {
			t.Fatalf("operands %q from %d: merged %q, Pebble's merger %q", ops, first, got, want)
		}
	}
}

// BenchmarkListLong is a window's pane: elements added one by one, then
// the list read whole, before a flush merges the operands.
func BenchmarkListLong(b *testing.B) {
	_, l := benchList(b, 64<<20)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := fmt.Sprint("pane-", i)
		for range 5000 {
			l.Add(k, "record")
		}
		if n := len(l.Get(k)); n != 5000 {
			b.Fatalf("read %d elements of 5000", n)
		}
	}
}

// TestOldMapDeclaredAsList: a database written before kinds were recorded
// (its map table has no kind) restored by a job that declares list state
// under the map's name: the keys are no list's of the earlier format (a
// user key of other than 8 bytes), or their values no list elements (the
// map's int64s do not decode as the list's strings). NewList refuses it as
// a checkpoint that does not fit the job, not as damaged state (which
// would make the runtime discard the checkpoint), and rewrites nothing.
func TestOldMapDeclaredAsList(t *testing.T) {
	for _, uk := range []string{"a-longer-key", "seven-7"} {
		t.Run(uk, func(t *testing.T) {
			w := &operatortest.MemWriter{}
			b := backendOf(t, all, nil, w)
			m, err := NewMap(b, "s", str, str, codec.For[int64]())
			if err != nil {
				t.Fatal(err)
			}
			b.SetGroup(r26Group("k"))
			m.Put("k", uk, 1<<62)
			if err := b.db.Delete(kindKey("s"), pebble.NoSync); err != nil { // as before kinds
				t.Fatal(err)
			}
			hs := checkpointOf(t, b, 1, w)
			r := backendOf(t, all, hs, w)
			if k := r.kinds["s"]; k != "" {
				t.Fatalf("the table has kind %q", k)
			}
			_, err = NewList(r, "s", str, str)
			if !errors.Is(err, checkpoint.ErrMismatch) || errors.Is(err, checkpoint.ErrStateDamaged) {
				t.Fatalf("NewList of an old map table: %v; want a checkpoint that does not fit the job", err)
			}
			t.Log(err)
			again := backendOf(t, all, hs, w)
			mm, err := NewMap(again, "s", str, str, codec.For[int64]())
			if err != nil {
				t.Fatal(err)
			}
			again.SetGroup(r26Group("k"))
			if v, ok := mm.Get("k", uk); !ok || v != 1<<62 {
				t.Fatalf("the map declared as it was reads %d, %v", v, ok)
			}
		})
	}
}
