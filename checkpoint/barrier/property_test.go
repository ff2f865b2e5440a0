package barrier

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

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
//   - at an aligned snapshot n, every channel has delivered barrier n, and
//     in exactly-once mode none has been read past it;
//   - exactly-once: no record was read from a channel after its barrier n
//     and before snapshot n;
//   - no alignment ends silently: each ends with its snapshot, a decline, a
//     forwarded cancel marker or the coordinator's abort of it, and an abort
//     ends only the checkpoint it names;
//   - the aligner never deadlocks: when every readable channel is drained
//     but some are blocked, the coordinator's abort (a timeout) releases
//     them, and in the end every event is read.
//
// With aborts set, the coordinator also aborts random checkpoints.
//
// With unaligned checkpoints (Unaligned mode, or a timeout in exactly-once
// mode, when time moves at random, drawn from trng, and Tick is called),
// it checks too:
//   - an unaligned snapshot n persists exactly the channels that have not
//     delivered barrier n yet;
//   - the persistence of channel c for n ends only when barrier n comes on
//     c, or when n ends here in the same call (decline, cancel marker,
//     abort), and never silently;
//   - at ChannelStateComplete n, on every channel, the records read before
//     snapshot n plus those persisted for n are exactly the records that
//     preceded barrier n: a consistent cut;
//   - Unaligned mode snapshots a checkpoint on its first barrier; a
//     timeout switches a checkpoint only on Tick, only once its alignment
//     has lasted longer than the timeout; savepoints (fed with
//     OnAlignedBarrier) are never unaligned.
//
// It returns the snapshots, and the checkpoints whose channel state
// completed.
func drive(t *testing.T, rng *rand.Rand, mode Mode, in [][]item, aborts bool) []checkpoint.ID {
	t.Helper()
	snaps, _ := driveAll(t, rng, mode, in, aborts, nil, 0, nil)
	return snaps
}

