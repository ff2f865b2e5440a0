package barrier

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// messierStreams is streams plus what an unaligned upstream now sends: a
// barrier followed, later on the same channel, by a cancel marker of the
// same id (the upstream forwarded n overtaking, then declined n).
func messierStreams(rng *rand.Rand, channels, k int) [][]item {
	out := make([][]item, channels)
	for c := range out {
		for id := 1; id <= k; id++ {
			for range rng.IntN(4) {
				out[c] = append(out[c], item{kind: 0})
			}
			switch rng.IntN(8) {
			case 0: // skipped
			case 1:
				out[c] = append(out[c], item{kind: 2, id: checkpoint.ID(id)})
			case 2, 3:
				out[c] = append(out[c], item{kind: 1, id: checkpoint.ID(id)})
				for range rng.IntN(3) {
					out[c] = append(out[c], item{kind: 0})
				}
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

// TestReviewMessierStreams runs driveAll's checks over streams where a
// barrier may be followed by a cancel marker of the same id, with
// savepoints and a final-checkpoint suffix (every id from f on aligns).
// Its failures (unaligned 1204, 2498, 2809, 3508; aligned-timeout 1204)
// all come from the obsolete-barrier drop that obsolete_review_test.go
// pins down.
func TestReviewMessierStreams(t *testing.T) {
	for _, timed := range []bool{false, true} {
		mode, name := Unaligned, "unaligned"
		if timed {
			mode, name = ExactlyOnce, "aligned-timeout"
		}
		for seed := range uint64(4000) {
			t.Run(fmt.Sprintf("%s/%d", name, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 7))
				trng := rand.New(rand.NewPCG(seed, 8))
				channels, k := 1+rng.IntN(4), 1+rng.IntN(7)
				savepoint := map[checkpoint.ID]bool{}
				final := 1 + trng.IntN(k+1)
				for id := 1; id <= k; id++ {
					savepoint[checkpoint.ID(id)] = trng.IntN(5) == 0 || id >= final
				}
				var timeout time.Duration
				var clock *rand.Rand
				if timed {
					timeout, clock = time.Duration(1+trng.IntN(6))*time.Millisecond, trng
				}
				driveAll(t, rng, mode, messierStreams(rng, channels, k), seed%3 == 0, savepoint, timeout, clock)
			})
		}
	}
}
