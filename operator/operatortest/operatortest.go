// Package operatortest holds test doubles for operators' snapshots.
package operatortest

import (
	"fmt"
	"sync"

	"github.com/weirstream/weir/checkpoint"
)

// MemWriter keeps the state a snapshot writes, so a test can restore it.
// It is safe for concurrent use.
type MemWriter struct {
	mu    sync.Mutex
	blobs map[string][]byte
}

// Write implements operator.Writer.
func (m *MemWriter) Write(h checkpoint.Handle, data []byte) (checkpoint.Handle, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.blobs == nil {
		m.blobs = map[string][]byte{}
	}
	h.Path = fmt.Sprintf("state-%d", len(m.blobs))
	m.blobs[h.Path] = data
	h.SizeBytes = int64(len(data))
	return h, nil
}

// Read reads back what Write wrote; it serves as operator.Restore.Read.
func (m *MemWriter) Read(h checkpoint.Handle) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	data, ok := m.blobs[h.Path]
	if !ok {
		return nil, fmt.Errorf("no state at %q", h.Path)
	}
	return data, nil
}
