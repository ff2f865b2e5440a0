package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/operator"
)

// labelProbe is a source that, at its first poll, reads the goroutine
// profile: the groups of goroutines polling a labelProbe, with their
// labels.
type labelProbe struct {
	operator.Base
	seen func(string)
}

//go:noinline
func (p *labelProbe) Poll() (operator.PollResult, error) {
	var b strings.Builder
	pprof.Lookup("goroutine").WriteTo(&b, 1)
	for _, group := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(group, "(*labelProbe).Poll") {
			p.seen(group)
		}
	}
	return operator.PollResult{Exhausted: true}, nil
}

// TestTasksCarryProfileLabels: each task's goroutine carries the pprof
// labels vertex and subtask, so that a CPU profile splits by vertex.
func TestTasksCarryProfileLabels(t *testing.T) {
	plan, err := graph.NewPlan(graph.Graph{Nodes: []graph.Node{{UID: "probe", Kind: graph.KindSink, Parallelism: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var groups []string
	spec := Spec{
		Name: "labels", Plan: plan, Mode: None, Restart: FixedDelay{Delay: time.Millisecond, MaxAttempts: 1},
		Logger: slog.New(slog.DiscardHandler),
		Build: func(*TaskBuild) (*TaskParts, error) {
			op := &labelProbe{seen: func(g string) {
				mu.Lock()
				defer mu.Unlock()
				groups = append(groups, g)
			}}
			return &TaskParts{Ops: []operator.Operator{op}, Head: op}, nil
		},
	}
	if _, err := Run(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(groups, "\n\n")
	for s := range 2 {
		if want := fmt.Sprintf(`# labels: {"subtask":"%d", "vertex":"probe"}`, s); !strings.Contains(all, want) {
			t.Errorf("no goroutine polling the probe has %s; the goroutines seen:\n%s", want, all)
		}
	}
}
