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
	id         string
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
	if ctx.Restore == nil {
		r.strides = []stride{newStride(int64(ctx.Subtask), int64(ctx.Parallelism))}
		return nil
	}
	items, err := state.RestoreList(ctx.Restore.Handles, ctx.Restore.Read, state.Split, "strides", ctx.Subtask, ctx.Parallelism)
	if err != nil {
		return err
	}
	for _, it := range items {
		next, n1 := binary.Varint(it)
		step, n2 := binary.Varint(it[max(n1, 0):])
		if n1 <= 0 || n2 <= 0 || step <= 0 {
			return fmt.Errorf("generator: restore position: %w", codec.ErrShort)
		}
		r.strides = append(r.strides, newStride(next, step))
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
		for ; n > 0 && (r.cfg.Count == 0 || s.Next < r.cfg.Count); n-- {
			out.Collect(r.cfg.Make(s.Next))
			s.Next += s.Step
			r.emitted++
		}
		if r.cfg.Count > 0 && s.Next >= r.cfg.Count {
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
