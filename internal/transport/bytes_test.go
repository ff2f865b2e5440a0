package transport

import (
	"context"
	"testing"

	"github.com/weirstream/weir/internal/runtime"
)

// TestChannelsCountTheirBytes: each end of a channel counts the bytes of
// its events' frames, forced and overtaking ones too: what the sender
// sent is what the receiver received once it took them, at least the
// records' bytes, and another channel's frames (and credits, keep-alives)
// are not its.
func TestChannelsCountTheirBytes(t *testing.T) {
	a, b := pair(t)
	ready, otherReady := make(chan struct{}, 1), make(chan struct{}, 1)
	in, err := b.Input(7, strings_, 4, ready)
	if err != nil {
		t.Fatal(err)
	}
	other, err := b.Input(8, strings_, 4, otherReady)
	if err != nil {
		t.Fatal(err)
	}
	out, err := a.Output(7, strings_)
	if err != nil {
		t.Fatal(err)
	}
	otherOut, err := a.Output(8, strings_)
	if err != nil {
		t.Fatal(err)
	}
	if out.Bytes() != 0 || in.Bytes() != 0 {
		t.Fatalf("before any event: sent %d bytes, received %d", out.Bytes(), in.Bytes())
	}
	ctx := context.Background()
	records := 0
	for i := range 3 {
		batch := []string{"a record of some length", "another"}
		records += len(batch[0]) + len(batch[1])
		if err := out.Push(ctx, runtime.Event{Kind: runtime.KindBatch, Batch: batch}); err != nil {
			t.Fatal(err)
		}
		pop(t, in, ready)
		if i == 0 {
			if err := otherOut.Push(ctx, runtime.Event{Kind: runtime.KindBatch, Batch: []string{"not channel 7's"}}); err != nil {
				t.Fatal(err)
			}
			pop(t, other, otherReady)
		}
	}
	if err := out.ForcePush(runtime.Event{Kind: runtime.KindWatermark, Time: 5}); err != nil {
		t.Fatal(err)
	}
	pop(t, in, ready)
	if err := out.Overtake(runtime.Event{Kind: runtime.KindBarrier, ID: 1, Priority: true}, runtime.Event{}); err != nil {
		t.Fatal(err)
	}
	pop(t, in, ready)
	if out.Bytes() != in.Bytes() || out.Bytes() < int64(records) {
		t.Fatalf("channel 7 sent %d bytes and received %d, want the same, at least the records' %d", out.Bytes(), in.Bytes(), records)
	}
	if otherOut.Bytes() != other.Bytes() || other.Bytes() < int64(len("not channel 7's")) {
		t.Fatalf("channel 8 sent %d bytes and received %d", otherOut.Bytes(), other.Bytes())
	}
}
