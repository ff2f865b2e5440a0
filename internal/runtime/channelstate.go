package runtime

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"reflect"
	"slices"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/operator"
)

// KindChannelState is the checkpoint.Handle.Kind of a task's channel state:
// the records of an unaligned checkpoint that were in flight to the task
// (on its input channels, or overtaken by a barrier) when it took its
// snapshot. The handle's Operator is the UID of the task's head.
const KindChannelState = "channel"

// Channel state format: one blob per task and checkpoint,
//
//	magic    "wcs2"
//	uvarint  count of sections; each section is one input channel's:
//	  uvarint  the head's input the channel feeds (Edge.Input)
//	  uvarint  the partitioning of its edge (graph.Partition)
//	  uvarint  the upstream subtask
//	  uvarint  length, then the records' type (Typed; may be empty)
//	  uvarint  count of batches; each batch is
//	    uvarint length, then the batch as AppendBatch encodes it
//	uint32   CRC-32C (Castagnoli) of all that precedes, big-endian
//
// Sections come in the task's channel order, batches in the order they
// travelled: a restore replays them so, before any live data. "wcs1",
// written before the records' type was, has no type and is read unchecked.
var (
	channelStateMagic   = []byte("wcs2")
	channelStateMagicV1 = []byte("wcs1")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrChannelStateDamaged is the error of channel state whose bytes are not
// what was written (its magic or checksum): damaged state
// (checkpoint.ErrStateDamaged), which a restore treats as it treats other
// damaged state. Intact channel state that this version of the job cannot
// replay (another input, another record type, records that do not decode)
// is a change of the job, and fails the restore for good instead
// (ErrChannelStateChanged): an earlier checkpoint would not do better.
var ErrChannelStateDamaged = fmt.Errorf("channel state damaged: %w", checkpoint.ErrStateDamaged)

// ErrChannelStateChanged is the error (permanent) of intact channel state
// that this version of the job cannot replay.
var ErrChannelStateChanged = errors.New("the records in flight that an unaligned checkpoint holds do not fit the job")

// channelInfo says where a gate channel comes from.
type channelInfo struct {
	input     int // the head's input it feeds
	partition graph.Partition
	upstream  int // upstream subtask
	codec     BatchCodec
}

// section is one input channel's part of a checkpoint's channel state.
type section struct {
	data    []byte // batches, each uvarint length then the batch
	batches int
}

// pendingState is a checkpoint a task snapshotted, or is aligning, whose
// channel state it collects.
type pendingState struct {
	chans map[int]*section // by gate channel
	// snapshot is the operators' part, set by an unaligned snapshot and
	// written when the channel state is complete.
	snapshot *snapshotParts
}

// snapshotParts is what a task's snapshot hands its writer: the
// operators' asynchronous parts, and the report's timings.
type snapshotParts struct {
	asyncs      []operator.Async
	sync, align time.Duration
	arrivals    []time.Duration
	unaligned   bool
}

func (p *pendingState) add(ch int, encoded []byte) {
	if p.chans == nil {
		p.chans = map[int]*section{}
	}
	s := p.chans[ch]
	if s == nil {
		s = &section{}
		p.chans[ch] = s
	}
	s.data = binary.AppendUvarint(s.data, uint64(len(encoded)))
	s.data = append(s.data, encoded...)
	s.batches++
}

// encode returns the channel state blob, or nil when there is none.
func (p *pendingState) encode(info []channelInfo) []byte {
	if len(p.chans) == 0 {
		return nil
	}
	chans := make([]int, 0, len(p.chans))
	size := 16
	for ch, s := range p.chans {
		chans = append(chans, ch)
		size += len(s.data) + 32
	}
	slices.Sort(chans)
	dst := make([]byte, 0, size)
	dst = append(dst, channelStateMagic...)
	dst = binary.AppendUvarint(dst, uint64(len(chans)))
	for _, ch := range chans {
		s, in := p.chans[ch], info[ch]
		dst = binary.AppendUvarint(dst, uint64(in.input))
		dst = binary.AppendUvarint(dst, uint64(in.partition))
		dst = binary.AppendUvarint(dst, uint64(in.upstream))
		typ := recordType(in.codec)
		dst = binary.AppendUvarint(dst, uint64(len(typ)))
		dst = append(dst, typ...)
		dst = binary.AppendUvarint(dst, uint64(s.batches))
		dst = append(dst, s.data...)
	}
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst, castagnoli))
}

// stateSection is a decoded section: its batches still encoded.
type stateSection struct {
	input     int
	partition graph.Partition
	upstream  int
	typ       string // the records' type (Typed); "" if not recorded
	batches   [][]byte
}

