package pebble

import (
	"io"

	"github.com/cockroachdb/pebble/v2"
)

// concatenate is Pebble's default merger, which lists are appended with:
// it concatenates a key's merge operands, oldest first, and has its name,
// so a database written with either opens with the other. Pebble's own
// puts each older operand in front of the result in a new buffer, which
// makes reading a key with n operands (a window's pane, appended to for
// every record) cost n² bytes copied; this one copies each operand once,
// and the result once more.
var concatenate = &pebble.Merger{
	Name: pebble.DefaultMerger.Name,
	Merge: func(_, value []byte) (pebble.ValueMerger, error) {
		return &concatMerger{newer: append([]byte(nil), value...)}, nil
	},
}

// merger is the merger databases open with: concatenate, but for a
// test that plants a defect.
var merger = concatenate

type concatMerger struct {
	// older holds the operands older than the first, newest first; ends
	// each one's end in it.
	older []byte
	ends  []int
	// newer holds the first operand and those newer, oldest first.
	newer []byte
}

func (m *concatMerger) MergeNewer(value []byte) error {
	m.newer = append(m.newer, value...)
	return nil
}

func (m *concatMerger) MergeOlder(value []byte) error {
	m.older = append(m.older, value...)
	m.ends = append(m.ends, len(m.older))
	return nil
}

func (m *concatMerger) Finish(bool) ([]byte, io.Closer, error) {
	if len(m.ends) == 0 {
		return m.newer, nil, nil
	}
	out := make([]byte, 0, len(m.older)+len(m.newer))
	for i := len(m.ends) - 1; i >= 0; i-- {
		start := 0
		if i > 0 {
			start = m.ends[i-1]
		}
		out = append(out, m.older[start:m.ends[i]]...)
	}
	return append(out, m.newer...), nil, nil
}
