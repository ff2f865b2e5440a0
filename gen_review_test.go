package weir_test

// The review's job generator: from a seed, a random keyed job (sources
// with event time, out of order, some records late; map, filter, union;
// reduce, a keyed process function with value, list and map state and
// event-time timers; tumbling, sliding or session windows with allowed
// lateness and a late side output; an interval join), random settings
// (heap incremental or full, Pebble, local recovery, interval, aligned or
// unaligned, parallelism, max parallelism) and random faults (a panic at
// the k-th record, a failing checkpoint write, a cancel and a restore at
// another parallelism, a stop with a savepoint restored at another
// parallelism, the same savepoint restored twice). The committed output
// of exactly-once file sinks is compared, line by line and counted, with
// a sequential model of the job.
//
//	go test -run 'TestReviewGen$' -count=1 -gen.seeds 50 .
//	go test -run 'TestReviewGen$' -count=1 -gen.first 17 -gen.seeds 1 -v .
//
// Environment overrides for experiments: GEN_ALIGN=aligned|unaligned|timeout,
// GEN_BACKEND=heap|heap full|pebble, GEN_NOPANIC=1 (no injected panics),
// GEN_NOFAIL=1 (no failing checkpoint write). A failing seed logs its
// events (with the channel state each task stored), the output files and,
// for the reduce, where each key's results are.
//
// Found: channel state stored under an operator that is no longer a task's
// head after the restore (its parallelism now equals its upstream's, so the
// default partitioning turns forward and the two chain) was replayed by no
// task: seeds 37 (-gen.rescaleall=false), 114, 297, 799, 813, each lost
// some results, timing-dependent; deterministic in
// gen_review_findings_test.go. A chained node now replays it itself
// (runtime.TaskParts.Chained).

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/connector/generator"
)

var (
	genSeeds      = flag.Int("gen.seeds", 0, "seeds TestReviewGen runs (default 8, 2 under -race)")
	genFirst      = flag.Uint64("gen.first", 1, "TestReviewGen's first seed")
	genRescaleAll = flag.Bool("gen.rescaleall", true, "restored runs draw every operator's parallelism anew (false: only the default parallelism changes, as when seed 37 was found)")
)

// gr is a record: Late marks one drawn behind the watermark on purpose.
type gr struct {
	ID, Key, TS, V int64
	Late           bool
	N              int64 // the reduce's count

}

func grTime(r gr) time.Time { return time.UnixMilli(r.TS) }

