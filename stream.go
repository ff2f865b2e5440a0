package weir

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/internal/cacheline"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/operator"
)

// Collector receives the records an operator emits. Records are immutable
// once collected: a downstream operator may hold them.
type Collector[T any] interface{ Collect(T) }

// Stream is a stream of records of type T.
type Stream[T any] struct {
	env  *Environment
	node int
	// port is the node's output the stream is: 0 its records, above 0 a
	// side output.
	port int
	// part is the partitioning towards the next operator; 0 picks forward
	// when the parallelism matches and rebalance otherwise.
	part graph.Partition
}

// Env is the environment the stream belongs to.
func (s *Stream[T]) Env() *Environment { return s.env }

// environment is s's Environment. A nil stream has none to record the
// mistake in, so it panics, saying what to fix.
func (s *Stream[T]) environment() *Environment {
	if s == nil {
		panic(errNilStream)
	}
	return s.env
}

// errNilStream is the panic of a build function given a nil *Stream, or a
// KeyedStream not made by KeyBy.
var errNilStream = errors.New("weir: a build function was given a nil *weir.Stream (or a KeyedStream not made by weir.KeyBy): a stream weir.LateTo fills is set when its window is built, so build the window before the operators that read it")

func newStream[T any](env *Environment, n int) *Stream[T] { return &Stream[T]{env: env, node: n} }

// input is the graph input of a consumer of s with parallelism p.
func (s *Stream[T]) input(p int) (graph.Input, inputSpec) {
	part := s.part
	if part == 0 {
		part = graph.Rebalance
		if s.environment().nodes[s.node].Parallelism == p {
			part = graph.Forward
		}
	}
	return graph.Input{From: s.node, Partition: part, Port: s.port}, inputSpec{partition: part}
}

// Rebalance spreads s's records round-robin over the next operator.
func Rebalance[T any](s *Stream[T]) *Stream[T] {
	return &Stream[T]{env: s.environment(), node: s.node, port: s.port, part: graph.Rebalance}
}

// Broadcast sends every record of s to every subtask of the next operator.
func Broadcast[T any](s *Stream[T]) *Stream[T] {
	return &Stream[T]{env: s.environment(), node: s.node, port: s.port, part: graph.Broadcast}
}

// Forward keeps s's records in their subtask (equal parallelism needed).
func Forward[T any](s *Stream[T]) *Stream[T] {
	return &Stream[T]{env: s.environment(), node: s.node, port: s.port, part: graph.Forward}
}

// addOp adds an operator of Out records, reading ups; see Environment.add.
func addOp[Out any](env *Environment, name, kind string, fn any, opts []Option, n *node, ups ...upstream) *Stream[Out] {
	id := env.add(name, kind, fn, opts, n, ups...)
	n.emitter = emitterOf[Out]
	n.counting = countingOf[Out]
	n.wire = map[int]wire{0: wireOf[Out]()}
	return newStream[Out](env, id)
}