func driveAll(t *testing.T, rng *rand.Rand, mode Mode, in [][]item, aborts bool, savepoint map[checkpoint.ID]bool, timeout time.Duration, trng *rand.Rand) (snaps, completeCS []checkpoint.ID) {
	t.Helper()
	var opts []Option
	if timeout > 0 {
		opts = append(opts, AlignedTimeout(timeout))
	}
	a := New(mode, len(in), opts...)
	pos := make([]int, len(in))
	lastBarrier := make([]checkpoint.ID, len(in))
	readAfter := make([]int, len(in)) // records read since this channel's last barrier
	delivered := make([]map[checkpoint.ID]bool, len(in))
	for c := range delivered {
		delivered[c] = map[checkpoint.ID]bool{}
	}
	// precede[c][id] counts the records that precede barrier id on c.
	precede := make([]map[checkpoint.ID]int, len(in))
	for c, items := range in {
		precede[c] = map[checkpoint.ID]int{}
		n := 0
		for _, it := range items {
			switch it.kind {
			case 0:
				n++
			case 1:
				precede[c][it.id] = n
			}
		}
	}
	now := time.Unix(0, 0)
	read := make([]int, len(in))                // records read per channel
	snapRead := map[checkpoint.ID][]int{}       // read at unaligned snapshot n
	persisting := map[checkpoint.ID][]bool{}    // channels persisting for n
	persisted := map[checkpoint.ID][]int{}      // records persisted for n, per channel
	alignStart := map[checkpoint.ID]time.Time{} // when n's alignment started
	barriers := map[checkpoint.ID]int{}         // barriers of n read so far
	aligning := map[checkpoint.ID]bool{}
	// step runs one call of the aligner and checks its actions; aborted is
	// the id the coordinator aborted in this call, if any; barrierCh the
	// channel whose barrier it handles (-1: none); tick: it is a Tick.
	step := func(aborted checkpoint.ID, barrierCh int, tick bool, call func() []Action) {
		before, beforeP := a.Aligning(), a.Persisting()
		acts := call()
		ended := map[checkpoint.ID]bool{aborted: aborted != 0}
		for _, x := range acts {
			switch x := x.(type) {
			case Decline:
				ended[x.ID] = true
			case ForwardCancel:
				ended[x.ID] = true
			}
		}
		var unaligned []checkpoint.ID
		for _, x := range acts {
			switch x := x.(type) {
			case Snapshot:
				ended[x.ID] = true
				if n := len(snaps); n > 0 && snaps[n-1] >= x.ID {
					t.Fatalf("snapshot %d after snapshot %d", x.ID, snaps[n-1])
				}
				snaps = append(snaps, x.ID)
				if x.Unaligned {
					switch {
					case savepoint[x.ID]:
						t.Fatalf("savepoint %d snapshotted unaligned", x.ID)
					case mode == Unaligned && (tick || barriers[x.ID] != 1):
						t.Fatalf("unaligned snapshot %d not on its first barrier (tick %v, %d barriers)", x.ID, tick, barriers[x.ID])
					case mode == ExactlyOnce && (!tick || timeout == 0 || now.Sub(alignStart[x.ID]) <= timeout):
						t.Fatalf("checkpoint %d switched to unaligned at %v (tick %v); its alignment started at %v, timeout %v", x.ID, now, tick, alignStart[x.ID], timeout)
					case mode == AtLeastOnce:
						t.Fatalf("unaligned snapshot %d in at-least-once mode", x.ID)
					}
					unaligned = append(unaligned, x.ID)
					snapRead[x.ID] = slices.Clone(read)
					persisting[x.ID] = make([]bool, len(in))
					persisted[x.ID] = make([]int, len(in))
					continue
				}
				for c := range in {
					if !delivered[c][x.ID] {
						t.Fatalf("snapshot %d, but channel %d has not delivered barrier %d", x.ID, c, x.ID)
					}
					if mode != AtLeastOnce && lastBarrier[c] != x.ID {
						t.Fatalf("snapshot %d, but channel %d was read up to barrier %d", x.ID, c, lastBarrier[c])
					}
					if mode != AtLeastOnce && readAfter[c] > 0 {
						t.Fatalf("snapshot %d after %d records read from channel %d past its barrier", x.ID, readAfter[c], c)
					}
				}
			case Forward:
				if x.Overtake != slices.Contains(unaligned, x.ID) {
					t.Fatalf("forward %d overtaking %v after an unaligned snapshot %v", x.ID, x.Overtake, unaligned)
				}
			case PersistInput:
				p, ok := persisting[x.ID]
				switch {
				case !ok || !slices.Contains(unaligned, x.ID):
					t.Fatalf("%v, not with its unaligned snapshot", x)
				case delivered[x.Channel][x.ID]:
					t.Fatalf("%v, but channel %d delivered barrier %d", x, x.Channel, x.ID)
				case p[x.Channel]:
					t.Fatalf("%v twice", x)
				}
				p[x.Channel] = true
			case EndPersist:
				p, ok := persisting[x.ID]
				switch {
				case !ok || !p[x.Channel]:
					t.Fatalf("%v, but it does not persist", x)
				case !ended[x.ID] && (barrierCh != x.Channel || lastBarrier[x.Channel] != x.ID):
					t.Fatalf("%v before its barrier came, and %d goes on (actions %v)", x, x.ID, acts)
				}
				p[x.Channel] = false
			case ChannelStateComplete:
				p, ok := persisting[x.ID]
				if !ok {
					t.Fatalf("%v without an unaligned snapshot", x)
				}
				for c := range in {
					if p[c] {
						t.Fatalf("%v, but channel %d still persists", x, c)
					}
					if !delivered[c][x.ID] {
						t.Fatalf("%v, but channel %d has not delivered barrier %d", x, c, x.ID)
					}
					if got, want := snapRead[x.ID][c]+persisted[x.ID][c], precede[c][x.ID]; got != want {
						t.Fatalf("inconsistent cut: checkpoint %d, channel %d: %d records read before the snapshot, %d persisted, but %d precede barrier %d",
							x.ID, c, snapRead[x.ID][c], persisted[x.ID][c], want, x.ID)
					}
				}
				completeCS = append(completeCS, x.ID)
				delete(persisting, x.ID)
			}
		}
		for _, id := range unaligned {
			if p, ok := persisting[id]; ok {
				for c := range in {
					if !delivered[c][id] && !p[c] && !ended[id] {
						t.Fatalf("unaligned snapshot %d does not persist channel %d, which has not delivered its barrier", id, c)
					}
				}
			}
		}
		after, afterP := a.Aligning(), a.Persisting()
		for _, id := range before {
			if !slices.Contains(after, id) && !ended[id] {
				t.Fatalf("the alignment of %d ended silently (actions %v)", id, acts)
			}
			if aborted != 0 && id != aborted && !slices.Contains(after, id) && !slices.ContainsFunc(acts, func(x Action) bool { _, snap := x.(Snapshot); return snap }) {
				t.Fatalf("the abort of %d ended the alignment of %d too", aborted, id)
			}
		}
		for _, id := range beforeP {
			if !slices.Contains(afterP, id) && !ended[id] && !slices.Contains(completeCS, id) {
				t.Fatalf("the persistence of %d ended silently (actions %v)", id, acts)
			}
		}
		for id, p := range persisting {
			if !slices.Contains(afterP, id) && slices.Contains(p, true) {
				t.Fatalf("checkpoint %d no longer persists, but channels %v were not ended", id, p)
			}
			if !slices.Contains(afterP, id) {
				delete(persisting, id)
			}
		}
		for _, id := range after {
			if !aligning[id] {
				alignStart[id] = now
			}
			aligning[id] = true
		}
	}
	for {
		if aborts && rng.IntN(8) == 0 {
			id := checkpoint.ID(1 + rng.IntN(8))
			step(id, -1, false, func() []Action { return a.Abort(id) })
		}
		if trng != nil && trng.IntN(3) == 0 {
			now = now.Add(time.Duration(trng.IntN(4)) * time.Millisecond)
			step(0, -1, true, func() []Action { return a.Tick(now) })
		}
		var ready, stuck []int
		for c := range in {
			switch {
			case pos[c] == len(in[c]):
			case a.Blocked(c):
				stuck = append(stuck, c)
			default:
				ready = append(ready, c)
			}
		}
		if len(ready) == 0 {
			if len(stuck) == 0 {
				break
			}
			// The aligned checkpoint can never complete: the coordinator
			// times it out.
			ids := a.Aligning()
			if len(ids) == 0 {
				t.Fatalf("deadlock: channels %v blocked while nothing aligns", stuck)
			}
			step(ids[0], -1, false, func() []Action { return a.Abort(ids[0]) })
			if slices.ContainsFunc(stuck, a.Blocked) {
				t.Fatalf("channels %v stay blocked after the abort of %d", stuck, ids[0])
			}
			continue
		}
		c := ready[rng.IntN(len(ready))]
		it := in[c][pos[c]]
		pos[c]++
		switch it.kind {
		case 0:
			readAfter[c]++
			read[c]++
			for id, p := range persisting {
				if p[c] {
					persisted[id][c]++
				}
			}
		case 1:
			lastBarrier[c], readAfter[c] = it.id, 0
			delivered[c][it.id] = true
			barriers[it.id]++
			if savepoint[it.id] {
				step(0, c, false, func() []Action { return a.OnAlignedBarrier(c, it.id) })
			} else {
				step(0, c, false, func() []Action { return a.OnBarrier(c, it.id) })
			}
		case 2:
			step(0, -1, false, func() []Action { return a.OnCancel(c, it.id) })
		}
	}
	return snaps, completeCS
}

