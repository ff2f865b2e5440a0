package transport

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/runtime"
)

// Wire format. Every frame is
//
//	length  uint32, big-endian: the bytes that follow, 1..MaxFrameBytes
//	type    byte
//	channel uvarint (0 for hello)
//	payload the rest
//
// A connection starts with a hello each way (payload: magic "weir",
// version). An event frame's payload is the event: its kind, then
//
//	batch      uvarint count of event times (0: none), the times as
//	           varint deltas; uvarint count of key groups (0: none), the
//	           groups as uvarints; then the batch's encoding
//	barrier    uvarint checkpoint id, varint trigger time (Unix
//	           nanoseconds, Event.Time; 0: not said), uvarint the
//	           checkpoint whose completion the receiver must have been
//	           told of first (Event.Completed; 0: none), byte flags:
//	           bit 0 aligned (Event.Aligned: the checkpoint aligns),
//	           bit 1 priority (an overtaking barrier, Output.Overtake:
//	           sent without a credit, it goes ahead of the events the
//	           receiver has queued), bit 2 a batch follows (priority
//	           only: the tail, encoded as a batch event's payload);
//	           other bits are a protocol error
//	cancel     uvarint checkpoint id
//	watermark  varint milliseconds
//	end-of-data, idle: nothing
//
// A credit frame's payload is a uvarint: how many more events the receiver
// of the channel buffers. A keep-alive frame (channel 0) has none: a
// connection that wrote nothing else for a while sends one, so that its
// peer can tell a quiet connection from a cut one. A forced frame is an
// event frame sent without a credit (Output.ForcePush): the receiver
// queues it beyond the window, and grants nothing back for it.
const (
	typeHello     byte = 1
	typeEvent     byte = 2
	typeCredit    byte = 3
	typeKeepAlive byte = 4
	typeForced    byte = 5
)

// MaxFrameBytes bounds a frame: a batch must encode within it.
const MaxFrameBytes = runtime.MaxBatchBytes

// maxEventFrameBytes bounds the frame of an event sent with a credit or
// forced: below MaxFrameBytes by the most an overtaking barrier adds to
// the frame of the batch it carries (its id, trigger time, completed
// checkpoint and flags), so that a batch that crosses as an event also
// crosses as the tail of an unaligned checkpoint's barrier.
const maxEventFrameBytes = MaxFrameBytes - (3*binary.MaxVarintLen64 + 1)

// version 2: keep-alive frames. 3: barrier flags and trigger times,
// overtaking barriers, forced frames. 4: a barrier's completed checkpoint.
const version = 4

// Barrier flags: the byte after a barrier's checkpoint id.
const (
	flagAligned  byte = 1 << 0
	flagPriority byte = 1 << 1
	flagTail     byte = 1 << 2
	flagsKnown        = flagAligned | flagPriority | flagTail
)

var magic = []byte("weir")

// ErrProtocol means the peer sent what the protocol does not allow: the
// connection fails with it.
var ErrProtocol = errors.New("transport: protocol violation")

func protocolErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, a...))
}

// BatchCodec encodes a channel's batches.
type BatchCodec = runtime.BatchCodec

// appendHeader appends a frame's type and channel after room for its
// length, which finish fills in.
func appendHeader(dst []byte, typ byte, ch uint64) []byte {
	dst = append(dst, 0, 0, 0, 0, typ)
	return binary.AppendUvarint(dst, ch)
}

// finish sets the length of the frame that starts at frame[0].
func finish(frame []byte) ([]byte, error) { return finishWithin(frame, MaxFrameBytes) }

// finishWithin is finish for a frame of at most limit bytes.
func finishWithin(frame []byte, limit int) ([]byte, error) {
	n := len(frame) - 4
	if n > limit {
		return nil, fmt.Errorf("transport: a frame of %d bytes exceeds the %d-byte limit (make batches smaller)", n, limit)
	}
	binary.BigEndian.PutUint32(frame, uint32(n))
	return frame, nil
}

func appendKeepAlive(dst []byte) []byte { return appendHeader(dst, typeKeepAlive, 0) }

func appendHello(dst []byte) []byte {
	dst = appendHeader(dst, typeHello, 0)
	dst = append(dst, magic...)
	return append(dst, version)
}

func appendCredit(dst []byte, ch uint64, n int) []byte {
	dst = appendHeader(dst, typeCredit, ch)
	return binary.AppendUvarint(dst, uint64(n))
}

