package storage

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"

	"github.com/weirstream/weir/checkpoint"
)

// DefaultMaxStateBytes bounds one state handle in Memory storage, as Flink's
// memory state backend does.
const DefaultMaxStateBytes = 5 << 20

// Memory keeps checkpoints in the process's heap: state is inline in the
// metadata, except shared files (an incremental backend's), kept beside it.
// It survives task restarts inside the process, not the process.
type Memory struct {
	maxStateBytes int

	mu        sync.Mutex
	maxID     checkpoint.ID
	completed map[checkpoint.ID]*checkpoint.Metadata
	files     map[string][]byte // shared files by path
	rollbacks map[checkpoint.ID]Rollback
	shared    *registry
}

// NewMemory builds Memory storage; maxStateBytes bounds each piece of state
// (0 means DefaultMaxStateBytes).
func NewMemory(maxStateBytes int) *Memory {
	if maxStateBytes <= 0 {
		maxStateBytes = DefaultMaxStateBytes
	}
	return &Memory{maxStateBytes: maxStateBytes, completed: map[checkpoint.ID]*checkpoint.Metadata{}, files: map[string][]byte{}, rollbacks: map[checkpoint.ID]Rollback{}, shared: newRegistry()}
}

func (m *Memory) Describe() string { return "memory" }

func (m *Memory) Reserve(id checkpoint.ID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.maxID = max(m.maxID, id)
	m.shared.reserve(id)
	return nil
}

func (m *Memory) tooLarge(id checkpoint.ID, h checkpoint.Handle, n int) error {
	return fmt.Errorf("checkpoint %d: %s is %d bytes, above the %d-byte bound of memory checkpoint storage; use a checkpoint directory for large state: %w",
		id, handleName(h), n, m.maxStateBytes, ErrStateTooLarge)
}

// WriteShared keeps a shared file, within the same bound as other state.
func (m *Memory) WriteShared(id checkpoint.ID, h checkpoint.Handle, r io.Reader) (checkpoint.Handle, error) {
	data, err := io.ReadAll(io.LimitReader(r, int64(m.maxStateBytes)+1))
	if err != nil {
		return h, fmt.Errorf("checkpoint %d: %w", id, sharedErr("write", h, err))
	}
	if len(data) > m.maxStateBytes {
		return h, m.tooLarge(id, h, len(data))
	}
	h.Inline, h.Path, h.SizeBytes = nil, sharedName(id, h), int64(len(data))
	m.shared.wrote(id, h.Path)
	m.mu.Lock()
	m.files[h.Path] = data
	m.mu.Unlock()
	return h, nil
}

func (m *Memory) OpenState(h checkpoint.Handle) (io.ReadCloser, error) {
	data, err := m.ReadState(h)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

func (m *Memory) RemoveOrphans() error {
	m.mu.Lock()
	all := slices.Collect(maps.Keys(m.files))
	m.mu.Unlock()
	m.remove(m.shared.orphans(all))
	return nil
}

func (m *Memory) remove(paths []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range paths {
		delete(m.files, p)
	}
}

func (m *Memory) WriteState(id checkpoint.ID, h checkpoint.Handle, data []byte) (checkpoint.Handle, error) {
	if len(data) > m.maxStateBytes {
		return h, m.tooLarge(id, h, len(data))
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
	if h.Path == "" {
		return h.Inline, nil
	}
	m.mu.Lock()
	data, ok := m.files[h.Path]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("read %s: %w: memory checkpoint storage has no file %q", handleName(h), checkpoint.ErrStateDamaged, h.Path)
	}
	return data, nil
}

func (m *Memory) Commit(md *checkpoint.Metadata) error {
	if err := m.shared.check(md); err != nil {
		return err
	}
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
	m.completed[md.ID] = cp
	m.maxID = max(m.maxID, md.ID)
	m.mu.Unlock()
	m.remove(m.shared.committed(cp))
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
	s.Rollbacks = slices.Collect(maps.Values(m.rollbacks))
	settleRollbacks(&s)
	m.shared.reset(s.Completed)
	return s, nil
}

func (m *Memory) Discard(id checkpoint.ID) error {
	m.mu.Lock()
	delete(m.completed, id)
	m.mu.Unlock()
	m.remove(m.shared.discarded(id))
	return nil
}

func (m *Memory) DiscardState(hs []checkpoint.Handle) error {
	m.remove(m.shared.unreferenced(hs))
	return nil
}

// Lock takes nothing: memory storage belongs to one run.
func (m *Memory) Lock() (io.Closer, error) { return io.NopCloser(nil), nil }