func mix(seed, i, salt uint64) uint64 {
	x := seed*0x9e3779b97f4a7c15 ^ i*0xbf58476d1ce4e5b9 ^ salt*0x94d049bb133111eb
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

const genBase = 1_000_000

type genJob struct {
	tr   *genTrace
	seed uint64
	// source A, and B (for union and join)
	n, m       int64
	keys       int64
	disorder   int64 // max jitter; the watermark strategy's bound
	latePct    int64 // % of A's records drawn late
	lateSpan   int64
	srcP, srcQ int
	withB      bool
	union      bool
	mapV       bool
	filterMod  int64
	// branches
	reduce, proc, window, join bool
	bucket                     int64 // proc's event-time bucket
	// window
	kind          string // tumbling, sliding, session
	size, slide   int64
	gap, lateness int64
	lower, upper  int64 // interval join
	opP           []int // parallelism of reduce, proc, window, join
	sinkP         int
	backend       string // heap, heap full, pebble
	localRecovery bool
	interval      time.Duration
	alignment     string // aligned, unaligned, timeout
	maxP          int
	panicAt       int64 // the proc's k-th record panics (0: none)
	mapPanicAt    int64 // the map's k-th record panics
	failWrite     int64 // the k-th state file created fails (0: none)
	tolerable     int
	plan          string // straight, rescale, savepoint, savepoint twice
	p2, p3        int
	// par[r] is run r's parallelism of a, b, the four operators and the sinks
	par [3][7]int
	// backends[r] is run r's state backend (a switch from heap to Pebble,
	// or between incremental and full); after is how many checkpoints
	// complete before the first run is stopped
	backends [3]string
	after    int64
	big      bool
	twice    bool // rescale: a second cancel and restore
}

func (g *genJob) String() string {
	return fmt.Sprintf("seed %d: n %d m %d keys %d disorder %d late %d%% span %d srcP %d srcQ %d B %v union %v map %v filter %d | reduce %v proc %v(bucket %d) window %v(%s size %d slide %d gap %d lateness %d) join %v[%d,%d] opP %v sinkP %d | %s local %v interval %v %s maxP %d | panic %d mapPanic %d failWrite %d tolerable %d | plan %s p2 %d p3 %d par %v backends %v after %d big %v twice %v",
		g.seed, g.n, g.m, g.keys, g.disorder, g.latePct, g.lateSpan, g.srcP, g.srcQ, g.withB, g.union, g.mapV, g.filterMod,
		g.reduce, g.proc, g.bucket, g.window, g.kind, g.size, g.slide, g.gap, g.lateness, g.join, g.lower, g.upper, g.opP, g.sinkP,
		g.backend, g.localRecovery, g.interval, g.alignment, g.maxP, g.panicAt, g.mapPanicAt, g.failWrite, g.tolerable, g.plan, g.p2, g.p3, g.par, g.backends, g.after, g.big, g.twice)
}

func drawJob(seed uint64) *genJob {
	rng := rand.New(rand.NewPCG(seed, 0xfeed))
	g := &genJob{seed: seed}
	g.n = 300 + rng.Int64N(1200)
	g.keys = 1 + rng.Int64N(9)
	g.disorder = rng.Int64N(12)
	if rng.IntN(3) > 0 {
		g.latePct = 1 + rng.Int64N(10)
		g.lateSpan = 1 + rng.Int64N(40)
	}
	g.maxP = []int{4, 8, 16, 128}[rng.IntN(4)]
	pick := func() int { return 1 + rng.IntN(min(3, g.maxP)) }
	g.srcP = pick()
	g.withB = rng.IntN(2) == 0
	if g.withB {
		g.m = 100 + rng.Int64N(600)
		g.srcQ = pick()
		g.union = rng.IntN(2) == 0
		g.join = rng.IntN(2) == 0
		g.lower = rng.Int64N(8) - 5
		g.upper = g.lower + rng.Int64N(8)
		if !g.union && !g.join {
			g.union = true
		}
	}
	g.mapV = rng.IntN(2) == 0
	if rng.IntN(3) == 0 {
		g.filterMod = 3 + rng.Int64N(5)
	}
	g.reduce, g.proc, g.window = rng.IntN(2) == 0, rng.IntN(2) == 0, rng.IntN(3) > 0
	if !g.reduce && !g.proc && !g.window && (!g.join || g.union) {
		g.window = true
	}
	g.bucket = 5 + rng.Int64N(40)
	switch rng.IntN(3) {
	case 0:
		g.kind, g.size = "tumbling", 3+rng.Int64N(30)
		g.slide = g.size
	case 1:
		g.kind, g.size = "sliding", 4+rng.Int64N(30)
		g.slide = 1 + rng.Int64N(g.size)
	default:
		g.kind, g.gap = "session", 1+rng.Int64N(6)
	}
	if rng.IntN(2) == 0 {
		g.lateness = rng.Int64N(20)
	}
	g.opP = []int{pick(), pick(), pick(), pick()}
	g.sinkP = pick()
	g.backend = []string{"heap", "heap full", "pebble"}[rng.IntN(3)]
	g.localRecovery = rng.IntN(3) == 0
	g.interval = time.Duration(2+rng.IntN(25)) * time.Millisecond
	g.alignment = []string{"aligned", "unaligned", "timeout"}[rng.IntN(3)]
	if rng.IntN(3) == 0 {
		g.panicAt = 1 + rng.Int64N(g.n)
	}
	if rng.IntN(4) == 0 {
		g.mapPanicAt = 1 + rng.Int64N(g.n)
	}
	if rng.IntN(3) == 0 {
		g.failWrite = 1 + rng.Int64N(12)
		g.tolerable = rng.IntN(2)
	}
	g.plan = []string{"straight", "straight", "rescale", "savepoint", "savepoint twice"}[rng.IntN(5)]
	g.p2, g.p3 = pick(), pick()
	g.par[0] = [7]int{g.srcP, g.srcQ, g.opP[0], g.opP[1], g.opP[2], g.opP[3], g.sinkP}
	for r := 1; r < 3; r++ {
		g.par[r] = g.par[0]
		var redraw [7]int
		for i := range redraw {
			redraw[i] = pick()
		}
		if *genRescaleAll {
			g.par[r] = redraw
			if !g.withB {
				g.par[r][1] = 0
			}
		}
	}
	g.backends = [3]string{g.backend, g.backend, g.backend}
	g.after = 2
	if *genRescaleAll {
		for r := 1; r < 3; r++ {
			switch g.backends[r-1] {
			case "heap", "heap full":
				g.backends[r] = []string{"heap", "heap full", "pebble", "pebble full"}[rng.IntN(4)]
			default:
				g.backends[r] = []string{"pebble", "pebble full"}[rng.IntN(2)]
			}
		}
		g.after = 1 + rng.Int64N(8)
		g.twice = rng.IntN(2) == 0
		if rng.IntN(4) == 0 {
			// Bigger: many keys, many checkpoints, long chains.
			g.big = true
			g.n = 4000 + rng.Int64N(8000)
			g.keys = 50 + rng.Int64N(400)
			if g.m > 0 {
				g.m *= 8
			}
			g.panicAt, g.mapPanicAt = g.panicAt*8, g.mapPanicAt*8
		}
	}
	if a := os.Getenv("GEN_ALIGN"); a != "" {
		g.alignment = a
	}
	if b := os.Getenv("GEN_BACKEND"); b != "" {
		g.backend = b
	}
	if os.Getenv("GEN_NOPANIC") != "" {
		g.panicAt, g.mapPanicAt = 0, 0
	}
	if os.Getenv("GEN_NOFAIL") != "" {
		g.failWrite = 0
	}
	return g
}

func (g *genJob) recA(i int64) gr {
	h := mix(g.seed, uint64(i), 1)
	ts := genBase + i - int64(h%uint64(g.disorder+1))
	late := g.latePct > 0 && int64(mix(g.seed, uint64(i), 2)%100) < g.latePct
	if late {
		ts = genBase + i - g.disorder - 1 - int64(mix(g.seed, uint64(i), 3)%uint64(g.lateSpan))
	}
	return gr{ID: i, Key: int64(mix(g.seed, uint64(i), 4) % uint64(g.keys)), TS: ts, V: 1 + int64(h%97), Late: late}
}

func (g *genJob) recB(j int64) gr {
	h := mix(g.seed, uint64(j), 5)
	// B runs at A's pace in event time: record j at about j·n/m.
	ts := genBase + j*g.n/g.m - int64(h%uint64(g.disorder+1))
	return gr{ID: 1_000_000 + j, Key: int64(mix(g.seed, uint64(j), 6) % uint64(g.keys)), TS: ts, V: 1 + int64(h%89)}
}

func (g *genJob) mapped(r gr) gr {
	if g.mapV {
		r.V = r.V*3 + 1
	}
	return r
}

func (g *genJob) kept(r gr) bool { return g.filterMod == 0 || r.ID%g.filterMod != 0 }

// ---- the keyed process function

type genItem struct{ ID, Bucket int64 }

type genProc struct {
	g     *genJob
	count *weir.ValueState[int64, int64]
	items *weir.ListState[int64, genItem]
	sums  *weir.MapState[int64, int64, int64]
	seen  *atomic.Int64
	fired *atomic.Bool
}

func (p *genProc) Open(c *weir.KeyedContext[int64]) (err error) {
	if p.count, err = weir.NewValueState[int64, int64](c, "count"); err != nil {
		return err
	}
	if p.items, err = weir.NewListState[int64, genItem](c, "items"); err != nil {
		return err
	}
	p.sums, err = weir.NewMapState[int64, int64, int64](c, "sums")
	return err
}

func (p *genProc) Process(c *weir.KeyedContext[int64], r gr, out weir.Collector[string]) error {
	n, _ := p.count.Value()
	n++
	if n == 5 {
		p.count.Clear()
	} else {
		p.count.Update(n)
	}
	if p.g.panicAt > 0 && p.seen.Add(1) == p.g.panicAt && p.fired.CompareAndSwap(false, true) {
		panic("injected: the keyed function's k-th record")
	}
	out.Collect(fmt.Sprintf("p %d %d", c.Key(), n))
	b := floorDiv(r.TS, p.g.bucket) * p.g.bucket
	s, _ := p.sums.Get(b)
	p.sums.Put(b, s+r.V)
	p.items.Add(genItem{r.ID, b})
	c.RegisterEventTimer(time.UnixMilli(b + p.g.bucket - 1))
	return nil
}

func (p *genProc) OnTimer(c *weir.KeyedContext[int64], at time.Time, out weir.Collector[string]) error {
	b := at.UnixMilli() - p.g.bucket + 1
	s, _ := p.sums.Get(b)
	p.sums.Remove(b)
	var ids []int64
	var rest []genItem
	for _, it := range p.items.Get() {
		if it.Bucket == b {
			ids = append(ids, it.ID)
		} else {
			rest = append(rest, it)
		}
	}
	if len(rest) == 0 {
		p.items.Clear()
	} else {
		p.items.Update(rest)
	}
	slices.Sort(ids)
	out.Collect(fmt.Sprintf("t %d %d %d %v", c.Key(), b, s, ids))
	return nil
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// ---- the job

type genFaults struct {
	procSeen, mapSeen   atomic.Int64
	procFired, mapFired atomic.Bool
}

func (g *genJob) build(t *testing.T, cfg weir.Config, out string, slow bool, f *genFaults, run int) *weir.Environment {
	t.Helper()
	par := g.par[run]
	e := weir.New(cfg)
	rate := 0.0
	if slow {
		rate = 400
		if g.big {
			rate = 4000
		}
	}
	ga, err := generator.New(generator.Config[gr]{Count: g.n, Make: g.recA, BatchSize: 16, RatePerSecond: rate})
	if err != nil {
		t.Fatal(err)
	}
	ws := weir.BoundedOutOfOrderness(time.Duration(g.disorder)*time.Millisecond, grTime)
	a := weir.Source(e, "a", ga, weir.Watermarks(ws), weir.Parallelism(par[0]))
	if g.mapV || g.mapPanicAt > 0 {
		a = weir.Map(a, "map", func(r gr) gr {
			if g.mapPanicAt > 0 && f.mapSeen.Add(1) == g.mapPanicAt && f.mapFired.CompareAndSwap(false, true) {
				panic("injected: the map's k-th record")
			}
			return g.mapped(r)
		}, weir.Parallelism(par[0]))
	}
	if g.filterMod > 0 {
		a = weir.Filter(a, "filter", g.kept, weir.Parallelism(par[0]))
	}
	var b *weir.Stream[gr]
	if g.withB {
		gb, err := generator.New(generator.Config[gr]{Count: g.m, Make: g.recB, BatchSize: 16, RatePerSecond: rate * float64(g.m) / float64(g.n)})
		if err != nil {
			t.Fatal(err)
		}
		b = weir.Source(e, "b", gb, weir.Watermarks(ws), weir.Parallelism(par[1]))
	}
	all := a
	if g.union {
		all = weir.Union(a, "union", []*weir.Stream[gr]{b}, weir.Parallelism(par[0]))
	}
	sink := func(s *weir.Stream[string], name string) {
		fs, err := file.Sink(file.SinkConfig[string]{Dir: out, Format: lineFormat})
		if err != nil {
			t.Fatal(err)
		}
		weir.Sink(s, name, fs, weir.Parallelism(par[6]))
	}
	key := func(r gr) int64 { return r.Key }
	onTime := func(s *weir.Stream[gr], name string) *weir.Stream[gr] {
		return weir.Filter(s, name, func(r gr) bool { return !r.Late })
	}
	if g.reduce {
		red := weir.Reduce(weir.KeyBy(all, key), "reduce", func(acc, r gr) gr {
			return gr{Key: acc.Key, V: acc.V + r.V, N: max(acc.N, 1) + 1}
		}, weir.Parallelism(par[2]))
		sink(weir.Map(red, "fmt reduce", func(r gr) string { return fmt.Sprintf("r %d %d %d", r.Key, r.V, max(r.N, 1)) }), "out reduce")
	}
	if g.proc {
		pr := weir.Process(weir.KeyBy(onTime(all, "on time proc"), key), "proc", func() weir.KeyedProcessFunction[int64, gr, string] {
			return &genProc{g: g, seen: &f.procSeen, fired: &f.procFired}
		}, weir.Parallelism(par[3]))
		sink(pr, "out proc")
	}
	if g.window {
		in := all
		if g.kind == "session" {
			in = onTime(all, "on time window")
		}
		ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
		var as weir.WindowAssigner
		switch g.kind {
		case "tumbling":
			as = weir.Tumbling(ms(g.size))
		case "sliding":
			as = weir.Sliding(ms(g.size), ms(g.slide))
		default:
			as = weir.Session(ms(g.gap))
		}
		var late *weir.Stream[gr]
		opts := []weir.WindowOption{weir.LateTo(&late)}
		if g.lateness > 0 {
			opts = append(opts, weir.AllowedLateness(ms(g.lateness)))
		}
		w := weir.WindowProcess(weir.Window(weir.KeyBy(in, key), as, opts...), "window",
			func(k int64, tw weir.TimeWindow, rs []gr, out weir.Collector[string]) error {
				ids := make([]int64, len(rs))
				for i, r := range rs {
					ids[i] = r.ID
				}
				slices.Sort(ids)
				out.Collect(fmt.Sprintf("w %d %d %d %v", k, tw.Start.UnixMilli(), tw.End.UnixMilli(), ids))
				return nil
			}, weir.Parallelism(par[4]))
		sink(w, "out window")
		sink(weir.Map(late, "fmt late", func(r gr) string { return fmt.Sprintf("l %d", r.ID) }), "out late")
	}
	if g.join {
		j := weir.IntervalJoin(weir.KeyBy(onTime(a, "on time a"), key), weir.KeyBy(b, key),
			time.Duration(g.lower)*time.Millisecond, time.Duration(g.upper)*time.Millisecond, "join",
			func(x, y gr) string { return fmt.Sprintf("j %d %d", x.ID, y.ID) }, weir.Parallelism(par[5]))
		sink(j, "out join")
	}
	return e
}

// ---- the model

type genWant struct {
	exact  map[string]int // lines that must be there, this many times
	prefix []string       // prefixes checked by exact
	// for the reduce: per key, its records' count and total
	redN, redSum map[int64]int64
	// the window with late records: checked by rules, not lines
	records map[int64]gr // the window's input by id
}

func (g *genJob) model() genWant {
	w := genWant{exact: map[string]int{}, redN: map[int64]int64{}, redSum: map[int64]int64{}, records: map[int64]gr{}}
	var as, all, bs []gr
	for i := range g.n {
		r := g.mapped(g.recA(i))
		if g.kept(r) {
			as = append(as, r)
		}
	}
	all = as
	if g.withB {
		for j := range g.m {
			bs = append(bs, g.recB(j))
		}
		if g.union {
			all = append(slices.Clone(as), bs...)
		}
	}
	if g.reduce {
		for _, r := range all {
			w.redN[r.Key]++
			w.redSum[r.Key] += r.V
		}
	}
	if g.proc {
		w.prefix = append(w.prefix, "p ", "t ")
		n := map[int64]int64{}
		type kb struct{ k, b int64 }
		sums, ids := map[kb]int64{}, map[kb][]int64{}
		for _, r := range all {
			if r.Late {
				continue
			}
			n[r.Key] = n[r.Key]%5 + 1
			w.exact[fmt.Sprintf("p %d %d", r.Key, n[r.Key])]++
			b := kb{r.Key, floorDiv(r.TS, g.bucket) * g.bucket}
			sums[b] += r.V
			ids[b] = append(ids[b], r.ID)
		}
		for b, s := range sums {
			slices.Sort(ids[b])
			w.exact[fmt.Sprintf("t %d %d %d %v", b.k, b.b, s, ids[b])]++
		}
	}
	if g.window {
		if g.kind == "session" {
			w.prefix = append(w.prefix, "w ", "l ")
			byKey := map[int64][]gr{}
			for _, r := range all {
				if !r.Late {
					byKey[r.Key] = append(byKey[r.Key], r)
				}
			}
			for k, rs := range byKey {
				slices.SortFunc(rs, func(x, y gr) int { return int(x.TS - y.TS) })
				var ids []int64
				start, end := rs[0].TS, rs[0].TS+g.gap
				flush := func() {
					slices.Sort(ids)
					w.exact[fmt.Sprintf("w %d %d %d %v", k, start, end, ids)]++
					ids = nil
				}
				for _, r := range rs {
					if r.TS > end {
						flush()
						start, end = r.TS, r.TS+g.gap
					}
					ids = append(ids, r.ID)
					end = max(end, r.TS+g.gap)
				}
				flush()
			}
		} else {
			for _, r := range all {
				w.records[r.ID] = r
			}
		}
	}
	if g.join {
		w.prefix = append(w.prefix, "j ")
		for _, x := range as {
			if x.Late {
				continue
			}
			for _, y := range bs {
				if x.Key == y.Key && x.TS+g.lower <= y.TS && y.TS <= x.TS+g.upper {
					w.exact[fmt.Sprintf("j %d %d", x.ID, y.ID)]++
				}
			}
		}
	}
	return w
}

// windowsOf are a record's windows' starts, latest first.
func (g *genJob) windowsOf(ts int64) []int64 {
	var s []int64
	for start := floorDiv(ts, g.slide) * g.slide; start > ts-g.size; start -= g.slide {
		s = append(s, start)
	}
	return s
}

// check compares the committed lines with the model; it returns the
// problems found, counted.
func (g *genJob) check(lines map[string]int, w genWant) []string {
	var bad []string
	has := func(l string, ps []string) bool {
		for _, p := range ps {
			if strings.HasPrefix(l, p) {
				return true
			}
		}
		return false
	}
	if g.window && g.kind == "session" {
		lines = g.joinTouchingSessions(lines)
	}
	for l, n := range w.exact {
		if got := lines[l]; got != n {
			bad = append(bad, fmt.Sprintf("%q: %d times, want %d", l, got, n))
		}
	}
	for l, n := range lines {
		if has(l, w.prefix) && w.exact[l] == 0 {
			bad = append(bad, fmt.Sprintf("%q: %d times, want none", l, n))
		}
	}
	if g.reduce {
		sums := map[int64]map[int64]int{}
		redCounts := map[int64]map[int64]int{}
		for l, n := range lines {
			if !strings.HasPrefix(l, "r ") {
				continue
			}
			var k, s, c int64
			fmt.Sscanf(l, "r %d %d %d", &k, &s, &c)
			if redCounts[k] == nil {
				redCounts[k] = map[int64]int{}
			}
			redCounts[k][c] += n
			if sums[k] == nil {
				sums[k] = map[int64]int{}
			}
			sums[k][s] += n
		}
		for k, n := range w.redN {
			total := 0
			for s, c := range sums[k] {
				total += c
				if c != 1 {
					bad = append(bad, fmt.Sprintf("reduce key %d: running sum %d %d times", k, s, c))
				}
				if s > w.redSum[k] {
					bad = append(bad, fmt.Sprintf("reduce key %d: running sum %d above the total %d", k, s, w.redSum[k]))
				}
			}
			var missing, twice []int64
			for c := int64(1); c <= n; c++ {
				switch redCounts[k][c] {
				case 0:
					missing = append(missing, c)
				case 1:
				default:
					twice = append(twice, c)
				}
			}
			if len(missing)+len(twice) > 0 {
				bad = append(bad, fmt.Sprintf("reduce key %d: results number %v missing, %v more than once", k, missing, twice))
			}
			if int64(total) != n {
				bad = append(bad, fmt.Sprintf("reduce key %d: %d results, want %d", k, total, n))
			}
			if sums[k][w.redSum[k]] != 1 {
				bad = append(bad, fmt.Sprintf("reduce key %d: the total %d committed %d times", k, w.redSum[k], sums[k][w.redSum[k]]))
			}
		}
		for k := range sums {
			if _, ok := w.redN[k]; !ok {
				bad = append(bad, fmt.Sprintf("reduce key %d: results for a key with no record", k))
			}
		}
	}
	if g.window && g.kind != "session" {
		bad = append(bad, g.checkWindows(lines, w.records)...)
	}
	return bad
}

// joinTouchingSessions returns lines with the sessions of a key that
// touch (one ends where the next starts) joined, as the model joins them.
// A session fires when the watermark reaches its end less 1 ms: a record
// at that end (the same event time as the record that took the watermark
// there) is on time and starts a session of its own, which Flink does not
// merge with the one that fired either; with an allowed lateness the fired
// session is kept and merges, and fires again joined. Which happens
// depends on where the watermark fell, so the model cannot say (a soak
// found it at seed 3056 of TestReviewGenHistory and TestReviewGenCluster).
// Only sessions committed once are joined; with a lateness, a firing that
// a joined one from the same start holds all of is dropped.
func (g *genJob) joinTouchingSessions(lines map[string]int) map[string]int {
	type session struct {
		start, end int64
		ids        []int64
	}
	byKey := map[int64][]session{}
	out := map[string]int{}
	for l, n := range lines {
		if !strings.HasPrefix(l, "w ") || n != 1 {
			out[l] += n
			continue
		}
		k, start, end, ids := windowLine(l)
		byKey[k] = append(byKey[k], session{start, end, ids})
	}
	for k, ss := range byKey {
		slices.SortFunc(ss, func(a, b session) int { return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.end, b.end)) })
		if g.lateness > 0 {
			var kept []session
			for _, a := range ss {
				if !slices.ContainsFunc(ss, func(b session) bool {
					return b.start == a.start && b.end > a.end && !slices.ContainsFunc(a.ids, func(id int64) bool { return !slices.Contains(b.ids, id) })
				}) {
					kept = append(kept, a)
				}
			}
			ss = kept
		}
		var joined []session
		for _, s := range ss {
			if n := len(joined); n > 0 && joined[n-1].end == s.start {
				joined[n-1].end = s.end
				joined[n-1].ids = append(joined[n-1].ids, s.ids...)
				continue
			}
			joined = append(joined, s)
		}
		for _, s := range joined {
			slices.Sort(s.ids)
			out[fmt.Sprintf("w %d %d %d %v", k, s.start, s.end, s.ids)]++
		}
	}
	return out
}

