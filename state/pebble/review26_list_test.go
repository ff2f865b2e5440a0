package pebble

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/operator/operatortest"
)

func r26Group(k string) int { return keygroup.Of(codec.NewHasher(str).Hash(k), 128) }

// newLists declares list name in b and appends two elements to every key
// of the first keys that falls in r.
func r26NewLists(t *testing.T, b *Backend, name string, r keygroup.Range, keys int, tag string) map[string][]string {
	t.Helper()
	l := declareList(t, b, name)
	want := map[string][]string{}
	for i := range keys {
		k := fmt.Sprint("key-", i)
		g := r26Group(k)
		if !r.Contains(g) {
			continue
		}
		b.SetGroup(g)
		for e := range 2 {
			v := fmt.Sprintf("%s%d.%d", tag, i, e)
			l.Add(k, v)
			want[k] = append(want[k], v)
		}
	}
	return want
}

// TestReview26ThreeSubtasksMixedFormats: a checkpoint of three subtasks
// whose databases are of either format in every combination, restored at
// parallelism 1 and 2 (every subtask's database opened first in some
// case), reads every list whole; then a checkpoint of the result restores
// at parallelism 3 again with the mark.
func TestReview26ThreeSubtasksMixedFormats(t *testing.T) {
	olds := []keygroup.Range{{First: 0, Last: 42}, {First: 43, Last: 85}, {First: 86, Last: 127}}
	news := [][]keygroup.Range{{all}, {{First: 0, Last: 63}, {First: 64, Last: 127}}, {{First: 0, Last: 20}, {First: 21, Last: 100}, {First: 101, Last: 127}}}
	for mask := range 8 {
		t.Run(fmt.Sprintf("old-format mask %03b", mask), func(t *testing.T) {
			w := &operatortest.MemWriter{}
			want := map[string][]string{}
			var hs []checkpoint.Handle
			for i, r := range olds {
				b := backendOf(t, r, nil, w)
				var got map[string][]string
				if mask&(1<<i) != 0 {
					got = oldLists(t, b, "l", r, 600)
				} else {
					got = r26NewLists(t, b, "l", r, 600, "n")
				}
				for k, vs := range got {
					want[k] = vs
				}
				hs = append(hs, checkpointOf(t, b, 1, w)...)
			}
			for _, rs := range news {
				var hs2 []checkpoint.Handle
				for _, r := range rs {
					b := backendOf(t, r, hs, w)
					l := declareList(t, b, "l")
					mine := map[string][]string{}
					for k, vs := range want {
						if r.Contains(r26Group(k)) {
							mine[k] = vs
						}
					}
					checkLists(t, b, l, mine)
					hs2 = append(hs2, checkpointOf(t, b, 2, w)...)
				}
				for _, r := range olds {
					b := backendOf(t, r, hs2, w)
					if k := b.kinds["l"]; k != kindList {
						t.Fatalf("restored from %d subtasks that all declared the list, subtask %v has kind %q", len(rs), r, k)
					}
				}
			}
		})
	}
}

// r26Nothing encodes struct{} as no bytes.
type r26Nothing struct{}

func (r26Nothing) Append(dst []byte, _ struct{}) []byte { return dst }
func (r26Nothing) Decode([]byte) (struct{}, int, error) { return struct{}{}, 0, nil }