func TestAlignerProperties(t *testing.T) {
	for _, mode := range []Mode{ExactlyOnce, AtLeastOnce} {
		for seed := range uint64(3000) {
			t.Run(fmt.Sprintf("%v/%d", mode, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 1))
				channels, k := 1+rng.IntN(4), 1+rng.IntN(6)
				messy := seed%2 == 1
				aborts := seed%4 == 3
				snaps := drive(t, rng, mode, streams(rng, channels, k, messy), aborts)
				if messy || aborts {
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

// TestAlignerUnalignedProperties runs drive's checks over unaligned
// checkpoints: Unaligned mode, and exactly-once with an aligned timeout,
// with savepoints among the checkpoints. Their own random stream draws the
// time and the savepoints.
func TestAlignerUnalignedProperties(t *testing.T) {
	for _, timed := range []bool{false, true} {
		mode, name := Unaligned, "unaligned"
		if timed {
			mode, name = ExactlyOnce, "aligned-timeout"
		}
		for seed := range uint64(3000) {
			t.Run(fmt.Sprintf("%s/%d", name, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 1))
				trng := rand.New(rand.NewPCG(seed, 2))
				channels, k := 1+rng.IntN(4), 1+rng.IntN(6)
				messy := seed%2 == 1
				aborts := seed%4 == 3
				savepoint := map[checkpoint.ID]bool{}
				if seed%3 == 0 {
					for id := 1; id <= k; id++ {
						savepoint[checkpoint.ID(id)] = trng.IntN(3) == 0
					}
				}
				var timeout time.Duration
				var clock *rand.Rand
				if timed {
					timeout, clock = time.Duration(1+trng.IntN(6))*time.Millisecond, trng
				}
				snaps, complete := driveAll(t, rng, mode, streams(rng, channels, k, messy), aborts, savepoint, timeout, clock)
				if messy || aborts {
					return
				}
				// Clean streams: every checkpoint is taken, in order, and
				// every unaligned one's channel state completes.
				want := make([]checkpoint.ID, k)
				for i := range want {
					want[i] = checkpoint.ID(i + 1)
				}
				if !slices.Equal(snaps, want) {
					t.Fatalf("snapshots %v, want %v", snaps, want)
				}
				if !timed {
					var wantCS []checkpoint.ID
					for _, id := range want {
						if !savepoint[id] {
							wantCS = append(wantCS, id)
						}
					}
					if !slices.Equal(complete, wantCS) {
						t.Fatalf("channel state complete for %v, want %v", complete, wantCS)
					}
				}
			})
		}
	}
}
