// Package operatortest holds test doubles for operators: a writer that keeps
// snapshots in memory, and an operator context.
package operatortest

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/operator"
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

// WriteShared implements operator.Writer: it keeps the file as a blob too.
func (m *MemWriter) WriteShared(h checkpoint.Handle, r io.Reader) (checkpoint.Handle, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return h, err
	}
	h, err = m.Write(h, data)
	h.Path = "shared/" + h.Path
	m.mu.Lock()
	m.blobs[h.Path] = data
	m.mu.Unlock()
	return h, err
}

// Read reads back what Write wrote; it serves as operator.Restore.Read.
func (m *MemWriter) Read(h checkpoint.Handle) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	data, ok := m.blobs[h.Path]
	if !ok {
		return nil, fmt.Errorf("%w: no state at %q", checkpoint.ErrStateDamaged, h.Path)
	}
	return data, nil
}

// Open streams what Write wrote.
func (m *MemWriter) Open(h checkpoint.Handle) (io.ReadCloser, error) {
	data, err := m.Read(h)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// Damage flips a byte in the middle of the blob h points at.
func (m *MemWriter) Damage(h checkpoint.Handle) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := bytes.Clone(m.blobs[h.Path])
	b[len(b)/2] ^= 0xff
	m.blobs[h.Path] = b
}

// Remove deletes the blob h points at, as a lost file would be.
func (m *MemWriter) Remove(h checkpoint.Handle) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.blobs, h.Path)
}

// Run holds what a test's operators acquire for a run
// (operator.Context.Acquire), as the runtime does, and the run's id. Close
// releases it. A test models each run of a job with a Run of its own.
type Run struct {
	// Lineage is operator.Context.Lineage in the run's contexts; empty:
	// DefaultLineage, so every run of a test continues one lineage unless
	// the test says otherwise.
	Lineage string
	// Logger is operator.Context.Logger in the run's contexts; nil:
	// discarded.
	Logger *slog.Logger

	mu   sync.Mutex
	held map[string]error
	c    []io.Closer
	id   string
}

// Context is the context of subtask sub of p of operator uid, with
// checkpoints on and r to restore (nil: none; else the run resumed r's
// checkpoint), in the first attempt of run.
func (run *Run) Context(uid string, sub, p int, r *operator.Restore) *operator.Context {
	var resumed checkpoint.ID
	if r != nil {
		resumed = r.Checkpoint
	}
	return &operator.Context{
		Job: "test", UID: uid, Subtask: sub, Parallelism: p, MaxParallelism: keygroup.DefaultMaxParallelism,
		KeyGroups: keygroup.ForSubtask(keygroup.DefaultMaxParallelism, p, sub), Restore: r, Resumed: resumed,
		RunID: run.ID(), Attempt: 1, Lineage: cmp.Or(run.Lineage, DefaultLineage),
		CheckpointingEnabled: true, Logger: cmp.Or(run.Logger, slog.New(slog.DiscardHandler)), Now: time.Now, Acquire: run.acquire,
	}
}

// DefaultLineage is the lineage of a Run that sets none.
const DefaultLineage = "operatortest"

// ID is the run's id (operator.Context.RunID), drawn at random at the
// first call.
func (run *Run) ID() string {
	run.mu.Lock()
	defer run.mu.Unlock()
	if run.id == "" {
		run.id = rand.Text()
	}
	return run.id
}

func (run *Run) acquire(key string, open func() (io.Closer, error)) error {
	run.mu.Lock()
	defer run.mu.Unlock()
	if err, ok := run.held[key]; ok {
		return err
	}
	if run.held == nil {
		run.held = map[string]error{}
	}
	c, err := open()
	run.held[key] = err
	if err == nil {
		run.c = append(run.c, c)
	}
	return err
}

// Close releases what the run's operators acquired.
func (run *Run) Close() {
	run.mu.Lock()
	defer run.mu.Unlock()
	for _, c := range run.c {
		c.Close()
	}
	run.c, run.held = nil, nil
}
