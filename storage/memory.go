package storage

import (
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/weirstream/weir/checkpoint"
)

// DefaultMaxStateBytes bounds one state handle in Memory storage, as Flink's
// memory state backend does.
const DefaultMaxStateBytes = 5 << 20

// Memory keeps checkpoints in the process's heap: all state is inline in the
// metadata. It survives task restarts inside the process, not the process.
type Memory struct {
	maxStateBytes int

	mu        sync.Mutex
	maxID     checkpoint.ID
	completed map[checkpoint.ID]*checkpoint.Metadata
}

// NewMemory builds Memory storage; maxStateBytes bounds each piece of state
// (0 means DefaultMaxStateBytes).
func NewMemory(maxStateBytes int) *Memory {
	if maxStateBytes <= 0 {
		maxStateBytes = DefaultMaxStateBytes
	}
	return &Memory{maxStateBytes: maxStateBytes, completed: map[checkpoint.ID]*checkpoint.Metadata{}}
}

func (m *Memory) Describe() string { return "memory" }

func (m *Memory) Reserve(id checkpoint.ID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.maxID = max(m.maxID, id)
	return nil
}

func (m *Memory) WriteState(id checkpoint.ID, h checkpoint.Handle, data []byte) (checkpoint.Handle, error) {
	if len(data) > m.maxStateBytes {
		return h, fmt.Errorf("checkpoint %d: %s is %d bytes, above the %d-byte bound of memory checkpoint storage; use a checkpoint directory for large state: %w",
			id, handleName(h), len(data), m.maxStateBytes, ErrStateTooLarge)
	}
	h.Path = ""
	h.Inline = slices.Clone(data)
	if h.Inline == nil {
		h.Inline = []byte{}
	}
	h.SizeBytes = int64(len(data))
	return h, nil
}

func (m *Memory) ReadState(h checkpoint.Handle) ([]byte, error) {
	if h.Path != "" {
		return nil, fmt.Errorf("memory checkpoint storage cannot read state file %q", h.Path)
	}
	return h.Inline, nil
}

func (m *Memory) Commit(md *checkpoint.Metadata) error {
	// Round-trip through the format so memory storage checks what a
	// directory would, and keeps no reference to the caller's value.
	data, err := checkpoint.Encode(md)
	if err != nil {
		return fmt.Errorf("%w; memory checkpoint storage keeps all state inside the metadata: use a checkpoint directory (--checkpoint-dir, CheckpointConfig.Dir)", err)
	}
	cp, err := checkpoint.Decode(data)
	if err != nil {
		panic(fmt.Sprintf("storage: metadata does not survive its own format: %v", err))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.completed[md.ID] = cp
	m.maxID = max(m.maxID, md.ID)
	return nil
}

func (m *Memory) Scan() (Scan, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Scan{MaxID: m.maxID}
	for _, md := range m.completed {
		s.Completed = append(s.Completed, md)
	}
	slices.SortFunc(s.Completed, byID)
	return s, nil
}

func (m *Memory) Discard(id checkpoint.ID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.completed, id)
	return nil
}

func (m *Memory) DiscardState([]checkpoint.Handle) error { return nil }

// Lock takes nothing: memory storage belongs to one run.
func (m *Memory) Lock() (io.Closer, error) { return io.NopCloser(nil), nil }
