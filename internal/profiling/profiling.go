// Package profiling takes CPU profiles of this process and turns them into
// flame graphs, whole or of one vertex's tasks.
//
// The runtime labels each task's goroutine (and those it starts) with
// LabelVertex and LabelSubtask (runtime/pprof labels, set once when the
// task starts), so that one profile of the process can be split by vertex.
// A CPU profile is process-wide: one is taken at a time (ErrBusy).
package profiling

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"github.com/google/pprof/profile"
)

// The labels of a task's goroutines: its vertex's id and its subtask's
// index (decimal).
const (
	LabelVertex  = "vertex"
	LabelSubtask = "subtask"
)

// The bounds of a profile's duration, and its default.
const (
	MinDuration     = time.Second
	MaxDuration     = 30 * time.Second
	DefaultDuration = 5 * time.Second
)

// ErrBusy says that a CPU profile of this process is being taken already
// (a flame graph's, or one of /debug/pprof/profile): try again after it.
var ErrBusy = errors.New("a CPU profile of this process is being taken already; try again when it is done")

// busy is held while CPU takes a profile.
var busy sync.Mutex

// CPU profiles this process for d, which must be within MinDuration and
// MaxDuration, and returns the profile in pprof's format (gzipped
// protocol buffers, what `go tool pprof` reads). It fails with ErrBusy
// while another profile is taken, and with ctx's error when ctx ends
// first. Any goroutine may call it.
func CPU(ctx context.Context, d time.Duration) ([]byte, error) {
	if err := CheckDuration(d); err != nil {
		return nil, err
	}
	if !busy.TryLock() {
		return nil, ErrBusy
	}
	defer busy.Unlock()
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		// NB: a CPU profile started in this process other than through
		// CPU holds the runtime's profiler without busy.
		return nil, fmt.Errorf("%w (%v)", ErrBusy, err)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	pprof.StopCPUProfile()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("CPU profile cut short: %w", err)
	}
	return buf.Bytes(), nil
}

// CheckDuration says why d is no duration for a profile, or nil.
func CheckDuration(d time.Duration) error {
	if d < MinDuration || d > MaxDuration {
		return fmt.Errorf("a profile takes %v to %v, not %v", MinDuration, MaxDuration, d)
	}
	return nil
}

// Frame is a node of a flame graph, in d3-flame-graph's JSON: a function
// (Name), the samples in it and below it (Value), and the functions it
// called (Children), each called from here.
type Frame struct {
	Name     string   `json:"name"`
	Value    int64    `json:"value"`
	Children []*Frame `json:"children,omitempty"`
}

// FlameGraph is a CPU profile as a tree of frames.
type FlameGraph struct {
	Root *Frame `json:"root"`
	// Samples are the samples in the tree (of Vertex, when filtered),
	// TotalSamples all of the profile's; a sample is PeriodNanos of CPU
	// time.
	Samples      int64 `json:"samples"`
	TotalSamples int64 `json:"totalSamples"`
	PeriodNanos  int64 `json:"periodNanos"`
	// Seconds is how long the profile ran.
	Seconds float64 `json:"durationSeconds"`
	// Vertex, if set, is the vertex whose tasks' samples the tree holds.
	Vertex string `json:"vertex,omitempty"`
	// Vertices are the profile's samples by the vertex label of their
	// goroutine ("" for goroutines of no task: the driver, the network,
	// the garbage collector).
	Vertices map[string]int64 `json:"vertices"`
}

// maxFrames bounds the frames of a tree: past it, the rarest stacks are
// cut at the last frame that exists (a profile of 30 s at 100 Hz on 8
// cores has 24,000 samples at most, most of them sharing stacks).
const maxFrames = 50000

// Tree parses a CPU profile in pprof's format and returns its samples
// as a flame graph; with vertex set, only the samples of goroutines
// labelled with it. Functions inlined into others are frames of their own.
func Tree(data []byte, vertex string) (*FlameGraph, error) {
	p, err := profile.ParseData(data)
	if err != nil {
		return nil, fmt.Errorf("parse the CPU profile: %w", err)
	}
	si := slices.IndexFunc(p.SampleType, func(st *profile.ValueType) bool { return st.Type == "samples" })
	if si < 0 {
		return nil, errors.New("the profile holds no sample counts: not a CPU profile")
	}
	name := "all"
	if vertex != "" {
		name = "vertex " + vertex
	}
	g := &FlameGraph{Root: &Frame{Name: name}, PeriodNanos: p.Period, Seconds: time.Duration(p.DurationNanos).Seconds(), Vertex: vertex, Vertices: map[string]int64{}}
	frames := 1
	var stack []string
	for _, s := range p.Sample {
		n := s.Value[si]
		g.TotalSamples += n
		v := ""
		if vs := s.Label[LabelVertex]; len(vs) > 0 {
			v = vs[0]
		}
		g.Vertices[v] += n
		if vertex != "" && v != vertex {
			continue
		}
		g.Samples += n
		stack = stack[:0]
		for _, loc := range slices.Backward(s.Location) { // the root first
			for _, l := range slices.Backward(loc.Line) { // the caller first
				if l.Function != nil {
					stack = append(stack, l.Function.Name)
				}
			}
			if len(loc.Line) == 0 {
				stack = append(stack, fmt.Sprintf("0x%x", loc.Address))
			}
		}
		f := g.Root
		f.Value += n
		for _, fn := range stack {
			i := slices.IndexFunc(f.Children, func(c *Frame) bool { return c.Name == fn })
			if i < 0 {
				if frames >= maxFrames {
					break
				}
				frames++
				f.Children = append(f.Children, &Frame{Name: fn})
				i = len(f.Children) - 1
			}
			f = f.Children[i]
			f.Value += n
		}
	}
	return g, nil
}
