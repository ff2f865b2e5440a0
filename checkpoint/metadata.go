package checkpoint

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"path"
	"slices"
	"strings"
	"time"
)

// Metadata describes one completed checkpoint: which tasks wrote which state.
// Its durable write is the checkpoint's commit point.
type Metadata struct {
	Job string `json:"job"`
	// Lineage names the chain of runs the checkpoint belongs to: the run id
	// (operator.Context.RunID) of the run that started it without
	// restoring anything; every run that restores a checkpoint of the chain
	// carries it on. Empty in checkpoints of Weir before lineages.
	Lineage   string `json:"lineage,omitempty"`
	ID        ID     `json:"id"`
	Savepoint bool   `json:"savepoint,omitempty"`
	// AtLeastOnce: taken in at-least-once mode (Config.AtLeastOnce);
	// absent in checkpoints of Weir before it was recorded.
	AtLeastOnce bool      `json:"atLeastOnce,omitempty"`
	Triggered   time.Time `json:"triggered"`
	// Operators fingerprint the job that took the checkpoint: with Job,
	// they are what a restore checks the checkpoint against (Fit).
	Operators []Operator  `json:"operators"`
	Tasks     []TaskState `json:"tasks"`
}

// Operator is one operator of a job, as checkpoint metadata records it.
type Operator struct {
	// UID matches state to operators across runs.
	UID string `json:"uid"`
	// Kind names what the operator does ("source", "keyed-process", ...):
	// state of one kind cannot be read by an operator of another.
	Kind string `json:"kind"`
	// MaxParallelism is the number of key groups its keyed state is split
	// into; it cannot change while the state lives.
	MaxParallelism int `json:"maxParallelism"`
}

// TaskState is what one task acknowledged.
type TaskState struct {
	Task    TaskID   `json:"task"`
	Handles []Handle `json:"handles,omitempty"`
}

// SizeBytes is the total size of the state the checkpoint references.
func (m *Metadata) SizeBytes() int64 {
	var n int64
	for _, t := range m.Tasks {
		for _, h := range t.Handles {
			n += h.SizeBytes
		}
	}
	return n
}

// The metadata file format: a fixed header, then the JSON payload.
//
//	magic    8 bytes  "WEIRCHK\x00"
//	version  uint32   big-endian, FormatVersion
//	length   uint32   big-endian, payload bytes, at most MaxMetadataBytes
//	crc32c   uint32   big-endian, Castagnoli checksum of the payload
//	payload  JSON of Metadata
//
// Version 2 added Operators, the job's fingerprint; version 1 metadata is
// refused, since a restore could not be checked against the job.
const (
	FormatVersion    = 2
	MaxMetadataBytes = 64 << 20
	headerBytes      = 8 + 4 + 4 + 4
)

var magic = [8]byte{'W', 'E', 'I', 'R', 'C', 'H', 'K', 0}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors that Encode and Decode wrap; classify with errors.Is.
var (
	ErrCorrupt  = errors.New("corrupt checkpoint metadata")
	ErrVersion  = errors.New("unsupported checkpoint metadata version")
	ErrTooLarge = errors.New("checkpoint metadata too large")
	// ErrStateDamaged marks state a checkpoint's metadata lists that is
	// missing or whose bytes are not those written: the checkpoint cannot
	// be restored.
	ErrStateDamaged = errors.New("checkpoint state is missing or damaged")
)

// Encode serialises m. It fails, wrapping ErrTooLarge, when the result would
// exceed MaxMetadataBytes (state kept inline by memory storage can get
// there). It panics if m is invalid: the coordinator built it.
func Encode(m *Metadata) ([]byte, error) {
	if err := m.validate(); err != nil {
		panic(fmt.Sprintf("checkpoint: encode invalid metadata: %v", err))
	}
	// Inline state is base64 in the payload: refuse before encoding what
	// cannot fit.
	var inline int
	for _, t := range m.Tasks {
		for _, h := range t.Handles {
			inline += base64.StdEncoding.EncodedLen(len(h.Inline))
		}
	}
	if inline > MaxMetadataBytes {
		return nil, fmt.Errorf("checkpoint %d: %w: its inline state alone is %d bytes, above the bound of %d bytes (%d MiB)",
			m.ID, ErrTooLarge, inline, MaxMetadataBytes, MaxMetadataBytes>>20)
	}
	payload, err := json.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("checkpoint: encode metadata: %v", err))
	}
	if len(payload) > MaxMetadataBytes {
		return nil, fmt.Errorf("checkpoint %d: %w: %d bytes, above the bound of %d bytes (%d MiB)",
			m.ID, ErrTooLarge, len(payload), MaxMetadataBytes, MaxMetadataBytes>>20)
	}
	out := make([]byte, headerBytes, headerBytes+len(payload))
	copy(out, magic[:])
	binary.BigEndian.PutUint32(out[8:], FormatVersion)
	binary.BigEndian.PutUint32(out[12:], uint32(len(payload)))
	binary.BigEndian.PutUint32(out[16:], crc32.Checksum(payload, castagnoli))
	return append(out, payload...), nil
}

