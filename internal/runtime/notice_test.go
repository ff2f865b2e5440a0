package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state/heap"
	"github.com/weirstream/weir/storage"
)

// idleSource emits nothing until ended is set, then ends.
type idleSource struct {
	operator.Base
	ended *atomic.Bool
}

func (s *idleSource) Poll() (operator.PollResult, error) {
	if s.ended.Load() {
		return operator.PollResult{Exhausted: true}, nil
	}
	return operator.PollResult{IdleUntil: time.Now().Add(2 * time.Millisecond)}, nil
}

// chainOp has incremental heap state: one key changes in checkpoints 1
// to 3, none after. It records the handles of its snapshots.
type chainOp struct {
	operator.Base
	ctx     *operator.Context
	b       *heap.Backend
	v       *heap.Value[string, int]
	handles *handlesByID
}

// handlesByID are the handles of each checkpoint of a chainOp.
type handlesByID struct {
	mu   sync.Mutex
	byID map[checkpoint.ID][]checkpoint.Handle
}

func (h *handlesByID) of(id checkpoint.ID) []checkpoint.Handle {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.byID[id]
}

func (o *chainOp) Open(ctx *operator.Context) error {
	o.ctx = ctx
	o.b = heap.NewIncremental(keygroup.Range{First: 0, Last: 127})
	var err error
	o.v, err = heap.NewValue(o.b, "counts", codec.For[string](), codec.For[int]())
	return err
}

func (o *chainOp) ProcessBatch(int, any, []int64, []uint16) error { return nil }

func (o *chainOp) Snapshot(id checkpoint.ID) (operator.Async, error) {
	if id <= 3 {
		o.b.SetGroup(7)
		o.v.Put("a", int(id))
	}
	a, err := o.b.Snapshot(id)
	if err != nil {
		return nil, err
	}
	write := o.ctx.StateWriter(a)
	return func(w operator.Writer) ([]checkpoint.Handle, error) {
		hs, err := write(w)
		o.handles.mu.Lock()
		o.handles.byID[id] = hs
		o.handles.mu.Unlock()
		return hs, err
	}, nil
}

func (o *chainOp) NotifyComplete(id checkpoint.ID) error { o.b.NotifyComplete(id); return nil }
func (o *chainOp) NotifyAborted(id checkpoint.ID)        { o.b.NotifyAborted(id) }

// noticeHolder runs the tasks in this process, but holds back the
// completion notices of checkpoints 3 and 4 to task hold, until release.
type noticeHolder struct {
	hold checkpoint.TaskID
	held chan Control // gets each notice held
	mu   sync.Mutex
	x    Execution
}

func (h *noticeHolder) Start(ctx context.Context, spec Spec, p Part, reports chan<- Report) (Execution, error) {
	x, err := Local{}.Start(ctx, spec, p, reports)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.x = x
	h.mu.Unlock()
	return heldExecution{x, h}, nil
}

func (h *noticeHolder) release(ctx context.Context, m Control) {
	h.mu.Lock()
	x := h.x
	h.mu.Unlock()
	x.Send(ctx, h.hold, m)
}

type heldExecution struct {
	Execution
	h *noticeHolder
}

func (x heldExecution) Send(ctx context.Context, id checkpoint.TaskID, m Control) {
	if id == x.h.hold && m.Kind == ControlComplete && (m.ID == 3 || m.ID == 4) {
		x.h.held <- m
		return
	}
	x.Execution.Send(ctx, id, m)
}

// TestLateCompletionNoticeIsAwaited: the notices that checkpoints 3 and
// 4 completed reach a task with incremental heap state only after the
// barriers of 4 and 5 (held back here, as a slow control connection to a
// worker would). Checkpoint 3 wrote a file for the key that changed; 4,
// built on 2, does not reference it, so when 4 completes and retention
// discards 3 the file goes; 5, built on 3, would reference it. A barrier
// says which completion was announced before it, and the task takes that
// notice first: 4 and 5 complete, and every file they reference is there
// when they do.
func TestLateCompletionNoticeIsAwaited(t *testing.T) {
	plan, err := graph.NewPlan(graph.Graph{Nodes: []graph.Node{
		{UID: "src", Kind: "source", Parallelism: 1},
		{UID: "count", Kind: graph.KindSink, Parallelism: 1, Inputs: []graph.Input{{From: 0, Partition: graph.Forward}}, NoChain: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	count := checkpoint.TaskID{Vertex: "count", Subtask: 0}
	holder := &noticeHolder{hold: count, held: make(chan Control, 2)}
	handles := &handlesByID{byID: map[checkpoint.ID][]checkpoint.Handle{}}
	var ended atomic.Bool
	var mu sync.Mutex
	completed, aborted := map[checkpoint.ID]bool{}, map[checkpoint.ID]error{}
	var missing []string // files of checkpoints not there when they completed
	stats := NewStats()
	store := storage.NewMemory(0)
	spec := Spec{
		Name: "notice", Plan: plan, Storage: store, Checkpoint: checkpoint.Config{Interval: 5 * time.Millisecond},
		Executor: holder, Stats: stats, Logger: slog.New(slog.DiscardHandler),
		OnEvent: func(e JobEvent) {
			mu.Lock()
			defer mu.Unlock()
			switch e.Kind {
			case EventCheckpointCompleted:
				completed[e.ID] = true
				for _, h := range handles.of(e.ID) {
					if _, err := store.ReadState(h); err != nil {
						missing = append(missing, fmt.Sprintf("checkpoint %d: %v", e.ID, err))
					}
				}
			case EventCheckpointAborted:
				aborted[e.ID] = e.Err
			}
		},
		Build: func(b *TaskBuild) (*TaskParts, error) {
			if b.Vertex.ID == "src" {
				src := &idleSource{ended: &ended}
				return &TaskParts{Ops: []operator.Operator{src}, Head: src, Outputs: []Output{NewEmitter[int](b.Ctx, b.Outputs[0], nil, 1, nil)}}, nil
			}
			op := &chainOp{handles: handles}
			return &TaskParts{Ops: []operator.Operator{op}, Head: op}, nil
		},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, spec)
		done <- err
	}()
	deadline := time.Now().Add(60 * time.Second)
	for range 2 {
		var notice Control
		select {
		case notice = <-holder.held:
		case err := <-done:
			t.Fatalf("the run ended early: %v", err)
		case <-time.After(time.Until(deadline)):
			t.Fatal("no notice held within 60 s")
		}
		// Release the notice once the next barrier reached the task.
		for {
			var progress BarrierProgress
			for _, st := range stats.Read(time.Now()) {
				if st.Task == count {
					progress = st.Barrier
				}
			}
			if progress.ID > notice.ID {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the barrier of checkpoint %d did not reach %s within 60 s (progress %+v)", notice.ID+1, count, progress)
			}
			time.Sleep(time.Millisecond) // polls for a condition
		}
		holder.release(ctx, notice)
	}
	// Run until a checkpoint after 5 completes, then end the input.
	for {
		mu.Lock()
		over := completed[5] || aborted[5] != nil
		later := false
		for id := range completed {
			later = later || id > 5
		}
		mu.Unlock()
		if over && later {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint after 5 completed within 60 s")
		}
		time.Sleep(time.Millisecond) // polls for a condition
	}
	ended.Store(true)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for id := checkpoint.ID(4); id <= 5; id++ {
		if err := aborted[id]; err != nil || !completed[id] {
			t.Errorf("checkpoint %d: completed %v, aborted: %v", id, completed[id], err)
		}
	}
	if len(missing) > 0 {
		t.Errorf("checkpoints completed referencing state that was not there: %v", missing)
	}
}