// appendEvent appends the frame of an event sent with a credit (typ
// typeEvent) or forced (typeForced). NB: e.Priority is not sent (an event
// popped from an Overtake may be pushed on): the frame's type says whether
// it took a credit.
func appendEvent(dst []byte, typ byte, ch uint64, e runtime.Event, bc BatchCodec) []byte {
	dst = appendHeader(dst, typ, ch)
	dst = append(dst, byte(e.Kind))
	switch e.Kind {
	case runtime.KindBatch:
		dst = runtime.AppendBatch(dst, e, bc)
	case runtime.KindBarrier:
		dst = appendBarrier(dst, e, 0)
	case runtime.KindCancel:
		dst = binary.AppendUvarint(dst, uint64(e.ID))
	case runtime.KindWatermark:
		dst = binary.AppendVarint(dst, e.Time)
	case runtime.KindEndOfData, runtime.KindIdle:
	default:
		panic(fmt.Sprintf("transport: event kind %d", e.Kind))
	}
	return dst
}

// appendOvertake appends the frame of barrier b sent with Overtake,
// followed by tail if it is a batch.
func appendOvertake(dst []byte, ch uint64, b, tail runtime.Event, bc BatchCodec) []byte {
	if b.Kind != runtime.KindBarrier {
		panic(fmt.Sprintf("transport: overtaking with %v, not a barrier", b))
	}
	dst = appendHeader(dst, typeEvent, ch)
	dst = append(dst, byte(b.Kind))
	if tail.Kind != runtime.KindBatch {
		return appendBarrier(dst, b, flagPriority)
	}
	dst = appendBarrier(dst, b, flagPriority|flagTail)
	return runtime.AppendBatch(dst, tail, bc)
}

// appendBarrier appends barrier b's payload: its id, trigger time and
// completed checkpoint, then flags and b.Aligned.
func appendBarrier(dst []byte, b runtime.Event, flags byte) []byte {
	if b.Aligned {
		flags |= flagAligned
	}
	dst = binary.AppendUvarint(dst, uint64(b.ID))
	dst = binary.AppendVarint(dst, b.Time)
	dst = binary.AppendUvarint(dst, uint64(b.Completed))
	return append(dst, flags)
}

// frame is a received frame; payload aliases a frameReader's buffers,
// until its next frame.
type frame struct {
	typ     byte
	channel uint64
	payload []byte
	size    int // on the wire, its length prefix included
}

// frameReader reads frames without copying those its bufio.Reader holds
// whole: a frame aliases the reader's buffer, or big for one larger than
// that, and is valid until the next. NB: what a frame decodes into must
// not alias it (runtime.BatchCodec.Decode copies).
type frameReader struct {
	r *bufio.Reader
	// pending is the size of the frame last returned, which the next
	// read discards: its bytes stay put until then.
	pending int
	big     []byte // for frames larger than r's buffer
}

// maxKeptBytes bounds the buffer a frameReader keeps for large frames
// between them: a larger one is read into a buffer of its own.
const maxKeptBytes = 1 << 20

// release lets the buffers of the frame last read go.
func (fr *frameReader) release() {
	fr.r.Discard(fr.pending) // NB: buffered: Peek returned it
	fr.pending = 0
}

// buffered reports whether the next frame is buffered whole.
func (fr *frameReader) buffered() bool {
	r := fr.r
	if r.Buffered() < 4 {
		return false // NB: before Peek, which would wait for more
	}
	head, err := r.Peek(4)
	if err != nil {
		return false
	}
	return uint64(r.Buffered()) >= 4+uint64(binary.BigEndian.Uint32(head))
}

// next releases the last frame and reads the next.
func (fr *frameReader) next() (frame, error) {
	fr.release()
	r := fr.r
	head, err := r.Peek(4)
	if err != nil {
		if errors.Is(err, io.EOF) && r.Buffered() > 0 {
			err = io.ErrUnexpectedEOF
		}
		return frame{}, err
	}
	n := binary.BigEndian.Uint32(head)
	if n < 2 || n > MaxFrameBytes {
		return frame{}, protocolErr("frame length %d outside 2..%d", n, MaxFrameBytes)
	}
	var buf []byte
	if size := 4 + int(n); size <= r.Size() {
		if buf, err = r.Peek(size); err == nil {
			buf, fr.pending = buf[4:], size
		}
	} else {
		r.Discard(4)
		if int(n) <= maxKeptBytes {
			fr.big = slices.Grow(fr.big[:0], int(n))
			buf = fr.big[:n]
		} else {
			buf = make([]byte, n)
		}
		_, err = io.ReadFull(r, buf)
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return frame{}, err
	}
	ch, k := binary.Uvarint(buf[1:])
	if k <= 0 {
		return frame{}, protocolErr("bad channel number")
	}
	return frame{typ: buf[0], channel: ch, payload: buf[1+k:], size: 4 + int(n)}, nil
}

