package statetest

import (
	"testing"

	"github.com/weirstream/weir/state/backend"
)

func TestHeap(t *testing.T) { Run(t, backend.Config{Kind: backend.Heap}) }

func TestPebble(t *testing.T) {
	Run(t, backend.Config{Kind: backend.Pebble, Dir: t.TempDir()})
}

func TestPebbleFullCheckpoints(t *testing.T) {
	Run(t, backend.Config{Kind: backend.Pebble, Dir: t.TempDir(), Full: true})
}

func TestHeapFullCheckpoints(t *testing.T) {
	Run(t, backend.Config{Kind: backend.Heap, Full: true})
}
