// Package generator is a deterministic source: record i is Make(i), so a
// restored source replays exactly the records it produced before.
package generator

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state"
)

// Config configures a generator.
type Config[T any] struct {
	// Count is how many records the whole source produces; 0 is unbounded.
	Count int64
	// RatePerSecond bounds the records per second of the whole source,
	// spread over its subtasks; 0 is as fast as possible.
	RatePerSecond float64
	// Make builds record i; it must be deterministic.
	Make func(i int64) T
	// BatchSize is the most records one Read emits; default 1024.
	BatchSize int
}

// New returns a generator source. Subtask s of p produces the records
// i ≡ s (mod p); its position is checkpointed.
func New[T any](cfg Config[T]) (func() weir.SourceReader[T], error) {
	switch {
	case cfg.Make == nil:
		return nil, errors.New("generator: Make is required")
	case cfg.Count < 0 || cfg.RatePerSecond < 0:
		return nil, fmt.Errorf("generator: count %d and rate %v must not be negative", cfg.Count, cfg.RatePerSecond)
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 1024
	}
	return func() weir.SourceReader[T] { return &reader[T]{cfg: cfg} }, nil
}

// stride is a residue class of record numbers: Next, Next+Step, ... For
// event time it is a split of its own (so that after a restore at a lower
// parallelism, one subtask's strides keep their own watermarks).
type stride struct {
	Next, Step int64
	// End, if above 0, ends the stride before the source's Count: a
	// rewound stride stops where the checkpoint recorded it.
	End int64
	id  string
}

func newStride(next, step int64) stride {
	return stride{Next: next, Step: step, id: fmt.Sprintf("%d mod %d", next%step, step)}
}

type reader[T any] struct {
	operator.Base
	cfg     Config[T]
	ctx     *operator.Context
	strides []stride
	// turn is the stride the next Read reads; entered, whether the
	// strides were declared as splits.
	turn    int
	entered bool
	// rate limiting: records allowed since start
	start   time.Time
	emitted int64
}

func (r *reader[T]) Open(ctx *operator.Context) error {
	r.ctx = ctx
	r.start = ctx.Now()
	switch {
	case ctx.Rewind:
		return r.rewind(ctx.Restore)
	case ctx.Restore == nil:
		r.strides = []stride{newStride(int64(ctx.Subtask), int64(ctx.Parallelism))}
		return nil
	}
	strides, err := restoreStrides(ctx.Restore, ctx.Subtask, ctx.Parallelism)
	r.strides = strides
	return err
}

// restoreStrides is subtask i of p's share of the strides rs records.
func restoreStrides(rs *operator.Restore, i, p int) ([]stride, error) {
	items, err := state.RestoreList(rs.Handles, rs.Read, state.Split, "strides", i, p)
	if err != nil {
		return nil, err
	}
	var strides []stride
	for _, it := range items {
		next, n1 := binary.Varint(it)
		step, n2 := binary.Varint(it[max(n1, 0):])
		if n1 <= 0 || n2 <= 0 || step <= 0 {
			return nil, fmt.Errorf("generator: restore position: %w", codec.ErrShort)
		}
		strides = append(strides, newStride(next, step))
	}
	return strides, nil
}

// Rewindable: record i is Make(i), and a bounded source's strides that
// are not recorded were read to the end.
func (r *reader[T]) Rewindable() error {
	if r.cfg.Count == 0 {
		return errors.New("an unbounded generator (Count 0) cannot be rewound: what it read of the strides a checkpoint does not record is not known")
	}
	return nil
}

// rewind takes this subtask's share of the records checkpoint rs had
// produced (nil: none): every residue class of the recorded strides' step
// up to where its stride is recorded, or to Count when it is not (it
// ended), read from its start, without the rate limit.
func (r *reader[T]) rewind(rs *operator.Restore) error {
	r.cfg.RatePerSecond = 0
	if rs == nil {
		return nil
	}
	recorded, err := restoreStrides(rs, 0, 1)
	if err != nil {
		return err
	}
	if len(recorded) == 0 {
		// Every stride ended: the checkpoint had produced all Count.
		recorded = []stride{{Next: r.cfg.Count, Step: 1}}
	}
	step := recorded[0].Step
	end := make([]int64, step)
	for i := range end {
		end[i] = r.cfg.Count
	}
	for _, s := range recorded {
		if s.Step != step {
			return operator.Permanent(fmt.Errorf("generator: checkpoint %d records strides of steps %d and %d: it cannot be rewound", rs.Checkpoint, step, s.Step))
		}
		end[s.Next%step] = min(s.Next, r.cfg.Count)
	}
	for res := int64(r.ctx.Subtask); res < step; res += int64(r.ctx.Parallelism) {
		if res < end[res] {
			s := newStride(res, step)
			s.End = end[res]
			r.strides = append(r.strides, s)
		}
	}
	return nil
}

func (r *reader[T]) Read(out weir.Collector[T]) (operator.PollResult, error) {
	n := r.cfg.BatchSize
	if r.cfg.RatePerSecond > 0 {
		perTask := r.cfg.RatePerSecond / float64(r.ctx.Parallelism)
		elapsed := r.ctx.Now().Sub(r.start)
		allowed := int64(elapsed.Seconds()*perTask) + 1 - r.emitted
		if allowed <= 0 {
			wait := time.Duration(float64(r.emitted)/perTask*float64(time.Second)) - elapsed
			return operator.PollResult{IdleUntil: r.ctx.Now().Add(max(wait, time.Millisecond))}, nil
		}
		n = int(min(int64(n), allowed))
	}
	if !r.entered {
		// Every stride holds the watermark back from the start, not only
		// once it is read.
		for _, s := range r.strides {
			weir.EnterSplit(out, s.id)
		}
		r.entered = true
	}
	// One stride a Read, in turn.
	if len(r.strides) > 0 {
		r.turn %= len(r.strides)
		s := &r.strides[r.turn]
		weir.EnterSplit(out, s.id)
		end := r.cfg.Count
		if s.End > 0 {
			end = s.End
		}
		for ; n > 0 && (end == 0 || s.Next < end); n-- {
			out.Collect(r.cfg.Make(s.Next))
			s.Next += s.Step
			r.emitted++
		}
		if end > 0 && s.Next >= end {
			weir.FinishSplit(out, s.id)
			r.strides = slices.Delete(r.strides, r.turn, r.turn+1)
		} else {
			r.turn++
		}
	}
	return operator.PollResult{Exhausted: len(r.strides) == 0}, nil
}

func (r *reader[T]) Snapshot(checkpoint.ID) (operator.Async, error) {
	items := make([][]byte, len(r.strides))
	for i, s := range r.strides {
		items[i] = binary.AppendVarint(binary.AppendVarint(nil, s.Next), s.Step)
	}
	return r.ctx.SnapshotList(state.Split, "strides", items), nil
}
