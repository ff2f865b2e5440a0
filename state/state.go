// Package state holds the snapshot formats of keyed state (one blob per
// subtask, indexed by key group, so a restore at another parallelism reads
// exactly its key groups) and of operator list state (redistributed on
// restore), shared by every state backend.
package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
)

// KindKeyed is the Handle.Kind of keyed state.
const KindKeyed = checkpoint.KindKeyed

// ErrCorrupt marks state that cannot be decoded.
var ErrCorrupt = errors.New("corrupt state snapshot")

// PanicError is a panic recovered while state was encoded for a
// snapshot (a codec's, on a goroutine where it would end the process). Its
// message says what panicked; Stack is for the log, not the message, which
// a declined checkpoint's warnings, events and status quote every time.
type PanicError struct {
	Err   error
	Stack []byte
}

func (e *PanicError) Error() string { return e.Err.Error() }
func (e *PanicError) Unwrap() error { return e.Err }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var keyedMagic = [4]byte{'W', 'K', 'G', '1'}

// KeyedSection appends the entries of one state table in one key group.
type KeyedSection struct {
	Name   string
	Append func(dst []byte, group int) []byte
}

// EncodeKeyed writes the keyed state of key groups r: a header with the
// offset of each key group's section, the sections, and a CRC-32C.
func EncodeKeyed(r keygroup.Range, tables []KeyedSection) []byte {
	n := r.Len()
	head := 4 + 8 + 8*(n+1)
	buf := make([]byte, head, head+64*n)
	copy(buf, keyedMagic[:])
	binary.BigEndian.PutUint32(buf[4:], uint32(r.First))
	binary.BigEndian.PutUint32(buf[8:], uint32(r.Last))
	for i := range n {
		binary.BigEndian.PutUint64(buf[12+8*i:], uint64(len(buf)))
		buf = codec.AppendLen(buf, len(tables))
		for _, t := range tables {
			buf = codec.AppendBytes(buf, []byte(t.Name))
			lenAt := len(buf)
			buf = append(buf, 0, 0, 0, 0)
			buf = t.Append(buf, r.First+i)
			binary.BigEndian.PutUint32(buf[lenAt:], uint32(len(buf)-lenAt-4))
		}
	}
	binary.BigEndian.PutUint64(buf[12+8*n:], uint64(len(buf)))
	return binary.BigEndian.AppendUint32(buf, crc32.Checksum(buf, castagnoli))
}

// DecodeKeyed calls visit for each table's entries in each key group of
// want that the blob holds.
func DecodeKeyed(blob []byte, want keygroup.Range, visit func(name string, group int, entries []byte) error) error {
	if len(blob) < 4+8+8+4 || [4]byte(blob[:4]) != keyedMagic {
		return fmt.Errorf("%w: not a keyed state blob", ErrCorrupt)
	}
	body := blob[:len(blob)-4]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(blob[len(blob)-4:]) {
		return fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	have := keygroup.Range{First: int(binary.BigEndian.Uint32(body[4:])), Last: int(binary.BigEndian.Uint32(body[8:]))}
	n := have.Len()
	if 12+8*(n+1) > len(body) {
		return fmt.Errorf("%w: header of %d key groups exceeds the blob", ErrCorrupt, n)
	}
	off := func(i int) int { return int(binary.BigEndian.Uint64(body[12+8*i:])) }
	both := have.Intersect(want)
	for g := both.First; g <= both.Last && both.Len() > 0; g++ {
		i := g - have.First
		lo, hi := off(i), off(i+1)
		if lo < 12+8*(n+1) || hi < lo || hi > len(body) {
			return fmt.Errorf("%w: key group %d section out of bounds", ErrCorrupt, g)
		}
		sec := body[lo:hi]
		count, k, err := codec.ReadLen(sec)
		if err != nil {
			return fmt.Errorf("%w: key group %d: %v", ErrCorrupt, g, err)
		}
		sec = sec[k:]
		for range count {
			name, k, err := codec.ReadBytes(sec)
			if err != nil || len(sec) < k+4 {
				return fmt.Errorf("%w: key group %d: table name", ErrCorrupt, g)
			}
			sec = sec[k:]
			l := int(binary.BigEndian.Uint32(sec))
			if l > len(sec)-4 {
				return fmt.Errorf("%w: key group %d: table %q length", ErrCorrupt, g, name)
			}
			if err := visit(string(name), g, sec[4:4+l]); err != nil {
				return fmt.Errorf("key group %d, state %q: %w", g, name, err)
			}
			sec = sec[4+l:]
		}
	}
	return nil
}

// Distribution says how operator list state is redistributed on restore.
type Distribution string

const (
	// Split: the items of all old subtasks are dealt round-robin.
	Split Distribution = "split"
	// Union: every subtask gets every item.
	Union Distribution = "union"
)

func listKind(d Distribution, name string) string { return "list-" + string(d) + ":" + name }

// EncodeList writes operator list state: the Kind for its handle and the blob.
func EncodeList(d Distribution, name string, items [][]byte) (kind string, blob []byte) {
	blob = codec.AppendLen(nil, len(items))
	for _, it := range items {
		blob = codec.AppendBytes(blob, it)
	}
	return listKind(d, name), binary.BigEndian.AppendUint32(blob, crc32.Checksum(blob, castagnoli))
}

// RestoreList returns the items of list state name that subtask i of p
// gets, from the handles of every old subtask (in subtask order).
func RestoreList(hs []checkpoint.Handle, read func(checkpoint.Handle) ([]byte, error), d Distribution, name string, i, p int) ([][]byte, error) {
	kind := listKind(d, name)
	var all [][]byte
	sorted := make([]checkpoint.Handle, 0, len(hs))
	for _, h := range hs {
		if h.Kind == kind {
			sorted = append(sorted, h)
		}
	}
	// Handles come in metadata (task) order; deal by old subtask order.
	for s := 0; len(sorted) > 0; s++ {
		rest := sorted[:0]
		for _, h := range sorted {
			if h.Subtask != s {
				rest = append(rest, h)
				continue
			}
			blob, err := read(h)
			if err != nil {
				return nil, err
			}
			items, err := decodeList(blob)
			if err != nil {
				return nil, fmt.Errorf("list state %q of %s subtask %d: %w", name, h.Operator, h.Subtask, err)
			}
			all = append(all, items...)
		}
		sorted = rest
	}
	if d == Union {
		return all, nil
	}
	var mine [][]byte
	for j, it := range all {
		if j%p == i {
			mine = append(mine, it)
		}
	}
	return mine, nil
}

func decodeList(blob []byte) ([][]byte, error) {
	if len(blob) < 4 {
		return nil, ErrCorrupt
	}
	body := blob[:len(blob)-4]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(blob[len(blob)-4:]) {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	n, k, err := codec.ReadLen(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	body = body[k:]
	items := make([][]byte, 0, min(n, len(body)))
	for range n {
		it, k, err := codec.ReadBytes(body)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		items = append(items, append([]byte(nil), it...))
		body = body[k:]
	}
	return items, nil
}
