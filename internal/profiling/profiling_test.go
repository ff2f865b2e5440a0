package profiling

import (
	"bytes"
	"context"
	"errors"
	"io"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// synthetic is a CPU profile of three stacks: main→run→work (with
// inlined helper) on vertex a, twice; main→run→other on vertex b; and
// main→gc without a vertex.
func synthetic(t *testing.T) []byte {
	t.Helper()
	fn := map[string]*profile.Function{}
	var fns []*profile.Function
	for i, name := range []string{"main", "run", "work", "helper", "other", "gc"} {
		f := &profile.Function{ID: uint64(i + 1), Name: name}
		fn[name] = f
		fns = append(fns, f)
	}
	loc := func(id uint64, names ...string) *profile.Location {
		l := &profile.Location{ID: id, Address: 0x1000 * id}
		for _, n := range names { // the innermost first
			l.Line = append(l.Line, profile.Line{Function: fn[n]})
		}
		return l
	}
	mainL, runL, workL, otherL, gcL := loc(1, "main"), loc(2, "run"), loc(3, "helper", "work"), loc(4, "other"), loc(5, "gc")
	p := &profile.Profile{
		SampleType:    []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		PeriodType:    &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:        10_000_000,
		DurationNanos: int64(2 * time.Second),
		Function:      fns,
		Location:      []*profile.Location{mainL, runL, workL, otherL, gcL},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{workL, runL, mainL}, Value: []int64{2, 20_000_000}, Label: map[string][]string{LabelVertex: {"a"}, LabelSubtask: {"0"}}},
			{Location: []*profile.Location{otherL, runL, mainL}, Value: []int64{1, 10_000_000}, Label: map[string][]string{LabelVertex: {"b"}}},
			{Location: []*profile.Location{gcL, mainL}, Value: []int64{3, 30_000_000}},
		},
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// names lists the tree's frames depth first as name=value.
func names(f *Frame, prefix string, out *[]string) {
	*out = append(*out, prefix+f.Name+"="+strconv.FormatInt(f.Value, 10))
	for _, c := range f.Children {
		names(c, prefix+"  ", out)
	}
}

func TestTree(t *testing.T) {
	data := synthetic(t)
	for _, tc := range []struct {
		vertex string
		want   []string
	}{
		{"", []string{"all=6", "  main=6", "    run=3", "      work=2", "        helper=2", "      other=1", "    gc=3"}},
		{"a", []string{"vertex a=2", "  main=2", "    run=2", "      work=2", "        helper=2"}},
		{"c", []string{"vertex c=0"}},
	} {
		g, err := Tree(data, tc.vertex)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		names(g.Root, "", &got)
		if !slicesEqual(got, tc.want) {
			t.Errorf("vertex %q: the tree is\n%q\nwant\n%q", tc.vertex, got, tc.want)
		}
		if g.TotalSamples != 6 || g.Samples != g.Root.Value || g.Seconds != 2 || g.PeriodNanos != 10_000_000 {
			t.Errorf("vertex %q: %d of %d samples, %v s, period %d", tc.vertex, g.Samples, g.TotalSamples, g.Seconds, g.PeriodNanos)
		}
		if g.Vertices["a"] != 2 || g.Vertices["b"] != 1 || g.Vertices[""] != 3 {
			t.Errorf("samples by vertex: %v", g.Vertices)
		}
	}
	if _, err := Tree([]byte("not a profile"), ""); err == nil {
		t.Error("garbage parsed as a profile")
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCPUOneAtATime: a profile while another is taken, by CPU or by
// anyone else, is refused with ErrBusy; durations out of bounds are
// refused; a profile whose context ends returns its error.
func TestCPUOneAtATime(t *testing.T) {
	for _, d := range []time.Duration{0, 100 * time.Millisecond, MaxDuration + time.Second} {
		if _, err := CPU(context.Background(), d); err == nil || errors.Is(err, ErrBusy) {
			t.Errorf("a profile of %v: %v", d, err)
		}
	}
	busy.Lock() // as CPU holds it
	_, err := CPU(context.Background(), MinDuration)
	busy.Unlock()
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("a profile while CPU takes one: %v", err)
	}
	if err := pprof.StartCPUProfile(io.Discard); err != nil { // as /debug/pprof/profile does
		t.Fatal(err)
	}
	_, err = CPU(context.Background(), MinDuration)
	pprof.StopCPUProfile()
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("a profile while another takes one: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := CPU(ctx, MaxDuration); !errors.Is(err, context.Canceled) {
		t.Fatalf("a profile cut short: %v", err)
	}
}