// emitterOf builds the collector over a node's outgoing edges: one emitter
// per edge, each batching per downstream channel.
func emitterOf[T any](e *Environment, b *runtime.TaskBuild, plan *graph.Plan, c *chain, port int) (any, []runtime.Output) {
	var now *int64
	if e.nodes[b.Vertex.Nodes[len(b.Vertex.Nodes)-1]].timed {
		now = &c.now
	}
	var colls fanout[T]
	var outs []runtime.Output
	for k, ei := range b.Vertex.Outputs {
		edge := plan.Edges[ei]
		if edge.Port != port {
			continue
		}
		consumer := e.nodes[plan.Vertices[edge.To].Nodes[0]]
		chans := b.Outputs[k]
		var route runtime.Route[T]
		var keyRoute runtime.KeyRoute[T]
		switch edge.Partition {
		case graph.Hash:
			keyRoute = consumer.inputs[edge.Input].hashRoute.(func(int, int) runtime.KeyRoute[T])(len(chans), consumer.MaxParallelism)
		case graph.Rebalance:
			// The counter, written for every record, on lines of its own
			// (package cacheline): a closure's captured int is an 8-byte
			// object of its own, beside the next subtask's.
			i, n := cacheline.New(b.Subtask%len(chans)), len(chans)
			route = func(T) int {
				*i++
				if *i == n {
					*i = 0
				}
				return *i
			}
		case graph.Broadcast:
			route = func(T) int { return runtime.BroadcastRoute }
		}
		em := runtime.NewEmitter(b.Ctx, chans, route, b.BatchSize, now)
		em.Stats, em.Elastic = b.Stats, b.Elastic
		if keyRoute != nil {
			em.CarryKeyGroups(keyRoute)
		}
		colls = append(colls, em)
		outs = append(outs, em)
	}
	if len(colls) == 1 {
		return Collector[T](colls[0]), outs
	}
	return Collector[T](colls), outs
}

// countingOf wraps next, the Collector[T] of an operator chained after a
// node of T records, so that it counts the records entering it in *count.
func countingOf[T any](next any, count *int64) any {
	return Collector[T](countingCollector[T]{next: next.(Collector[T]), count: count})
}

type fanout[T any] []Collector[T]

func (f fanout[T]) Collect(v T) {
	for _, c := range f {
		c.Collect(v)
	}
}

// headOf adapts a single-input operator for the head of a task: it takes
// batches of In and counts them, and publishes the counts of the operators
// chained after it once per batch.
func headOf[In any](n *node) func(operator.Operator, any, *chain) any {
	return func(_ operator.Operator, in any, c *chain) any {
		return cacheline.New(head[In]{in: in.(Collector[In]), c: c, n: n})
	}
}

type head[In any] struct {
	in Collector[In]
	c  *chain
	n  *node
}

func (h *head[In]) ProcessBatch(_ int, batch any, times []int64, groups []uint16) error {
	b := batch.([]In)
	h.n.records.Add(int64(len(b)))
	defer h.c.publish()
	h.c.stats.AddIn(len(b))
	if times == nil {
		h.c.now = operator.MinTime
	}
	h.c.group = -1
	for i, v := range b {
		if times != nil {
			h.c.now = times[i]
		}
		if groups != nil {
			h.c.group = int(groups[i])
		}
		h.in.Collect(v)
		if h.c.err != nil {
			return h.c.err
		}
	}
	return nil
}

// Map applies f to every record.
func Map[In, Out any](s *Stream[In], name string, f func(In) Out, opts ...Option) *Stream[Out] {
	return flatMap(s, name, f, func(v In, out Collector[Out]) { out.Collect(f(v)) }, opts)
}

// Filter keeps the records for which keep is true.
func Filter[T any](s *Stream[T], name string, keep func(T) bool, opts ...Option) *Stream[T] {
	return flatMap(s, name, keep, func(v T, out Collector[T]) {
		if keep(v) {
			out.Collect(v)
		}
	}, opts)
}

// FlatMap calls f for every record; f emits any number of records.
func FlatMap[In, Out any](s *Stream[In], name string, f func(In, Collector[Out]), opts ...Option) *Stream[Out] {
	return flatMap(s, name, f, f, opts)
}

// flatMap adds a FlatMap running f; user is the user's function, checked
// for nil.
func flatMap[In, Out any](s *Stream[In], name string, user any, f func(In, Collector[Out]), opts []Option) *Stream[Out] {
	n := &node{}
	n.instance = func(c *chain, next any) (operator.Operator, any) {
		op := cacheline.New(flatMapOp[In, Out]{f: f, out: next.(Collector[Out])})
		return op, Collector[In](op)
	}
	n.head = headOf[In](n)
	return addOp[Out](s.environment(), name, kindFlatMap, user, opts, n, s)
}

