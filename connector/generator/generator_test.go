package generator

import (
	"slices"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

type ints []int64

func (s *ints) Collect(v int64) { *s = append(*s, v) }

func ctx(sub, p int, r *operator.Restore, now func() time.Time) *operator.Context {
	return &operator.Context{UID: "gen", Subtask: sub, Parallelism: p, Restore: r, Now: now}
}

// TestReplayAfterRestore: two subtasks produce part of the records,
// snapshot, and three restored subtasks produce the rest: every record once.
func TestReplayAfterRestore(t *testing.T) {
	newReader, err := New(Config[int64]{Count: 1000, Make: func(i int64) int64 { return i }, BatchSize: 50})
	if err != nil {
		t.Fatal(err)
	}
	var got ints
	mem := &operatortest.MemWriter{}
	var hs []checkpoint.Handle
	for sub := range 2 {
		r := newReader()
		r.Open(ctx(sub, 2, nil, time.Now))
		r.Read(&got)
		r.Read(&got)
		async, _ := r.Snapshot(1)
		h, err := async(mem)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h...)
	}
	for sub := range 3 {
		r := newReader()
		if err := r.Open(ctx(sub, 3, &operator.Restore{Handles: hs, Read: mem.Read}, time.Now)); err != nil {
			t.Fatal(err)
		}
		for {
			res, err := r.Read(&got)
			if err != nil {
				t.Fatal(err)
			}
			if res.Exhausted {
				break
			}
		}
	}
	slices.Sort(got)
	if len(got) != 1000 || got[0] != 0 || got[999] != 999 || len(slices.Compact(slices.Clone(got))) != 1000 {
		t.Fatalf("got %d records", len(got))
	}
}

func TestRateLimit(t *testing.T) {
	now := time.Unix(0, 0)
	newReader, _ := New(Config[int64]{RatePerSecond: 100, Make: func(i int64) int64 { return i }})
	r := newReader()
	r.Open(ctx(0, 1, nil, func() time.Time { return now }))
	var got ints
	r.Read(&got)
	res, _ := r.Read(&got)
	if len(got) != 1 || res.IdleUntil.IsZero() {
		t.Fatalf("at time 0: %d records, idle until %v", len(got), res.IdleUntil)
	}
	now = now.Add(time.Second)
	r.Read(&got)
	if len(got) != 101 {
		t.Fatalf("after one second at 100/s: %d records, want 101", len(got))
	}
}

func TestInvalidConfig(t *testing.T) {
	if _, err := New(Config[int64]{Count: -1, Make: func(i int64) int64 { return i }}); err == nil {
		t.Fatal("negative count accepted")
	}
	if _, err := New(Config[int64]{}); err == nil {
		t.Fatal("missing Make accepted")
	}
}