// windowLine parses a window's output line, "w key start end [ids]".
func windowLine(l string) (k, start, end int64, ids []int64) {
	fmt.Sscanf(l, "w %d %d %d", &k, &start, &end)
	for _, f := range strings.Fields(l[strings.Index(l, "[")+1 : len(l)-1]) {
		id, _ := strconv.ParseInt(f, 10, 64)
		ids = append(ids, id)
	}
	return k, start, end, ids
}

// checkWindows: each window's firings are its records so far, each firing
// one more record than the one before (a late record within the
// lateness), the added ones late; every on-time record is in every one of
// its windows' last firing; a late record is in a suffix of its windows
// (those the watermark had not passed) or, in none, in the late output
// once.
func (g *genJob) checkWindows(lines map[string]int, records map[int64]gr) []string {
	var bad []string
	type win struct{ k, s int64 }
	firings := map[win][][]int64{}
	lateOut := map[int64]int{}
	for l, n := range lines {
		switch {
		case strings.HasPrefix(l, "w "):
			k, s, e, ids := windowLine(l)
			if e-s != g.size {
				bad = append(bad, fmt.Sprintf("%q: a window of size %d", l, e-s))
			}
			for range n {
				firings[win{k, s}] = append(firings[win{k, s}], ids)
			}
		case strings.HasPrefix(l, "l "):
			id, _ := strconv.ParseInt(l[2:], 10, 64)
			lateOut[id] += n
		}
	}
	final := map[win]map[int64]bool{}
	for w, fs := range firings {
		slices.SortFunc(fs, func(a, b []int64) int { return len(a) - len(b) })
		for i, f := range fs {
			if i > 0 {
				prev := fs[i-1]
				if len(f) != len(prev)+1 {
					bad = append(bad, fmt.Sprintf("window key %d start %d: firings of %d and %d records (%d firings)", w.k, w.s, len(prev), len(f), len(fs)))
					continue
				}
				for _, id := range prev {
					if !slices.Contains(f, id) {
						bad = append(bad, fmt.Sprintf("window key %d start %d: record %d in a firing, not in the next", w.k, w.s, id))
					}
				}
				for _, id := range f {
					if !slices.Contains(prev, id) && !records[id].Late {
						bad = append(bad, fmt.Sprintf("window key %d start %d: firing %d added on-time record %d", w.k, w.s, i, id))
					}
				}
			}
		}
		m := map[int64]bool{}
		for _, id := range fs[len(fs)-1] {
			if m[id] {
				bad = append(bad, fmt.Sprintf("window key %d start %d: record %d twice in one firing", w.k, w.s, id))
			}
			m[id] = true
			r, ok := records[id]
			if !ok || r.Key != w.k || !slices.Contains(g.windowsOf(r.TS), w.s) {
				bad = append(bad, fmt.Sprintf("window key %d start %d: record %d (%+v) does not belong", w.k, w.s, id, r))
			}
		}
		final[w] = m
	}
	lost, dup := 0, 0
	for id, r := range records {
		starts := g.windowsOf(r.TS) // latest first
		in := make([]bool, len(starts))
		any := false
		for i, s := range starts {
			in[i] = final[win{r.Key, s}][id]
			any = any || in[i]
		}
		switch {
		case !r.Late:
			for i, s := range starts {
				if !in[i] {
					lost++
					if lost <= 5 {
						bad = append(bad, fmt.Sprintf("on-time record %d (%+v) is not in its window starting %d", id, r, s))
					}
				}
			}
			if lateOut[id] > 0 {
				bad = append(bad, fmt.Sprintf("on-time record %d in the late output %d times", id, lateOut[id]))
			}
		case any:
			for i := 1; i < len(in); i++ {
				if in[i] && !in[i-1] {
					bad = append(bad, fmt.Sprintf("late record %d (%+v) in the window starting %d, not in the later one starting %d", id, r, starts[i], starts[i-1]))
				}
			}
			if lateOut[id] > 0 {
				bad = append(bad, fmt.Sprintf("late record %d in windows and in the late output %d times", id, lateOut[id]))
			}
		default:
			if lateOut[id] != 1 {
				dup++
				if dup <= 5 {
					bad = append(bad, fmt.Sprintf("late record %d (%+v) in no window, in the late output %d times", id, r, lateOut[id]))
				}
			}
		}
	}
	if lost > 0 || dup > 0 {
		bad = append(bad, fmt.Sprintf("windows: %d (record, window) pairs lost; %d late records not once in the late output", lost, dup))
	}
	for id := range lateOut {
		if _, ok := records[id]; !ok {
			bad = append(bad, fmt.Sprintf("late output %d: no such record", id))
		}
	}
	return bad
}

