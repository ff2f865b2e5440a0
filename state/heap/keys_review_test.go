package heap

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
)

var rkBoom atomic.Bool

// rkCodec is int64's codec, which panics on 13 while rkBoom is set.
type rkCodec struct{}

func (rkCodec) Append(dst []byte, v int64) []byte {
	if v == 13 && rkBoom.Load() {
		panic("rkCodec: 13")
	}
	return codec.For[int64]().Append(dst, v)
}

func (rkCodec) Decode(src []byte) (int64, int, error) { return codec.For[int64]().Decode(src) }

// TestAnEncoderPanicLeavesChainsWhole: checkpoint 2's encoding panics
// mid-way (an error now, where it ended the process); checkpoints 3 and 4
// complete; a restore of 4 holds every key's last value. Written by an
// outside review, session 37 (it found nothing here).
func TestAnEncoderPanicLeavesChainsWhole(t *testing.T) {
	for _, aborted := range []bool{false, true} {
		r := keygroup.Range{First: 0, Last: 127}
		b := NewIncremental(r)
		v, err := NewValue[string, int64](b, "v", codec.For[string](), rkCodec{})
		if err != nil {
			t.Fatal(err)
		}
		h := codec.NewHasher(codec.For[string]())
		want := map[string]int64{}
		put := func(k string, x int64) {
			b.SetGroup(keygroup.Of(h.Hash(k), 128))
			v.Put(k, x)
			want[k] = x
		}
		s := newStore()
		for i := range 3000 {
			put(fmt.Sprint("k", i), int64(100+i))
		}
		take(t, b, 1, 0, s)
		b.NotifyComplete(1)
		for i := range 1500 {
			put(fmt.Sprint("k", i), int64(5000+i))
		}
		put("k2999", 13)
		rkBoom.Store(true)
		async, err := b.Snapshot(2)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := async(s); err == nil || !strings.Contains(err.Error(), "rkCodec: 13") {
			t.Fatalf("checkpoint 2: %v, want the codec's panic as its error", err)
		}
		rkBoom.Store(false)
		if aborted {
			b.NotifyAborted(2)
		}
		for i := 1000; i < 2000; i++ {
			put(fmt.Sprint("k", i), int64(9000+i))
		}
		take(t, b, 3, 0, s)
		b.NotifyComplete(3)
		for i := 2500; i < 2600; i++ {
			put(fmt.Sprint("k", i), int64(20000+i))
		}
		hs := take(t, b, 4, 0, s)
		b.NotifyComplete(4)

		b2 := NewIncremental(r)
		if err := b2.Restore(hs, s.read); err != nil {
			t.Fatal(err)
		}
		v2, err := NewValue[string, int64](b2, "v", codec.For[string](), rkCodec{})
		if err != nil {
			t.Fatal(err)
		}
		bad := 0
		for k, x := range want {
			b2.SetGroup(keygroup.Of(h.Hash(k), 128))
			if got, ok := v2.Get(k); !ok || got != x {
				if bad++; bad < 5 {
					t.Errorf("aborted %v: key %s restored as %d (%v), want %d", aborted, k, got, ok, x)
				}
			}
		}
		if bad > 0 {
			t.Errorf("aborted %v: %d of %d keys wrong", aborted, bad, len(want))
		}
	}
}

var _ = checkpoint.ID(0)
