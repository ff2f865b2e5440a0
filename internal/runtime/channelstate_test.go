package runtime

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/operator"
)

// collectInput is an operator.Input that keeps what it is given.
type collectInput struct{ got []string }

func (c *collectInput) ProcessBatch(_ int, batch any, _ []int64, _ []uint16) error {
	c.got = append(c.got, batch.([]string)...)
	return nil
}

// channelStateOfStrings is a task's channel state of one section of
// words, its records typed typ.
func channelStateOfStrings(typ string, words ...string) []byte {
	bc := Typed(Batches(codec.For[string]()), typ)
	var p pendingState
	p.add(0, AppendBatch(nil, Event{Batch: words}, bc))
	return p.encode([]channelInfo{{input: 0, partition: graph.Rebalance, codec: bc}})
}

func replayInto(t *testing.T, blob []byte, bc BatchCodec) (*collectInput, error) {
	t.Helper()
	in := &collectInput{}
	r := &channelRestore{
		handles:     []checkpoint.Handle{{Operator: "op", Subtask: 0, Parallelism: 1}},
		read:        func(checkpoint.Handle) ([]byte, error) { return blob, nil },
		into:        in,
		codecs:      map[int]BatchCodec{0: bc},
		parallelism: 1,
	}
	return in, (&task{}).replay(r)
}

// Channel state records its records' type; a restore replays records of
// the type the job sends now, refuses another for good (not as damage,
// which would fall back to earlier checkpoints and delete newer ones), and
// reads channel state of the format before types unchecked.
func TestChannelStateRecordsItsRecordsType(t *testing.T) {
	strs := Batches(codec.For[string]())
	t.Run("same type", func(t *testing.T) {
		in, err := replayInto(t, channelStateOfStrings("string", "a", "b"), Typed(strs, "string"))
		if err != nil || !slices.Equal(in.got, []string{"a", "b"}) {
			t.Fatalf("replayed %q, %v", in.got, err)
		}
	})
	t.Run("another type", func(t *testing.T) {
		_, err := replayInto(t, channelStateOfStrings("int64", "a"), Typed(strs, "string"))
		if !errors.Is(err, ErrChannelStateChanged) || !operator.IsPermanent(err) || errors.Is(err, checkpoint.ErrStateDamaged) ||
			!strings.Contains(err.Error(), "int64") || !strings.Contains(err.Error(), "savepoint") {
			t.Fatalf("replay of another type: %v; want a permanent ErrChannelStateChanged naming both types and the fix", err)
		}
	})
	t.Run("not typed", func(t *testing.T) {
		in, err := replayInto(t, channelStateOfStrings("", "a"), Typed(strs, "string"))
		if err != nil || !slices.Equal(in.got, []string{"a"}) {
			t.Fatalf("replayed %q, %v", in.got, err)
		}
	})
	t.Run("format 1", func(t *testing.T) {
		// "wcs1": no type in a section's header.
		b := append([]byte("wcs1"), 1, 0, byte(graph.Rebalance), 0, 1)
		batch := AppendBatch(nil, Event{Batch: []string{"old"}}, strs)
		b = binary.AppendUvarint(b, uint64(len(batch)))
		b = append(b, batch...)
		b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
		in, err := replayInto(t, b, Typed(strs, "string"))
		if err != nil || !slices.Equal(in.got, []string{"old"}) {
			t.Fatalf("replayed %q, %v", in.got, err)
		}
	})
	t.Run("does not decode", func(t *testing.T) {
		ints := Typed(Batches(codec.For[int64]()), "")
		_, err := replayInto(t, channelStateOfStrings("", strings.Repeat("x", 300)), ints)
		if !errors.Is(err, ErrChannelStateChanged) || !operator.IsPermanent(err) || errors.Is(err, checkpoint.ErrStateDamaged) {
			t.Fatalf("replay of intact records that do not decode: %v; want a permanent ErrChannelStateChanged", err)
		}
	})
	t.Run("damaged", func(t *testing.T) {
		b := channelStateOfStrings("string", "a")
		b[len(b)/2] ^= 1
		_, err := replayInto(t, b, Typed(strs, "string"))
		if !errors.Is(err, ErrChannelStateDamaged) || !errors.Is(err, checkpoint.ErrStateDamaged) {
			t.Fatalf("replay of a flipped bit: %v; want damage", err)
		}
	})
}