// ---- faults and runs

// failNthCreate fails the k-th file created in checkpoint storage, once:
// a shared state file, a checkpoint's state, or the metadata's temporary
// file (only _metadata itself and lock files are spared).
// errInjectedNoSpace is failNthCreate's error.
var errInjectedNoSpace = errors.New("injected: no space left on device")

type failNthCreate struct {
	vfs.FS
	k     int64
	tr    *genTrace
	n     atomic.Int64
	fired atomic.Bool
	// spareProbes spares a cluster's probes of its storage (a failing one
	// fails the job for good: gen_cluster_review_test.go)
	spareProbes bool
}

func (f *failNthCreate) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	if f.k > 0 && filepath.Base(name) != "_metadata" && !strings.Contains(filepath.Base(name), "lock") &&
		!(f.spareProbes && filepath.Base(filepath.Dir(name)) == "_probe") &&
		f.n.Add(1) == f.k && f.fired.CompareAndSwap(false, true) {
		if f.tr != nil {
			f.tr.add("failing the creation of %s", name)
		}
		return nil, &os.PathError{Op: "create", Path: name, Err: errInjectedNoSpace}
	}
	return f.FS.Create(name, cat)
}

type genTrace struct {
	mu  sync.Mutex
	run int
	log []string
}

func (tr *genTrace) add(format string, args ...any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.log = append(tr.log, fmt.Sprintf("run %d: ", tr.run)+fmt.Sprintf(format, args...))
}

