package pebble_test

import (
	"testing"

	"github.com/weirstream/weir/state/backend"
	"github.com/weirstream/weir/state/pebble"
	"github.com/weirstream/weir/state/statetest"
)

// TestGenerateCatchesReversedMerges: with a key's older merge operands
// joined in the wrong order (a list's elements, appended as merges, then
// out of order when read before a compaction joins them), statetest's
// generator finds a wrong list within a few seeds.
func TestGenerateCatchesReversedMerges(t *testing.T) {
	pebble.PlantOlderOperandsReversed(t)
	cfg := backend.Config{Kind: backend.Pebble, Dir: t.TempDir(), MemTableBytes: 64 << 10}
	for seed := uint64(1); seed <= 20; seed++ {
		if err := statetest.Generate(t, cfg, seed); err != nil {
			t.Logf("found: %v", err)
			return
		}
	}
	t.Fatal("the planted defect survived 20 seeds")
}
