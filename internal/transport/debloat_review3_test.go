package transport

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/runtime"
)

// Review 3 (held up): a sender that pushes with credits, forces events
// without (as an elastic emitter: at most MaxForced until it has room
// again) and sends overtaking barriers with tails, against a receiver that
// resizes its window at random between pops and promotes barriers: the
// connection never fails (no event beyond the granted window), nothing
// stalls, and every batch arrives once, in order.
func TestSetCapacityRacesForcedAndOvertaking_review3(t *testing.T) {
	const capacity, batches = 8, 20000
	a, b := pair(t)
	out, in, ready := openChannel(t, a, b, capacity)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	sendErr := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(seed, 1))
		forced, id := 0, 0
		for i := 0; i < batches; i++ {
			e := batchOf(string(rune('a' + i%26)))
			e.Batch = []string{itoa(i)}
			if rng.IntN(200) == 0 && i+1 < batches {
				id++
				tail := runtime.Event{Kind: runtime.KindBatch, Batch: []string{itoa(i)}}
				if err := out.Overtake(runtime.Event{Kind: runtime.KindBarrier, ID: checkpoint.ID(id)}, tail); err != nil {
					sendErr <- err
					return
				}
				continue
			}
			if out.HasRoom() {
				forced = 0
			}
			ok, err := out.TryPush(e)
			if err != nil {
				sendErr <- err
				return
			}
			if ok {
				continue
			}
			if forced < runtime.MaxForced && rng.IntN(2) == 0 {
				forced++
				if err := out.ForcePush(e); err != nil {
					sendErr <- err
					return
				}
				continue
			}
			if err := out.Push(t.Context(), e); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- nil
	}()
	rng := rand.New(rand.NewPCG(seed, 2))
	next := 0
	deadline := time.After(60 * time.Second)
	for next < batches {
		if rng.IntN(4) == 0 {
			in.SetCapacity(1 + rng.IntN(capacity+2))
		}
		if rng.IntN(50) == 0 {
			in.Promote(time.Now().UnixNano())
		}
		e, ok := in.TryPop()
		if !ok {
			select {
			case <-ready:
			case <-b.Done():
				t.Fatalf("receiver's connection failed after %d batches: %v", next, b.Err())
			case <-a.Done():
				t.Fatalf("sender's connection failed after %d batches: %v", next, a.Err())
			case <-deadline:
				t.Fatalf("stalled after %d batches", next)
			}
			continue
		}
		if e.Kind != runtime.KindBatch {
			continue
		}
		if got := e.Batch.([]string)[0]; got != itoa(next) {
			t.Fatalf("batch %s arrived where %d was due", got, next)
		}
		next++
	}
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
}

func itoa(i int) string {
	const digits = "0123456789"
	if i == 0 {
		return "0"
	}
	var s []byte
	for ; i > 0; i /= 10 {
		s = append([]byte{digits[i%10]}, s...)
	}
	return string(s)
}