func (tr *genTrace) on(ev weir.JobEvent) {
	var cs []string
	for _, tt := range ev.Tasks {
		if tt.Unaligned || tt.Switched || tt.ChannelState > 0 {
			cs = append(cs, fmt.Sprintf("%v unaligned %v switched %v %dB", tt.Task, tt.Unaligned, tt.Switched, tt.ChannelState))
		}
	}
	tr.add("%v id %d attempt %d savepoint %v restored %d err %v %v", ev.Kind, ev.ID, ev.Attempt, ev.Savepoint, ev.RestoredFrom, ev.Err, cs)
}

func (g *genJob) config(dir string, p int, fs vfs.FS, run int) weir.Config {
	cfg := weir.Config{Job: "gen", Parallelism: p, MaxParallelism: g.maxP, WatermarkInterval: time.Millisecond,
		Restart: weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: 20},
		Logger:  quiet, OnEvent: g.tr.on,
		Checkpoint: weir.CheckpointConfig{Interval: g.interval, Dir: filepath.Join(dir, "ckpt"), FS: fs,
			TolerableFailures: g.tolerable, Retained: 2}}
	switch g.backends[run] {
	case "heap full":
		cfg.StateBackend = weir.StateBackend{Full: true}
	case "pebble":
		cfg.StateBackend = weir.StateBackend{Kind: weir.PebbleState, Dir: filepath.Join(dir, "pebble")}
	case "pebble full":
		cfg.StateBackend = weir.StateBackend{Kind: weir.PebbleState, Dir: filepath.Join(dir, "pebble"), Full: true}
	}
	switch g.alignment {
	case "unaligned":
		cfg.Checkpoint.Alignment = weir.Unaligned
	case "timeout":
		cfg.Checkpoint.AlignedTimeout = time.Millisecond
	}
	if g.localRecovery {
		cfg.LocalRecovery, cfg.LocalRecoveryDir = true, filepath.Join(dir, "local")
	}
	return cfg
}

