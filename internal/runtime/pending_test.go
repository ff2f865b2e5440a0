package runtime

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/storage"
)

// heldSource is a source that emits nothing and, in subtask 1, writes its
// state of checkpoint 1 only once released; its input ends once ended is
// set.
type heldSource struct {
	operator.Base
	ctx     *operator.Context
	release <-chan struct{}
	ended   *atomic.Bool
}

func (s *heldSource) Open(ctx *operator.Context) error { s.ctx = ctx; return nil }

func (s *heldSource) Poll() (operator.PollResult, error) {
	if s.ended.Load() {
		return operator.PollResult{Exhausted: true}, nil
	}
	return operator.PollResult{IdleUntil: time.Now().Add(5 * time.Millisecond)}, nil
}

func (s *heldSource) Snapshot(id checkpoint.ID) (operator.Async, error) {
	if id != 1 || s.ctx.Subtask != 1 {
		return nil, nil
	}
	return func(operator.Writer) ([]checkpoint.Handle, error) {
		<-s.release
		return nil, nil
	}, nil
}

// TestDriverPublishesTheCheckpointsInFlight: while a source subtask writes
// its state of checkpoint 1, Stats says checkpoint 1 is in flight with the
// other subtask's acknowledgement and not this one's, and the subtask's
// progress says it took the trigger and snapshotted; once the run ended,
// nothing is in flight.
func TestDriverPublishesTheCheckpointsInFlight(t *testing.T) {
	plan, err := graph.NewPlan(graph.Graph{Nodes: []graph.Node{{UID: "held", Kind: graph.KindSink, Parallelism: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var ended atomic.Bool
	stats := NewStats()
	spec := Spec{
		Name: "inflight", Plan: plan, Storage: storage.NewMemory(0), Checkpoint: checkpoint.Config{Interval: 10 * time.Millisecond},
		Stats: stats, Logger: slog.New(slog.DiscardHandler),
		Build: func(*TaskBuild) (*TaskParts, error) {
			op := &heldSource{release: release, ended: &ended}
			return &TaskParts{Ops: []operator.Operator{op}, Head: op}, nil
		},
	}
	done := make(chan error, 1)
	go func() {
		_, err := Run(context.Background(), spec)
		done <- err
	}()
	held := checkpoint.TaskID{Vertex: "held", Subtask: 1}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var progress BarrierProgress
		for _, st := range stats.Read(time.Now()) {
			if st.Task == held {
				progress = st.Barrier
			}
		}
		pending := stats.Pending()
		if len(pending) == 1 && pending[0].ID == 1 && pending[0].Acknowledged() == 1 && !pending[0].Tasks[1].Acknowledged &&
			pending[0].Tasks[0].Acknowledged && !pending[0].Tasks[0].At.Before(pending[0].Triggered) &&
			progress.ID == 1 && progress.Done && progress.Channels == 0 && !progress.Since.IsZero() {
			break
		}
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("no checkpoint 1 in flight with held#0 acknowledged and held#1 writing within 30 s: in flight %+v, held#1's progress %+v", pending, progress)
		}
		time.Sleep(time.Millisecond) // polls for a condition
	}
	close(release)
	ended.Store(true)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if p := stats.Pending(); len(p) > 0 {
		t.Fatalf("the run ended with checkpoints in flight: %+v", p)
	}
}
