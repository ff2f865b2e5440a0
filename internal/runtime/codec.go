package runtime

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/arena"
)

// MaxBatchBytes bounds an encoded batch: a network frame carries one, and
// channel state holds them.
const MaxBatchBytes = 16 << 20

// BatchCodec encodes a channel's batches (a []T, as Event.Batch holds them).
type BatchCodec interface {
	Append(dst []byte, batch any) []byte
	// Decode decodes a whole batch of n records. NB: the batch must not
	// alias src, which the caller reuses (a connection reads the next
	// frame into it). It may decode into reuse, a batch of the same type
	// the receiver is done with (nil: none).
	Decode(src []byte, reuse any) (batch any, n int, err error)
}

// Batches is the BatchCodec of []T with c for each record; c must not
// alias what it decodes from (codec.For's codecs copy).
func Batches[T any](c codec.Codec[T]) BatchCodec {
	if sc, ok := any(c).(codec.Codec[string]); ok && sc == codec.For[string]() {
		return stringBatches{}
	}
	return batches[T]{c: c}
}

type batches[T any] struct{ c codec.Codec[T] }

// Typed is bc with a description of its records' type (as their codec
// writes them: the same description for the same bytes), which channel
// state records beside them, and a restore compares with what the job's
// channel carries now (replay): an unaligned checkpoint's records in flight
// must not be read as another type. "" is not checked.
func Typed(bc BatchCodec, typ string) BatchCodec { return typedBatches{bc, typ} }

type typedBatches struct {
	BatchCodec
	typ string
}

// recordType is what Typed says bc's records are; "" if nothing.
func recordType(bc BatchCodec) string {
	t, _ := bc.(typedBatches)
	return t.typ
}

// stringBatches is the BatchCodec of []string with codec.For's codec (a
// word count's channels carry words), with that codec's loop written out:
// a length under 128 is one byte of uvarint. A decoded string is cut from
// a chunk of the batch copied once for many strings (arena.Cuts): a few
// allocations a batch where a string each would cost one apiece. NB: a
// decoded string keeps at most its chunk alive (4 KiB, or itself if
// longer); heap state copies the strings of the keys and values it keeps,
// as it does those cut from a file source's shared blocks.
type stringBatches struct{}

func (stringBatches) Append(dst []byte, batch any) []byte {
	recs := batch.([]string)
	dst = binary.AppendUvarint(dst, uint64(len(recs)))
	for _, r := range recs {
		if len(r) < 0x80 {
			dst = append(dst, byte(len(r)))
		} else {
			dst = binary.AppendUvarint(dst, uint64(len(r)))
		}
		dst = append(dst, r...)
	}
	return dst
}

func (stringBatches) Decode(src []byte, reuse any) (any, int, error) {
	n, err := recordCount(&src)
	if err != nil {
		return nil, 0, err
	}
	old, _ := reuse.([]string)
	clear(old)
	recs := slices.Grow(old[:0], min(n, len(src)))
	var chunks arena.Cuts
	chunks.Reset(src)
	for range n {
		l, k := 0, 1
		if len(src) > 0 && src[0] < 0x80 {
			l = int(src[0])
			if l > len(src)-1 {
				return nil, 0, fmt.Errorf("batch: record %d: codec: length %d exceeds the %d bytes left", len(recs), l, len(src)-1)
			}
		} else if l, k, err = codec.ReadLen(src); err != nil {
			return nil, 0, fmt.Errorf("batch: record %d: %w", len(recs), err)
		}
		recs = append(recs, chunks.Cut(src[k:], l))
		src = src[k+l:]
	}
	if len(src) != 0 {
		return nil, 0, fmt.Errorf("batch: %d bytes after the last record", len(src))
	}
	return recs, len(recs), nil
}

// recordCount reads a batch's record count from the front of *src.
func recordCount(src *[]byte) (int, error) {
	n, k := binary.Uvarint(*src)
	if k <= 0 {
		return 0, errors.New("batch: bad record count")
	}
	*src = (*src)[k:]
	if n > MaxBatchBytes {
		return 0, fmt.Errorf("batch: %d records exceed a frame", n)
	}
	return int(n), nil
}

func (b batches[T]) Append(dst []byte, batch any) []byte {
	recs := batch.([]T)
	dst = binary.AppendUvarint(dst, uint64(len(recs)))
	for _, r := range recs {
		dst = b.c.Append(dst, r)
	}
	return dst
}

func (b batches[T]) Decode(src []byte, reuse any) (any, int, error) {
	n, err := recordCount(&src)
	if err != nil {
		return nil, 0, err
	}
	// NB: a count the bytes cannot hold must not allocate; the loop below
	// fails on the first missing record.
	old, _ := reuse.([]T)
	clear(old)
	recs := slices.Grow(old[:0], min(n, len(src)))
	for range n {
		r, used, err := b.c.Decode(src)
		if err != nil {
			return nil, 0, fmt.Errorf("batch: record %d: %w", len(recs), err)
		}
		recs = append(recs, r)
		src = src[used:]
	}
	if len(src) != 0 {
		return nil, 0, fmt.Errorf("batch: %d bytes after the last record", len(src))
	}
	return recs, len(recs), nil
}

// AppendBatch appends batch e (its event times, its key groups, then its
// records) as
//
//	uvarint count of event times (0: none), the times as varint deltas;
//	uvarint count of key groups (0: none), the groups as uvarints;
//	the records, as bc encodes them
func AppendBatch(dst []byte, e Event, bc BatchCodec) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(e.Times)))
	var prev int64
	for _, t := range e.Times {
		dst = binary.AppendVarint(dst, t-prev)
		prev = t
	}
	dst = binary.AppendUvarint(dst, uint64(len(e.Groups)))
	for _, g := range e.Groups {
		dst = binary.AppendUvarint(dst, uint64(g))
	}
	return bc.Append(dst, e.Batch)
}

// DecodeBatch decodes what AppendBatch appended (the whole of p), into the
// slices of reuse, a batch the receiver is done with, where they are large
// enough. The batch may alias p.
func DecodeBatch(p []byte, bc BatchCodec, reuse Event) (Event, error) {
	e := Event{Kind: KindBatch}
	n, k := binary.Uvarint(p)
	if k <= 0 || n > uint64(len(p)-k) {
		return e, errors.New("bad event-time count")
	}
	p = p[k:]
	if n > 0 {
		e.Times = slices.Grow(reuse.Times[:0], int(n))[:n]
		var prev int64
		for i := range e.Times {
			d, k := binary.Varint(p)
			if k <= 0 {
				return e, errors.New("bad event time")
			}
			prev += d
			e.Times[i] = prev
			p = p[k:]
		}
	}
	g, k := binary.Uvarint(p)
	if k <= 0 || g > uint64(len(p)-k) {
		return e, errors.New("bad key-group count")
	}
	p = p[k:]
	if g > 0 {
		e.Groups = slices.Grow(reuse.Groups[:0], int(g))[:g]
		for i := range e.Groups {
			v, k := binary.Uvarint(p)
			if k <= 0 || v > 0xffff {
				return e, errors.New("bad key group")
			}
			e.Groups[i] = uint16(v)
			p = p[k:]
		}
	}
	b, recs, err := bc.Decode(p, reuse.Batch)
	if err != nil {
		return e, err
	}
	e.Batch = b
	if n > 0 && recs != int(n) {
		return e, fmt.Errorf("%d event times for %d records", n, recs)
	}
	if g > 0 && recs != int(g) {
		return e, fmt.Errorf("%d key groups for %d records", g, recs)
	}
	return e, nil
}
