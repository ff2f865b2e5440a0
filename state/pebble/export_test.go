package pebble

import (
	"io"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// PlantOlderOperandsReversed makes databases opened until the test ends
// merge a key's older operands in the wrong order: a planted defect that
// Generate must find.
func PlantOlderOperandsReversed(t *testing.T) {
	merger = &pebble.Merger{
		Name: concatenate.Name,
		Merge: func(_, value []byte) (pebble.ValueMerger, error) {
			return &reversed{concatMerger{newer: append([]byte(nil), value...)}}, nil
		},
	}
	t.Cleanup(func() { merger = concatenate })
}

type reversed struct{ concatMerger }

func (m *reversed) Finish(bool) ([]byte, io.Closer, error) {
	var out []byte
	start := 0
	for _, end := range m.ends { // oldest last, put first
		out = append(out, m.older[start:end]...)
		start = end
	}
	return append(out, m.newer...), nil, nil
}
