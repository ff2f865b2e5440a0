package transport

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"testing"
)

// choppy returns what src holds in reads of random sizes (1 to max bytes),
// as a network connection does.
type choppy struct {
	src []byte
	rng *rand.Rand
	max int
}

func (c *choppy) Read(p []byte) (int, error) {
	if len(c.src) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(c.src), 1+c.rng.IntN(c.max))
	copy(p, c.src[:n])
	c.src = c.src[n:]
	return n, nil
}

// reviewPayloadSize draws a frame payload size around the edges that
// matter to frameReader: tiny, about the 64 KiB read buffer (a frame of
// exactly its size is peeked whole, one byte more is read into the kept
// buffer), about the 1 MiB kept-buffer bound, and between.
func reviewPayloadSize(rng *rand.Rand, channelBytes int) int {
	const buf = 64 << 10
	head := 4 + 1 + channelBytes // length, type, channel
	switch rng.IntN(8) {
	case 0, 1, 6, 7:
		return rng.IntN(200)
	case 2:
		return max(0, buf-head+rng.IntN(9)-4)
	case 3:
		return max(0, maxKeptBytes-1-channelBytes+rng.IntN(9)-4)
	case 4:
		return buf + rng.IntN(maxKeptBytes)
	default:
		return rng.IntN(buf)
	}
}

type reviewFrame struct {
	typ     byte
	channel uint64
	payload []byte
}

func (f reviewFrame) append(dst []byte) []byte {
	at := len(dst)
	dst = append(dst, 0, 0, 0, 0, f.typ)
	dst = binary.AppendUvarint(dst, f.channel)
	dst = append(dst, f.payload...)
	binary.BigEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
	return dst
}

// TestReviewFrameReaderAgainstRandomFramesAndReads: frames of random sizes
// (around the read buffer's size and the kept buffer's bound included),
// delivered in reads of random sizes, come out of frameReader exactly as
// written, each readable until the next is read; a stream cut anywhere
// inside a frame ends with io.ErrUnexpectedEOF, and at a frame boundary
// with io.EOF.
func TestReviewFrameReaderAgainstRandomFramesAndReads(t *testing.T) {
	for seed := range 8 {
		rng := rand.New(rand.NewPCG(uint64(seed), 23))
		fill := rand.NewChaCha8([32]byte{byte(seed)})
		var frames []reviewFrame
		var wire []byte
		var ends []int // where each frame ends on the wire
		for range 16 {
			ch := rng.Uint64N(1 << (7 * (1 + rng.IntN(3))))
			p := make([]byte, reviewPayloadSize(rng, len(binary.AppendUvarint(nil, ch))))
			fill.Read(p)
			f := reviewFrame{typ: byte(1 + rng.IntN(5)), channel: ch, payload: p}
			frames = append(frames, f)
			wire = f.append(wire)
			ends = append(ends, len(wire))
		}
		cut := len(wire)
		if seed%2 == 1 {
			cut = rng.IntN(len(wire))
		}
		maxRead := []int{61, 509, 4096, 70 << 10}[seed%4]
		fr := &frameReader{r: bufio.NewReaderSize(&choppy{src: wire[:cut], rng: rng, max: maxRead}, 64<<10)}
		whole := 0
		for _, e := range ends {
			if e <= cut {
				whole++
			}
		}
		for i := range whole {
			f, err := fr.next()
			if err != nil {
				t.Fatalf("seed %d: frame %d of %d bytes: %v", seed, i, len(frames[i].payload), err)
			}
			want := frames[i]
			if f.typ != want.typ || f.channel != want.channel || !bytes.Equal(f.payload, want.payload) {
				t.Fatalf("seed %d: frame %d (%d bytes): got type %d channel %d %d bytes, want type %d channel %d",
					seed, i, len(want.payload), f.typ, f.channel, len(f.payload), want.typ, want.channel)
			}
			if wantSize := ends[i] - reviewEndBefore(ends, i-1); f.size != wantSize {
				t.Fatalf("seed %d: frame %d: size %d, want %d", seed, i, f.size, wantSize)
			}
		}
		_, err := fr.next()
		atBoundary := cut == len(wire) || slices.Contains(ends, cut) || cut == 0
		switch {
		case atBoundary && !errors.Is(err, io.EOF):
			t.Fatalf("seed %d: after the last whole frame (cut at a boundary): %v, want io.EOF", seed, err)
		case !atBoundary && !errors.Is(err, io.ErrUnexpectedEOF):
			t.Fatalf("seed %d: a frame cut at byte %d: %v, want io.ErrUnexpectedEOF", seed, cut, err)
		}
	}
}

// reviewEndBefore is where frame i starts: where frame i-1 ends.
func reviewEndBefore(ends []int, i int) int {
	if i < 0 {
		return 0
	}
	return ends[i]
}

// TestReviewFrameReaderRefusesBadLengths: a length below 2 or above
// MaxFrameBytes, or a channel number that does not fit the frame, is a
// protocol error, not a read of that many bytes.
func TestReviewFrameReaderRefusesBadLengths(t *testing.T) {
	for _, head := range [][]byte{
		{0, 0, 0, 0},
		{0, 0, 0, 1, typeEvent},
		binary.BigEndian.AppendUint32(nil, MaxFrameBytes+1),
		{0, 0, 0, 2, typeEvent, 0x80}, // the channel's uvarint goes on past the frame
	} {
		fr := &frameReader{r: bufio.NewReaderSize(bytes.NewReader(append(head, make([]byte, 16)...)), 64<<10)}
		if _, err := fr.next(); !errors.Is(err, ErrProtocol) {
			t.Errorf("frame head %x: %v, want ErrProtocol", head, err)
		}
	}
}