func checkHello(f frame) error {
	if f.typ != typeHello || len(f.payload) != len(magic)+1 || string(f.payload[:len(magic)]) != string(magic) {
		return protocolErr("the peer did not greet as a Weir process")
	}
	if v := f.payload[len(magic)]; v != version {
		return protocolErr("the peer speaks protocol version %d, this process %d (run the same Weir version everywhere)", v, version)
	}
	return nil
}

func decodeCredit(p []byte) (int, error) {
	n, k := binary.Uvarint(p)
	if k != len(p) || n == 0 || n > maxCredits {
		return 0, protocolErr("bad credit")
	}
	return int(n), nil
}

// decodeEvent decodes an event frame's payload: the event, and an
// overtaking barrier's tail batch (else the zero Event). A batch (the
// event or the tail) is decoded into the slices of reuse, a batch the
// receiver is done with, where they are large enough.
func decodeEvent(p []byte, bc BatchCodec, reuse runtime.Event) (e, tail runtime.Event, err error) {
	if len(p) == 0 {
		return e, tail, protocolErr("empty event")
	}
	e.Kind = runtime.Kind(p[0])
	p = p[1:]
	switch e.Kind {
	case runtime.KindBatch:
		b, err := runtime.DecodeBatch(p, bc, reuse)
		if err != nil {
			return e, tail, protocolErr("%v", err)
		}
		return b, tail, nil
	case runtime.KindBarrier:
		return decodeBarrier(p, bc, reuse)
	case runtime.KindCancel:
		id, k := binary.Uvarint(p)
		if k != len(p) || id == 0 {
			return e, tail, protocolErr("bad checkpoint id")
		}
		e.ID = checkpoint.ID(id)
		return e, tail, nil
	case runtime.KindWatermark:
		t, k := binary.Varint(p)
		if k != len(p) {
			return e, tail, protocolErr("bad watermark")
		}
		e.Time = t
		return e, tail, nil
	case runtime.KindEndOfData, runtime.KindIdle:
		if len(p) != 0 {
			return e, tail, protocolErr("bytes after %v", e)
		}
		return e, tail, nil
	}
	return e, tail, protocolErr("unknown event kind %d", e.Kind)
}

// decodeBarrier decodes a barrier's payload after its kind.
func decodeBarrier(p []byte, bc BatchCodec, reuse runtime.Event) (e, tail runtime.Event, err error) {
	e.Kind = runtime.KindBarrier
	id, k := binary.Uvarint(p)
	if k <= 0 || id == 0 {
		return e, tail, protocolErr("bad checkpoint id")
	}
	e.ID = checkpoint.ID(id)
	p = p[k:]
	if e.Time, k = binary.Varint(p); k <= 0 {
		return e, tail, protocolErr("%v without its trigger time", e)
	}
	p = p[k:]
	completed, k := binary.Uvarint(p)
	if k <= 0 {
		return e, tail, protocolErr("%v without its completed checkpoint", e)
	}
	e.Completed = checkpoint.ID(completed)
	p = p[k:]
	if len(p) == 0 {
		return e, tail, protocolErr("%v without its flags", e)
	}
	flags := p[0]
	p = p[1:]
	if flags&^flagsKnown != 0 {
		return e, tail, protocolErr("%v with unknown flags %#x", e, flags&^flagsKnown)
	}
	e.Aligned = flags&flagAligned != 0
	e.Priority = flags&flagPriority != 0
	if flags&flagTail == 0 {
		if len(p) != 0 {
			return e, tail, protocolErr("bytes after %v", e)
		}
		return e, tail, nil
	}
	if !e.Priority {
		return e, tail, protocolErr("%v sent with a credit carries a tail batch: only an overtaking one may", e)
	}
	if tail, err = runtime.DecodeBatch(p, bc, reuse); err != nil {
		return e, runtime.Event{}, protocolErr("%v: tail: %v", e, err)
	}
	return e, tail, nil
}