type flatMapOp[In, Out any] struct {
	operator.Base
	f   func(In, Collector[Out])
	out Collector[Out]
}

func (m *flatMapOp[In, Out]) Collect(v In) { m.f(v, m.out) }

// Union merges s and others, streams of one type and one Environment.
func Union[T any](s *Stream[T], name string, others []*Stream[T], opts ...Option) *Stream[T] {
	n := &node{}
	n.instance = func(c *chain, next any) (operator.Operator, any) {
		op := cacheline.New(flatMapOp[T, T]{f: func(v T, out Collector[T]) { out.Collect(v) }, out: next.(Collector[T])})
		return op, Collector[T](op)
	}
	// Every input carries []T: the single-input head serves.
	n.head = headOf[T](n)
	ups := []upstream{s}
	for _, o := range others {
		ups = append(ups, o)
	}
	return addOp[T](s.environment(), name, kindUnion, n.instance, opts, n, ups...)
}

// SourceReader reads a source's records for one subtask. Its operator
// methods snapshot and restore its position.
type SourceReader[T any] interface {
	operator.Operator
	// Read emits up to about one batch of records to out.
	Read(out Collector[T]) (operator.PollResult, error)
}

// ProgressReporter may be implemented by a bounded SourceReader: Remaining
// is what its subtask has left to read, Total the input of the whole
// source, in one unit (bytes for files). Progress is called after each Read.
type ProgressReporter interface {
	Progress() (remaining, total int64)
}

// Source adds a source; newReader builds each subtask's reader. With the
// Watermarks option its records have event time.
func Source[T any](env *Environment, name string, newReader func() SourceReader[T], opts ...Option) *Stream[T] {
	n := &node{}
	n.instance = func(c *chain, next any) (operator.Operator, any) {
		r := newReader()
		p, _ := r.(ProgressReporter)
		if v := env.verify; v != nil && r != nil {
			r = &rewound[T]{SourceReader: r, restore: restoreOf(v.point, n.UID)}
		}
		op := cacheline.New(sourceOp[T]{SourceReader: r, progress: p, out: countingCollector[T]{next: next.(Collector[T])}, c: c, n: n})
		ws, ok := n.watermarks.(WatermarkStrategy[T])
		if !ok {
			op.collector = op.out
			return op, nil
		}
		clk := newClock(ws.watermarkOf(), ws.IdleTimeout)
		op.collector = cacheline.New(timeCollector[T]{next: op.out, timestamp: ws.Timestamp, c: c, clock: clk})
		return cacheline.New(timedSource[T]{sourceOp: op, clock: clk}), nil
	}
	n.head = func(op operator.Operator, _ any, _ *chain) any { return op }
	s := addOp[T](env, name, kindSource, newReader, opts, n)
	n.verify = &verifyPart{check: func() error {
		r := newReader()
		if r == nil {
			return errNilFromFactory("reader")
		}
		rw, ok := r.(Rewinder)
		if !ok {
			return errors.New("its reader cannot read its input again (it does not implement weir.Rewinder)")
		}
		return rw.Rewindable()
	}}
	n.remaining = make([]atomic.Int64, max(n.Parallelism, 0))
	for i := range n.remaining {
		n.remaining[i].Store(-1)
	}
	if n.watermarks != nil {
		ws, ok := n.watermarks.(WatermarkStrategy[T])
		switch {
		case !ok:
			env.fail(fmt.Errorf("source %q: its Watermarks option is a %T, not a WatermarkStrategy of its records", name, n.watermarks))
		case ws.check() != nil:
			env.fail(fmt.Errorf("source %q: %w", name, ws.check()))
		}
		n.timed, n.idleTimeout = ok, ws.IdleTimeout
	}
	return s
}

type sourceOp[T any] struct {
	SourceReader[T]
	progress ProgressReporter
	out      countingCollector[T]
	// collector is what Read emits into: out, or a timeCollector over it.
	collector Collector[T]
	c         *chain
	n         *node
	oc        *operator.Context
}