// dump logs, if t failed, the run's trace, the output files and where
// the reduce's results are; tr is the run's trace, out its output.
func dump(t *testing.T, tr *genTrace, out string) {
	if !t.Failed() {
		return
	}
	tr.mu.Lock()
	t.Logf("trace:\n  %s", strings.Join(tr.log, "\n  "))
	tr.mu.Unlock()
	ents, _ := os.ReadDir(out)
	var names []string
	for _, e := range ents {
		info, _ := e.Info()
		names = append(names, fmt.Sprintf("%s (%d bytes)", e.Name(), info.Size()))
	}
	t.Logf("output files:\n  %s", strings.Join(names, "\n  "))
	// Where the reduce's results are, per file: first and last count of each key.
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "part-out%20reduce") {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(out, e.Name()))
		first, last := map[int64]int64{}, map[int64]int64{}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var k, s, c int64
			fmt.Sscanf(l, "r %d %d %d", &k, &s, &c)
			if _, ok := first[k]; !ok {
				first[k] = c
			}
			last[k] = c
		}
		t.Logf("%s: first %v last %v", e.Name(), first, last)
	}
}

func (g *genJob) run(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	f := &genFaults{}
	tr := &genTrace{run: 1}
	g.tr = tr
	fs := &failNthCreate{FS: vfs.Default, k: g.failWrite, tr: tr}
	defer dump(t, tr, out)
	ctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
	defer cancel()
	switch g.plan {
	case "straight":
		if _, err := g.build(t, g.config(dir, g.srcP, fs, 0), out, false, f, 0).Execute(ctx); err != nil {
			t.Fatalf("%v: %v", g, err)
		}
	case "rescale":
		runs := 2
		if g.twice {
			runs = 3
		}
		ps := []int{g.srcP, g.p2, g.p3}
		for run := range runs {
			tr.mu.Lock()
			tr.run = run + 1
			tr.mu.Unlock()
			cfg := g.config(dir, ps[run], fs, run)
			if run > 0 {
				cfg.Restore = "latest"
			}
			last := run == runs-1
			c1, cancel1 := context.WithCancel(ctx)
			completed := atomic.Int64{}
			cfg.OnEvent = func(ev weir.JobEvent) {
				tr.on(ev)
				if !last && ev.Kind == weir.EventCheckpointCompleted && completed.Add(1) == g.after {
					cancel1()
				}
			}
			_, err := g.build(t, cfg, out, !last, f, run).Execute(c1)
			cancel1()
			if err != nil && (last || !errors.Is(err, context.Canceled)) {
				t.Fatalf("%v: run %d: %v", g, run+1, err)
			}
		}
	default: // savepoint, savepoint twice
		cfg := g.config(dir, g.srcP, fs, 0)
		addrs := make(chan string, 1)
		cfg.Web, cfg.WebToken, cfg.OnWeb = "127.0.0.1:0", "tok", func(a string) { addrs <- a }
		completed := make(chan struct{}, 1)
		cfg.OnEvent = func(ev weir.JobEvent) {
			tr.on(ev)
			if ev.Kind == weir.EventCheckpointCompleted {
				select {
				case completed <- struct{}{}:
				default:
				}
			}
		}
		type res struct {
			r   weir.Result
			err error
		}
		done := make(chan res, 1)
		go func() {
			r, err := g.build(t, cfg, out, true, f, 0).Execute(ctx)
			done <- res{r, err}
		}()
		var r res
		addr := ""
		seen := int64(0)
	wait:
		for {
			select {
			case <-completed:
				if seen++; seen < g.after {
					continue
				}
				if addr == "" {
					addr = <-addrs
				}
				if _, err := postSavepoint(addr, true); err != nil {
					t.Logf("savepoint: %v", err)
					continue
				}
				r = <-done
				break wait
			case r = <-done:
				break wait
			}
		}
		if r.err != nil {
			t.Fatalf("%v: first run: %v", g, r.err)
		}
		if r.r.StoppedWith == 0 {
			t.Logf("%v: the first run was not stopped with a savepoint; done", g)
			break
		}
		t.Logf("stopped with savepoint %d", r.r.StoppedWith)
		sp := filepath.Join(dir, "ckpt", "gen", fmt.Sprintf("chk-%d", r.r.StoppedWith))
		runs := []int{g.p2}
		if g.plan == "savepoint twice" {
			runs = append(runs, g.p3)
		}
		for i, p := range runs {
			tr.mu.Lock()
			tr.run = i + 2
			tr.mu.Unlock()
			cfg := g.config(dir, p, fs, i+1)
			cfg.Restore = sp
			_, err := g.build(t, cfg, out, false, f, i+1).Execute(ctx)
			if err != nil && strings.Contains(err.Error(), "could not be recorded") && strings.Contains(err.Error(), "injected:") {
				// The injected fault (it fires once) hit the record of
				// the start's rollback past run 2's checkpoints: the
				// start failed before it restored or deleted anything,
				// as designed; start again, as TestReviewGenHistory does
				// (seeds 3162 and 3795 of a soak found this).
				t.Logf("run %d: the start could not record its rollback (%v); starting again", i+2, err)
				_, err = g.build(t, cfg, out, false, f, i+1).Execute(ctx)
			}
			if err != nil {
				t.Fatalf("%v: run %d from savepoint %d: %v", g, i+2, r.r.StoppedWith, err)
			}
		}
	}
	g.verify(t, out, f, fs)
}

// verify compares the committed output in out with the model.
func (g *genJob) verify(t *testing.T, out string, f *genFaults, fs *failNthCreate) {
	lines := committedLines(t, out)
	total := 0
	for _, c := range lines {
		total += c
	}
	t.Logf("%d committed lines, %d distinct; proc fired %v map fired %v write failed %v", total, len(lines), f.procFired.Load(), f.mapFired.Load(), fs.fired.Load())
	if bad := g.check(lines, g.model()); len(bad) > 0 {
		n := 0
		for _, c := range lines {
			n += c
		}
		t.Errorf("%v\n%d committed lines; %d problems:\n  %s", g, n, len(bad), strings.Join(bad[:min(len(bad), 25)], "\n  "))
	}
}

func TestReviewGen(t *testing.T) {
	seeds := *genSeeds
	if seeds == 0 {
		seeds = 8
		if weir.RaceEnabled {
			seeds = 1 // the race detector slows a seed about tenfold (CI's time)
		}
	}
	for seed := *genFirst; seed < *genFirst+uint64(seeds); seed++ {
		g := drawJob(seed)
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			start := time.Now()
			g.run(t)
			t.Logf("%v: %v", g, time.Since(start).Round(time.Millisecond))
		})
	}
}
