package runtime

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/operator"
)

// opened is what a probe saw at Open.
type opened struct {
	run              string
	attempt, subtask int
}

// probe is a source that records its context and, in attempt 1, fails in
// subtask 1.
type probe struct {
	operator.Base
	ctx  *operator.Context
	seen func(opened)
}

func (p *probe) Open(ctx *operator.Context) error {
	p.ctx = ctx
	p.seen(opened{ctx.RunID, ctx.Attempt, ctx.Subtask})
	return nil
}

func (p *probe) Poll() (operator.PollResult, error) {
	if p.ctx.Attempt == 1 && p.ctx.Subtask == 1 {
		return operator.PollResult{}, errors.New("planted failure")
	}
	return operator.PollResult{Exhausted: true}, nil
}

// TestRunIDIsOnePerRun: every subtask and every attempt of a run gets the
// same run id, and each run another.
func TestRunIDIsOnePerRun(t *testing.T) {
	plan, err := graph.NewPlan(graph.Graph{Nodes: []graph.Node{{UID: "probe", Kind: graph.KindSink, Parallelism: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	var runs [][]opened
	for range 2 {
		var mu sync.Mutex
		var seen []opened
		spec := Spec{
			Name: "runid", Plan: plan, Mode: None, Restart: FixedDelay{Delay: time.Millisecond, MaxAttempts: 2},
			Logger: slog.New(slog.DiscardHandler),
			Build: func(*TaskBuild) (*TaskParts, error) {
				op := &probe{seen: func(o opened) {
					mu.Lock()
					defer mu.Unlock()
					seen = append(seen, o)
				}}
				return &TaskParts{Ops: []operator.Operator{op}, Head: op}, nil
			},
		}
		res, err := Run(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		if res.Attempts != 2 {
			t.Fatalf("%d attempts, want 2 (one planted failure)", res.Attempts)
		}
		runs = append(runs, seen)
	}
	for i, seen := range runs {
		attempts := map[[2]int]bool{}
		for _, o := range seen {
			if o.run == "" || o.run != seen[0].run {
				t.Fatalf("run %d: contexts %v: want one non-empty run id", i, seen)
			}
			attempts[[2]int{o.attempt, o.subtask}] = true
		}
		if len(attempts) != 4 {
			t.Fatalf("run %d: contexts %v: want subtasks 0 and 1 in attempts 1 and 2", i, seen)
		}
	}
	if runs[0][0].run == runs[1][0].run {
		t.Fatalf("two runs share run id %s", runs[0][0].run)
	}
}