// decodeChannelState splits a channel state blob into its sections.
func decodeChannelState(b []byte) ([]stateSection, error) {
	bad := func(what string) error { return fmt.Errorf("%w: %s", ErrChannelStateDamaged, what) }
	if len(b) < len(channelStateMagic)+4 {
		return nil, bad("not channel state (no magic)")
	}
	typed := string(b[:len(channelStateMagic)]) == string(channelStateMagic)
	if !typed && string(b[:len(channelStateMagicV1)]) != string(channelStateMagicV1) {
		return nil, bad("not channel state (no magic)")
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return nil, bad("checksum mismatch")
	}
	p := body[len(channelStateMagic):]
	uv := func() (uint64, bool) {
		v, k := binary.Uvarint(p)
		if k <= 0 {
			return 0, false
		}
		p = p[k:]
		return v, true
	}
	n, ok := uv()
	if !ok || n > uint64(len(p)) {
		return nil, bad("bad section count")
	}
	out := make([]stateSection, 0, n)
	for range n {
		var vals [3]uint64
		for i := range vals {
			if vals[i], ok = uv(); !ok {
				return nil, bad("bad section header")
			}
		}
		s := stateSection{input: int(vals[0]), partition: graph.Partition(vals[1]), upstream: int(vals[2])}
		if typed {
			l, ok := uv()
			if !ok || l > uint64(len(p)) {
				return nil, bad("bad type length")
			}
			s.typ, p = string(p[:l]), p[l:]
		}
		batches, ok := uv()
		if !ok || batches > uint64(len(p)) {
			return nil, bad("bad batch count")
		}
		for range batches {
			l, ok := uv()
			if !ok || l > uint64(len(p)) {
				return nil, bad("bad batch length")
			}
			s.batches = append(s.batches, p[:l])
			p = p[l:]
		}
		out = append(out, s)
	}
	if len(p) != 0 {
		return nil, bad(fmt.Sprintf("%d bytes after the last section", len(p)))
	}
	return out, nil
}

// channelRestore is what a task replays of a restored checkpoint's channel
// state, and how it picks it: see replay.
type channelRestore struct {
	handles []checkpoint.Handle // a node's channel state, every subtask's
	read    func(checkpoint.Handle) ([]byte, error)
	// into is where the node's records go: the task's head, or a node
	// chained after it (TaskParts.Chained).
	into operator.Input
	// codecs of the node's inputs; subtask, parallelism and key groups of
	// the task.
	codecs      map[int]BatchCodec
	subtask     int
	parallelism int
	keyGroups   keygroup.Range
}

// replay processes the channel state of the restored checkpoint that is
// this task's, before anything else. At the parallelism it was taken at, a
// subtask replays its own. Rescaled:
//   - hash: every record goes to the subtask that owns its key group now;
//   - forward and rebalance: the state of old subtask i goes whole to new
//     subtask i mod the new parallelism (their records may go anywhere);
//   - broadcast: new subtask j takes old subtask j mod the old
//     parallelism's, as every subtask gets every record.
func (t *task) replay(r *channelRestore) error {
	hs := slices.Clone(r.handles)
	slices.SortFunc(hs, func(a, b checkpoint.Handle) int { return a.Subtask - b.Subtask })
	for _, h := range hs {
		same := h.Parallelism == r.parallelism
		if same && h.Subtask != r.subtask {
			continue
		}
		data, err := r.read(h)
		if err != nil {
			return fmt.Errorf("read channel state of %s subtask %d: %w", h.Operator, h.Subtask, err)
		}
		sections, err := decodeChannelState(data)
		if err != nil {
			return fmt.Errorf("channel state of %s subtask %d: %w", h.Operator, h.Subtask, err)
		}
		changed := func(format string, args ...any) error {
			return operator.Permanent(fmt.Errorf("channel state of %s subtask %d: %w: %s; restore a savepoint or an aligned checkpoint instead (they hold no records in flight), or restore this checkpoint with the job's earlier version and take a savepoint of it (weir savepoint) to restore with this one",
				h.Operator, h.Subtask, ErrChannelStateChanged, fmt.Sprintf(format, args...)))
		}
		for _, s := range sections {
			bc := r.codecs[s.input]
			if bc == nil {
				return changed("it holds records in flight into input %d, which the operator no longer has", s.input)
			}
			if now := recordType(bc); s.typ != "" && now != "" && s.typ != now {
				return changed("its input %d carried records of type %s, and the job now sends it %s", s.input, s.typ, now)
			}
			whole, filter := same, false
			if !same {
				switch s.partition {
				case graph.Hash:
					filter = true
				case graph.Broadcast:
					whole = h.Subtask == r.subtask%h.Parallelism
				default:
					whole = h.Subtask%r.parallelism == r.subtask
				}
			}
			if !whole && !filter {
				continue
			}
			for _, b := range s.batches {
				ev, err := DecodeBatch(b, bc, Event{})
				if err != nil {
					// Intact (its checksum holds): written as another type.
					return changed("a batch into its input %d does not decode as the records the job sends it now: %v", s.input, err)
				}
				if filter {
					if ev.Groups == nil {
						return fmt.Errorf("channel state of %s subtask %d: %w: a hash channel's batch without key groups", h.Operator, h.Subtask, ErrChannelStateDamaged)
					}
					ev = keepGroups(ev, r.keyGroups)
				}
				if batchLen(ev.Batch) == 0 {
					continue
				}
				if err := r.into.ProcessBatch(s.input, ev.Batch, ev.Times, ev.Groups); err != nil {
					return fmt.Errorf("task %s: replay channel state: %w", t.id, err)
				}
				if err := t.outputErr(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// batchLen is the number of records of a batch (a []T).
func batchLen(batch any) int { return reflect.ValueOf(batch).Len() }

// keepGroups returns the records of batch e whose key group is in r (a
// restore's slow path: reflection is fine here).
func keepGroups(e Event, r keygroup.Range) Event {
	v := reflect.ValueOf(e.Batch)
	kept := reflect.MakeSlice(v.Type(), 0, v.Len())
	out := Event{Kind: KindBatch}
	for i, g := range e.Groups {
		if !r.Contains(int(g)) {
			continue
		}
		kept = reflect.Append(kept, v.Index(i))
		out.Groups = append(out.Groups, g)
		if e.Times != nil {
			out.Times = append(out.Times, e.Times[i])
		}
	}
	out.Batch = kept.Interface()
	return out
}