// Decode parses and checks metadata written by Encode. Every failure wraps
// ErrCorrupt or ErrVersion; the caller adds the file's name.
func Decode(data []byte) (*Metadata, error) {
	if len(data) < headerBytes {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header (truncated?)", ErrCorrupt, len(data), headerBytes)
	}
	if !bytes.Equal(data[:8], magic[:]) {
		return nil, fmt.Errorf("%w: bad magic number %q: not a Weir checkpoint metadata file", ErrCorrupt, data[:8])
	}
	if v := binary.BigEndian.Uint32(data[8:]); v != FormatVersion {
		return nil, fmt.Errorf("%w %d: this Weir reads version %d", ErrVersion, v, FormatVersion)
	}
	n := binary.BigEndian.Uint32(data[12:])
	if n > MaxMetadataBytes {
		return nil, fmt.Errorf("%w: payload length %d above the limit %d", ErrCorrupt, n, MaxMetadataBytes)
	}
	payload := data[headerBytes:]
	if uint32(len(payload)) != n {
		return nil, fmt.Errorf("%w: payload is %d bytes, header says %d (truncated?)", ErrCorrupt, len(payload), n)
	}
	if sum := crc32.Checksum(payload, castagnoli); sum != binary.BigEndian.Uint32(data[16:]) {
		return nil, fmt.Errorf("%w: checksum mismatch (bit rot or a partial write)", ErrCorrupt)
	}
	var m Metadata
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: payload: %v", ErrCorrupt, err)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return &m, nil
}

// validate checks what a restore relies on; paths in particular must stay
// inside the checkpoint directory.
func (m *Metadata) validate() error {
	if m.ID == 0 {
		return errors.New("checkpoint id 0")
	}
	if m.Job == "" {
		return errors.New("empty job name")
	}
	uids := make(map[string]bool, len(m.Operators))
	for _, op := range m.Operators {
		switch {
		case op.UID == "" || op.Kind == "":
			return fmt.Errorf("operator %q of kind %q: empty UID or kind", op.UID, op.Kind)
		case uids[op.UID]:
			return fmt.Errorf("operator %q appears twice", op.UID)
		case op.MaxParallelism < 1:
			return fmt.Errorf("operator %q: max parallelism %d", op.UID, op.MaxParallelism)
		}
		uids[op.UID] = true
	}
	if !slices.IsSortedFunc(m.Tasks, func(a, b TaskState) int {
		if a.Task == b.Task {
			return 0
		}
		if a.Task.less(b.Task) {
			return -1
		}
		return 1
	}) {
		return errors.New("tasks are not in order")
	}
	for i, t := range m.Tasks {
		if i > 0 && m.Tasks[i-1].Task == t.Task {
			return fmt.Errorf("task %s appears twice", t.Task)
		}
		if t.Task.Vertex == "" || t.Task.Subtask < 0 {
			return fmt.Errorf("invalid task %s", t.Task)
		}
		for _, h := range t.Handles {
			if err := h.validate(); err != nil {
				return fmt.Errorf("task %s: %w", t.Task, err)
			}
			if !uids[h.Operator] {
				return fmt.Errorf("task %s: state of operator %q, which the job's operators do not list", t.Task, h.Operator)
			}
		}
	}
	return nil
}

func (h Handle) validate() error {
	switch {
	case h.Operator == "":
		return errors.New("state handle without operator")
	case h.Parallelism <= 0 || h.Subtask < 0 || h.Subtask >= h.Parallelism:
		return fmt.Errorf("operator %s: subtask %d of %d", h.Operator, h.Subtask, h.Parallelism)
	case h.SizeBytes < 0:
		return fmt.Errorf("operator %s: negative size", h.Operator)
	case h.Path != "" && h.Inline != nil:
		return fmt.Errorf("operator %s: state both inline and in %q", h.Operator, h.Path)
	case h.Path != "":
		return ValidatePath(h.Path)
	}
	return nil
}

// ValidatePath checks that a state path from metadata stays inside the
// checkpoint directory: relative, clean, no "..", no backslashes.
func ValidatePath(p string) error {
	if p == "" || path.IsAbs(p) || strings.Contains(p, `\`) || path.Clean(p) != p ||
		p == ".." || strings.HasPrefix(p, "../") || strings.Contains(p, "/../") {
		return fmt.Errorf("state path %q leaves the checkpoint directory or is not clean", p)
	}
	return nil
}
