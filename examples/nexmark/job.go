package nexmark

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/operator"
)

// Watermark is how far the watermark trails the events' time, as in the
// reference DDL (dateTime − 4 s).
const Watermark = 4 * time.Second

// Query is one of the benchmark's queries.
type Query struct {
	Name, What string
	add        func(events *weir.Stream[Event], out Output) error
}

// Queries are the queries Weir runs, in order.
var Queries = []Query{
	{"q0", "pass-through", func(ev *weir.Stream[Event], out Output) error { return sink(Q0(ev), "q0", out) }},
	{"q1", "currency conversion", func(ev *weir.Stream[Event], out Output) error { return sink(Q1(ev), "q1", out) }},
	{"q2", "selection", func(ev *weir.Stream[Event], out Output) error { return sink(Q2(ev), "q2", out) }},
	{"q3", "local item suggestion", func(ev *weir.Stream[Event], out Output) error { return sink(Q3(ev), "q3", out) }},
	{"q4", "average price per category", func(ev *weir.Stream[Event], out Output) error { return sink(Q4(ev), "q4", out) }},
	{"q5", "hot items", func(ev *weir.Stream[Event], out Output) error { return sink(Q5(ev), "q5", out) }},
	{"q7", "highest bid", func(ev *weir.Stream[Event], out Output) error { return sink(Q7(ev), "q7", out) }},
	{"q8", "monitor new users", func(ev *weir.Stream[Event], out Output) error { return sink(Q8(ev), "q8", out) }},
}

// Lookup finds the queries a comma-separated list names ("all": every
// one).
func Lookup(list string) ([]Query, error) {
	if list == "all" {
		return Queries, nil
	}
	var out []Query
	for name := range strings.SplitSeq(list, ",") {
		i := slices.IndexFunc(Queries, func(q Query) bool { return q.Name == strings.TrimSpace(name) })
		if i < 0 {
			var names []string
			for _, q := range Queries {
				names = append(names, q.Name)
			}
			return nil, fmt.Errorf("nexmark: no query %q: choose from %s, or all", name, strings.Join(names, ", "))
		}
		out = append(out, Queries[i])
	}
	return out, nil
}

// Output says where a query's results go.
type Output struct {
	// Dir, if set, receives the results as JSON lines in files, exactly
	// once (the file sink's two-phase commit). Else they go to a black
	// hole, as in the reference runs.
	Dir string
	// Results, if set, counts the results.
	Results *atomic.Int64
}

// Add adds the Nexmark source of cfg and query q to env.
func Add(env *weir.Environment, cfg Config, q Query, out Output) error {
	gen, err := Generator(cfg)
	if err != nil {
		return err
	}
	events := weir.Source(env, "nexmark", gen, weir.Watermarks(weir.BoundedOutOfOrderness(Watermark, EventTime)))
	return q.add(events, out)
}

func sink[T any](results *weir.Stream[T], name string, out Output) error {
	if out.Dir == "" {
		weir.Sink(results, name+" results", func() weir.SinkWriter[T] { return &blackHole[T]{counter: out.Results} })
		return nil
	}
	files, err := file.Sink(file.SinkConfig[T]{Dir: out.Dir, Format: func(dst []byte, v T) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			panic(fmt.Sprintf("nexmark: %s result %v: %v", name, v, err)) // the result types always marshal
		}
		return append(append(dst, b...), '\n')
	}})
	if err != nil {
		return err
	}
	counted := weir.Map(results, name+" count", func(v T) T {
		if out.Results != nil {
			out.Results.Add(1)
		}
		return v
	})
	weir.Sink(counted, name+" results", files)
	return nil
}

// blackHole drops results, counting them.
type blackHole[T any] struct {
	operator.Base
	counter *atomic.Int64
	n       int64
}

func (b *blackHole[T]) Write(T) error { b.n++; return nil }

func (b *blackHole[T]) flush() {
	if b.counter != nil {
		b.counter.Add(b.n)
	}
	b.n = 0
}

func (b *blackHole[T]) Snapshot(checkpoint.ID) (operator.Async, error) { b.flush(); return nil, nil }
func (b *blackHole[T]) Finish() error                                  { b.flush(); return nil }
