package barrier

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/weirstream/weir/checkpoint"
)

type item struct {
	kind int // 0 record, 1 barrier, 2 cancel
	id   checkpoint.ID
}

// streams builds, per channel, a FIFO of records and barriers 1..k. With
// messy set, upstreams sometimes skip a barrier or send a cancel marker
// instead, as a declining upstream does.
func streams(rng *rand.Rand, channels, k int, messy bool) [][]item {
	out := make([][]item, channels)
	for c := range out {
		for id := 1; id <= k; id++ {
			for range rng.IntN(4) {
				out[c] = append(out[c], item{kind: 0})
			}
			switch {
			case messy && rng.IntN(6) == 0:
				// skipped
			case messy && rng.IntN(6) == 0:
				out[c] = append(out[c], item{kind: 2, id: checkpoint.ID(id)})
			default:
				out[c] = append(out[c], item{kind: 1, id: checkpoint.ID(id)})
			}
		}
		for range rng.IntN(3) {
			out[c] = append(out[c], item{kind: 0})
		}
	}
	return out
}

// drive feeds the streams to an aligner in a random order that respects
// Blocked, and checks what every snapshot must satisfy:
//   - snapshot ids strictly increase;
//   - at snapshot n, every channel has delivered barrier n or ended, and
//     in exactly-once mode none has been read past it;
//   - exactly-once: no record was read from a channel after its barrier n
//     and before snapshot n;
//   - the aligner never deadlocks: some channel is readable until all input
//     is read, then EndOfInput comes exactly once and nothing stays blocked.
func drive(t *testing.T, rng *rand.Rand, mode Mode, in [][]item) []checkpoint.ID {
	t.Helper()
	a := New(mode, len(in))
	pos := make([]int, len(in))
	ended := make([]bool, len(in))
	lastBarrier := make([]checkpoint.ID, len(in))
	readAfter := make([]int, len(in)) // records read since this channel's last barrier
	delivered := make([]map[checkpoint.ID]bool, len(in))
	for c := range delivered {
		delivered[c] = map[checkpoint.ID]bool{}
	}
	var snaps []checkpoint.ID
	ends := 0
	check := func(acts []Action) {
		for _, x := range acts {
			switch x := x.(type) {
			case Snapshot:
				if n := len(snaps); n > 0 && snaps[n-1] >= x.ID {
					t.Fatalf("snapshot %d after snapshot %d", x.ID, snaps[n-1])
				}
				snaps = append(snaps, x.ID)
				for c := range in {
					if ended[c] {
						continue
					}
					if !delivered[c][x.ID] {
						t.Fatalf("snapshot %d, but channel %d has not delivered barrier %d", x.ID, c, x.ID)
					}
					if mode == ExactlyOnce && lastBarrier[c] != x.ID {
						t.Fatalf("snapshot %d, but channel %d was read up to barrier %d", x.ID, c, lastBarrier[c])
					}
					if mode == ExactlyOnce && readAfter[c] > 0 {
						t.Fatalf("snapshot %d after %d records read from channel %d past its barrier", x.ID, readAfter[c], c)
					}
				}
			case EndOfInput:
				ends++
			}
		}
	}
	for {
		var ready []int
		for c := range in {
			if !ended[c] && !a.Blocked(c) {
				ready = append(ready, c)
			}
		}
		if len(ready) == 0 {
			break
		}
		c := ready[rng.IntN(len(ready))]
		if pos[c] == len(in[c]) {
			ended[c] = true
			check(a.OnEndOfInput(c))
			continue
		}
		it := in[c][pos[c]]
		pos[c]++
		switch it.kind {
		case 0:
			readAfter[c]++
		case 1:
			lastBarrier[c], readAfter[c] = it.id, 0
			delivered[c][it.id] = true
			check(a.OnBarrier(c, it.id))
		case 2:
			check(a.OnCancel(c, it.id))
		}
	}
	for c := range in {
		if !ended[c] {
			t.Fatalf("deadlock: channel %d blocked with %d of %d events read", c, pos[c], len(in[c]))
		}
	}
	if ends != 1 {
		t.Fatalf("end-of-input %d times", ends)
	}
	return snaps
}

func TestAlignerProperties(t *testing.T) {
	for _, mode := range []Mode{ExactlyOnce, AtLeastOnce} {
		for seed := range uint64(3000) {
			t.Run(fmt.Sprintf("%v/%d", mode, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 1))
				channels, k := 1+rng.IntN(4), 1+rng.IntN(6)
				messy := seed%2 == 1
				snaps := drive(t, rng, mode, streams(rng, channels, k, messy))
				if messy {
					return
				}
				// Reference model for clean streams: every barrier arrives on
				// every channel, so every checkpoint is taken, in order.
				want := make([]checkpoint.ID, k)
				for i := range want {
					want[i] = checkpoint.ID(i + 1)
				}
				// At-least-once may subsume a checkpoint whose last barrier
				// came after the next one's had completed on every channel;
				// with FIFO channels that cannot happen, so both modes match.
				if !slices.Equal(snaps, want) {
					t.Fatalf("snapshots %v, want %v", snaps, want)
				}
			})
		}
	}
}