// TestReview26EmptyElements: elements that encode as no bytes count, through Add, Update, a flush and a restore, and from
// an old-format database whose element values are empty.
func TestReview26EmptyElements(t *testing.T) {
	w := &operatortest.MemWriter{}
	b := backendOf(t, all, nil, w)
	var e codec.Codec[struct{}] = r26Nothing{}
	l, err := NewList(b, "e", str, e)
	if err != nil {
		t.Fatal(err)
	}
	b.SetGroup(r26Group("a"))
	l.Add("a", struct{}{})
	l.Add("a", struct{}{})
	checkpointOf(t, b, 1, w)
	l.Add("a", struct{}{})
	if n := len(l.Get("a")); n != 3 {
		t.Fatalf("3 empty elements added, Get has %d", n)
	}
	b.SetGroup(r26Group("b"))
	l.Update("b", []struct{}{{}, {}})
	if n := len(l.Get("b")); n != 2 {
		t.Fatalf("Update with 2 empty elements, Get has %d", n)
	}
	// An old-format table of empty elements.
	id, err := b.table("olde")
	if err != nil {
		t.Fatal(err)
	}
	tb := &table{b: b, id: id}
	b.SetGroup(r26Group("c"))
	for s := range uint64(4) {
		key := append(prefixAt(tb, r26Group("c"), str, "c"), 0, 0, 0, 0, 0, 0, 0, byte(s))
		if err := b.db.Set(key, e.Append(nil, struct{}{}), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	r := backendOf(t, all, checkpointOf(t, b, 2, w), w)
	rl, err := NewList(r, "e", str, e)
	if err != nil {
		t.Fatal(err)
	}
	ol, err := NewList(r, "olde", str, e)
	if err != nil {
		t.Fatal(err)
	}
	for k, n := range map[string]int{"a": 3, "b": 2} {
		r.SetGroup(r26Group(k))
		if got := len(rl.Get(k)); got != n {
			t.Fatalf("restored %s: %d elements, want %d", k, got, n)
		}
	}
	r.SetGroup(r26Group("c"))
	if got := len(ol.Get("c")); got != 4 {
		t.Fatalf("old-format list of 4 empty elements: %d after the rewrite", got)
	}
}

// TestReview26WriteWhileIterating: as window.go does, a list is iterated
// while the same key and other keys are added to, updated and deleted;
// the iteration sees the list as it was when it began, and the writes
// all land.
func TestReview26WriteWhileIterating(t *testing.T) {
	w := &operatortest.MemWriter{}
	b := backendOf(t, all, nil, w)
	l := declareList(t, b, "l")
	b.SetGroup(9)
	for i := range 50 {
		l.Add("p1", fmt.Sprint(i))
	}
	checkpointOf(t, b, 1, w) // half in a data file
	for i := 50; i < 100; i++ {
		l.Add("p1", fmt.Sprint(i))
	}
	var seen []string
	for v := range l.All("p1") {
		seen = append(seen, v)
		l.Add("p2", v)
		l.Add("p1", "x"+v)
		if v == "10" {
			l.Delete("p1")
		}
		if v == "20" {
			l.Update("p1", []string{"u"})
		}
	}
	if len(seen) != 100 || seen[0] != "0" || seen[99] != "99" {
		t.Fatalf("iteration saw %d elements: %v…", len(seen), seen[:min(len(seen), 5)])
	}
	p1 := l.Get("p1")
	if len(p1) != 80 || p1[0] != "u" || p1[1] != "x21" || p1[79] != "x99" {
		t.Fatalf("p1 after the loop: %d elements %v…", len(p1), p1[:min(len(p1), 3)])
	}
	if p2 := l.Get("p2"); !slices.Equal(p2, seen) {
		t.Fatalf("p2 = %d elements, want the 100 seen", len(p2))
	}
}

// TestReview26ValueRedeclaredAsList: a table written as value state in one
// run and declared as list state in the next (a job changed state kind
// under the same name). The error, if any, should say so, not that the
// checkpoint is damaged; silently reading values as lists is worse.
func TestReview26ValueRedeclaredAsList(t *testing.T) {
	w := &operatortest.MemWriter{}
	b := backendOf(t, all, nil, w)
	v, err := NewValue(b, "s", str, str)
	if err != nil {
		t.Fatal(err)
	}
	b.SetGroup(r26Group("k"))
	v.Put("k", strings.Repeat("z", 300)) // 'z' = 122: a uvarint 122, then 122 bytes…
	r := backendOf(t, all, checkpointOf(t, b, 1, w), w)
	l, err := NewList(r, "s", str, str)
	if errors.Is(err, checkpoint.ErrMismatch) {
		t.Logf("NewList: %v", err)
		return
	} else if err != nil {
		t.Fatalf("NewList fails, but not as a checkpoint that does not fit the job: %v", err)
	}
	r.SetGroup(r26Group("k"))
	var got []string
	var panicked any
	func() {
		defer func() { panicked = recover() }()
		got = l.Get("k")
	}()
	t.Errorf("a value table declared as a list: NewList succeeded; Get = %d elements %.40q, panic = %v", len(got), got, panicked)
}

// TestReview26MapRedeclaredAsList: a job's next version declares list
// state under the name of an earlier map state (a change of state kind,
// which the job should be told about plainly). NewList's rewrite of
// "old-format" lists takes the map's entries for list elements:
//   - user keys whose encoding is 8 bytes (a 7-character string) become
//     the list's elements, silently, and the map's entries are deleted;
//   - other user keys fail NewList with checkpoint.ErrStateDamaged, the
//     error the runtime takes for proven damage of the restored checkpoint
//     (runtime.DamagedState): it discards that checkpoint and the ones
//     after it and falls back to an older one (internal/runtime/job.go),
//     which fails the same way, so a code change the user could revert
//     deletes the retained checkpoints.
func TestReview26MapRedeclaredAsList(t *testing.T) {
	for _, uk := range []string{"seven-7", "a-longer-key"} {
		t.Run(fmt.Sprintf("user key of %d bytes", len(uk)), func(t *testing.T) {
			w := &operatortest.MemWriter{}
			b := backendOf(t, all, nil, w)
			m, err := NewMap(b, "s", str, str, str)
			if err != nil {
				t.Fatal(err)
			}
			b.SetGroup(r26Group("k"))
			m.Put("k", uk, "value")
			r := backendOf(t, all, checkpointOf(t, b, 1, w), w)
			l, err := NewList(r, "s", str, str)
			switch {
			case errors.Is(err, checkpoint.ErrStateDamaged):
				t.Errorf("NewList of a map table fails as damaged state (the runtime discards the checkpoint and falls back): %v", err)
			case errors.Is(err, checkpoint.ErrMismatch):
				t.Logf("NewList: %v", err)
			case err != nil:
				t.Errorf("NewList fails, but not as a checkpoint that does not fit the job: %v", err)
			default:
				r.SetGroup(r26Group("k"))
				t.Errorf("NewList of a map table succeeded; the map's entry is now list %q", l.Get("k"))
			}
		})
	}
}