func (s *sourceOp[T]) Open(ctx *operator.Context) error {
	s.n.remaining[ctx.Subtask].Store(-1)
	if s.SourceReader == nil {
		return nilFromFactory(ctx.UID, "reader")
	}
	return s.SourceReader.Open(ctx)
}

func (s *sourceOp[T]) Close() error {
	if s.SourceReader == nil {
		return nil
	}
	return s.SourceReader.Close()
}

// nilFromFactory is the error of a subtask whose factory (the func given to
// Source, Sink, Process, CoProcess, KeyedCoProcess) returned a nil what:
// permanent, as every restart would meet it again.
func nilFromFactory(uid, what string) error {
	return operator.Permanent(fmt.Errorf("operator %q: %w", uid, errNilFromFactory(what)))
}

func errNilFromFactory(what string) error {
	return fmt.Errorf("its factory returned a nil %s: return a new one for each subtask", what)
}

type countingCollector[T any] struct {
	next  Collector[T]
	count *int64
}

func (cc countingCollector[T]) Collect(v T) {
	*cc.count++
	cc.next.Collect(v)
}

func (s *sourceOp[T]) Poll() (operator.PollResult, error) {
	var count int64
	s.out.count = &count
	if tc, ok := s.collector.(*timeCollector[T]); ok {
		tc.next = s.out
	} else {
		s.collector = s.out
	}
	res, err := s.Read(s.collector)
	s.n.records.Add(count)
	s.c.publish()
	s.c.stats.AddIn(int(count))
	if s.progress != nil {
		left, total := s.progress.Progress()
		s.n.remaining[s.c.subtask].Store(left)
		s.n.total.Store(total)
	}
	if err != nil {
		return res, err
	}
	return res, s.c.err
}

// SinkWriter writes records to an external system for one subtask; its
// operator methods take part in checkpoints (for example two-phase commit).
type SinkWriter[T any] interface {
	operator.Operator
	Write(v T) error
}

// Sink adds a sink; newWriter builds each subtask's writer.
func Sink[T any](s *Stream[T], name string, newWriter func() SinkWriter[T], opts ...Option) {
	n := &node{}
	n.instance = func(c *chain, _ any) (operator.Operator, any) {
		w := newWriter()
		if v := s.environment().verify; v != nil && w != nil {
			w = &rerunSink[T]{vs: w.(VerifiedSink[T]), t: v.tallies[n.UID]}
		}
		op := cacheline.New(sinkOp[T]{SinkWriter: w, c: c})
		return op, Collector[T](op)
	}
	n.head = headOf[T](n)
	addOp[T](s.environment(), name, kindSink, newWriter, opts, n, s)
	n.emitter = nil
	n.verify = &verifyPart{
		check: func() error {
			w := newWriter()
			if w == nil {
				return errNilFromFactory("writer")
			}
			if v, ok := w.(Verifiable); ok {
				if err := v.Verifiable(); err != nil {
					return err
				}
			}
			if _, ok := w.(VerifiedSink[T]); !ok {
				return errors.New("its committed output cannot be read back (its writer does not implement weir.VerifiedSink)")
			}
			return nil
		},
		committed: func(ctx *operator.Context, f func([]byte)) error {
			return newWriter().(VerifiedSink[T]).Committed(ctx, f)
		},
		keyed: func() KeyedRecords {
			k, _ := newWriter().(KeyedRecords)
			return k
		},
	}
}

// SinkFunc is a sink that calls f with every record: f is called from
// every subtask at once, and again for the records after the last
// checkpoint when the job restores it (at least once).
func SinkFunc[T any](f func(T) error) func() SinkWriter[T] {
	if f == nil {
		return nil
	}
	return func() SinkWriter[T] { return &funcWriter[T]{f: f} }
}

type funcWriter[T any] struct {
	operator.Base
	f func(T) error
}

