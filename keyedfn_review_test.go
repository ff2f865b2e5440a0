package weir

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
	"github.com/weirstream/weir/state/backend"
)

// kr is a record of the review harness: a key, an event time and a command.
type kr struct {
	Key string
	Cmd string
}

// kh drives processOp subtasks by hand (records, watermarks, processing
// time, checkpoints, restores at any parallelism).
type kh struct {
	t      *testing.T
	cfg    backend.Config
	newFn  func() KeyedProcessFunction[string, kr, string]
	run    operatortest.Run
	w      operatortest.MemWriter
	subs   []*processOp[string, kr, string]
	chains []*chain
	out    []string
	ckpt   *operator.Restore
	next   checkpoint.ID
	hasher *codec.Hasher[string]
}

type khOut struct{ h *kh }

func (o khOut) Collect(s string) { o.h.out = append(o.h.out, s) }

func newKH(t *testing.T, pebble bool, newFn func() KeyedProcessFunction[string, kr, string]) *kh {
	h := &kh{t: t, newFn: newFn, hasher: codec.NewHasher(codec.For[string]())}
	if pebble {
		h.cfg = backend.Config{Kind: backend.Pebble, Dir: t.TempDir()}
	}
	t.Cleanup(func() { h.close(); h.run.Close() })
	return h
}

func (h *kh) open(p int) error {
	h.subs, h.chains = nil, nil
	for sub := range p {
		c := &chain{now: operator.MinTime, group: -1, state: h.cfg}
		op := &processOp[string, kr, string]{fn: h.newFn(), key: func(r kr) string { return r.Key }, kc: codec.For[string]()}
		op.out, op.c = khOut{h}, c
		if err := cmp.Or(op.Open(h.run.Context("op", sub, p, h.ckpt)), c.err); err != nil {
			op.Close() // as the runtime does after a failed Open
			return fmt.Errorf("open subtask %d of %d: %w", sub, p, err)
		}
		h.subs, h.chains = append(h.subs, op), append(h.chains, c)
	}
	return nil
}

func (h *kh) close() {
	for _, s := range h.subs {
		s.Close()
	}
	h.subs = nil
}

func (h *kh) owner(key string) int {
	g := keygroup.Of(h.hasher.Hash(key), keygroup.DefaultMaxParallelism)
	for i := range h.subs {
		if keygroup.ForSubtask(keygroup.DefaultMaxParallelism, len(h.subs), i).Contains(g) {
			return i
		}
	}
	panic("no owner")
}

func (h *kh) record(ts int64, key, cmd string) error {
	i := h.owner(key)
	g := keygroup.Of(h.hasher.Hash(key), keygroup.DefaultMaxParallelism)
	h.chains[i].now, h.chains[i].group = ts, g
	h.subs[i].Collect(kr{Key: key, Cmd: cmd})
	return h.chains[i].err
}

func (h *kh) watermark(wm int64) error {
	for _, s := range h.subs {
		if err := s.AdvanceWatermark(wm); err != nil {
			return err
		}
	}
	return nil
}

func (h *kh) fire(now int64) error {
	for _, s := range h.subs {
		if at, ok := s.NextTimer(); ok && !at.After(time.UnixMilli(now)) {
			if err := s.FireTimers(time.UnixMilli(now)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (h *kh) checkpoint() error {
	h.next++
	id := h.next
	r := &operator.Restore{Checkpoint: id, Read: h.w.Read, Open: h.w.Open}
	for _, s := range h.subs {
		async, err := s.Snapshot(id)
		if err != nil {
			return err
		}
		hs, err := async(&h.w)
		if err != nil {
			return err
		}
		r.Handles = append(r.Handles, hs...)
	}
	for _, s := range h.subs {
		s.NotifyComplete(id)
	}
	h.ckpt = r
	return nil
}

func (h *kh) restore(p int) error {
	h.close()
	return h.open(p)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func onBoth(t *testing.T, f func(t *testing.T, pebble bool)) {
	t.Run("heap", func(t *testing.T) { f(t, false) })
	t.Run("pebble", func(t *testing.T) { f(t, true) })
}

var _ = slices.Sort[[]string]
var _ = strings.Contains
