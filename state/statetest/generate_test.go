package statetest

import (
	"flag"
	"testing"

	"github.com/weirstream/weir/internal/racetest"
	"github.com/weirstream/weir/state/backend"
)

var (
	genSeeds = flag.Int("statetest.seeds", 0, "seeds TestGenerate runs for each backend (0: 200 on the heap, 20 on Pebble; under -race 50 and 3)")
	genFirst = flag.Uint64("statetest.first", 1, "the first seed TestGenerate runs")
)

// seeds is how many seeds TestGenerate runs on a backend: Pebble's take
// about 0.3 s each (2.6 s under -race), the heap's a hundredth of that.
func seeds(kind backend.Kind) uint64 {
	switch {
	case *genSeeds > 0:
		return uint64(*genSeeds)
	case kind == backend.Pebble && racetest.Enabled:
		return 3
	case kind == backend.Pebble:
		return 20
	case racetest.Enabled:
		return 50
	}
	return 200
}

// TestGenerate runs Generate's seeds from -statetest.first on each
// backend, incremental and full; Pebble's memtable is 64 KiB, so a seed's
// lists and maps span flushes and compactions.
func TestGenerate(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  func(t *testing.T) backend.Config
	}{
		{"heap", func(*testing.T) backend.Config { return backend.Config{Kind: backend.Heap} }},
		{"heap full", func(*testing.T) backend.Config { return backend.Config{Kind: backend.Heap, Full: true} }},
		{"pebble", func(t *testing.T) backend.Config {
			return backend.Config{Kind: backend.Pebble, Dir: t.TempDir(), MemTableBytes: 64 << 10}
		}},
		{"pebble full", func(t *testing.T) backend.Config {
			return backend.Config{Kind: backend.Pebble, Dir: t.TempDir(), MemTableBytes: 64 << 10, Full: true}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg(t)
			failures := 0
			for seed := *genFirst; seed < *genFirst+seeds(cfg.Kind); seed++ {
				if err := Generate(t, cfg, seed); err != nil {
					t.Error(err)
					if failures++; failures == 3 {
						t.Fatal("stopping after 3 failing seeds")
					}
				}
			}
		})
	}
}