func (w *funcWriter[T]) Write(v T) error { return w.f(v) }

type sinkOp[T any] struct {
	SinkWriter[T]
	c *chain
}

func (s *sinkOp[T]) Open(ctx *operator.Context) error {
	if s.SinkWriter == nil {
		return nilFromFactory(ctx.UID, "writer")
	}
	return s.SinkWriter.Open(ctx)
}

func (s *sinkOp[T]) Close() error {
	if s.SinkWriter == nil {
		return nil
	}
	return s.SinkWriter.Close()
}

func (s *sinkOp[T]) Collect(v T) {
	if err := s.Write(v); err != nil {
		s.c.fail(err)
	}
}

// CoProcessFunction handles the records of two inputs.
type CoProcessFunction[A, B, Out any] interface {
	Process1(a A, out Collector[Out]) error
	Process2(b B, out Collector[Out]) error
}

// ConnectedStreams are two streams that one two-input operator reads.
type ConnectedStreams[A, B any] struct {
	a *Stream[A]
	b *Stream[B]
}

// Connect pairs two streams for CoProcess.
func Connect[A, B any](a *Stream[A], b *Stream[B]) ConnectedStreams[A, B] {
	return ConnectedStreams[A, B]{a: a, b: b}
}

// CoProcess applies a two-input function; newFn builds each subtask's.
func CoProcess[A, B, Out any](cs ConnectedStreams[A, B], name string, newFn func() CoProcessFunction[A, B, Out], opts ...Option) *Stream[Out] {
	n := &node{}
	n.instance = func(c *chain, next any) (operator.Operator, any) {
		return cacheline.New(coOp[A, B, Out]{fn: newFn(), out: next.(Collector[Out]), n: n, c: c}), nil
	}
	n.head = func(op operator.Operator, _ any, _ *chain) any { return op }
	return addOp[Out](cs.a.environment(), name, kindCoProcess, newFn, opts, n, cs.a, cs.b)
}

type coOp[A, B, Out any] struct {
	operator.Base
	fn  CoProcessFunction[A, B, Out]
	out Collector[Out]
	n   *node
	c   *chain
}

func (o *coOp[A, B, Out]) Open(oc *operator.Context) error {
	if o.fn == nil {
		return nilFromFactory(oc.UID, "function")
	}
	return nil
}

func (o *coOp[A, B, Out]) ProcessBatch(input int, batch any, times []int64, groups []uint16) error {
	return processTwo(o.n, o.c, input, batch, times, groups, func(a A) error { return o.fn.Process1(a, o.out) }, func(b B) error { return o.fn.Process2(b, o.out) })
}

// processTwo feeds a batch of a two-input operator to f1 or f2, stopping at
// the first error of the function or of the chain after it.
func processTwo[A, B any](n *node, c *chain, input int, batch any, times []int64, groups []uint16, f1 func(A) error, f2 func(B) error) error {
	defer c.publish()
	if times == nil {
		c.now = operator.MinTime
	}
	c.group = -1
	switch input {
	case 0:
		b := batch.([]A)
		n.records.Add(int64(len(b)))
		c.stats.AddIn(len(b))
		for i, v := range b {
			if times != nil {
				c.now = times[i]
			}
			if groups != nil {
				c.group = int(groups[i])
			}
			if err := f1(v); err != nil {
				return err
			}
			if c.err != nil {
				return c.err
			}
		}
	case 1:
		b := batch.([]B)
		n.records.Add(int64(len(b)))
		c.stats.AddIn(len(b))
		for i, v := range b {
			if times != nil {
				c.now = times[i]
			}
			if groups != nil {
				c.group = int(groups[i])
			}
			if err := f2(v); err != nil {
				return err
			}
			if c.err != nil {
				return c.err
			}
		}
	default:
		panic(fmt.Sprintf("weir: two-input operator got input %d", input))
	}
	return nil
}
