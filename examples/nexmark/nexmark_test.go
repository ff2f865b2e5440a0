package nexmark

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testConfig: 50,000 events at 1,000 a second of event time, so that the
// queries' 10 s windows close a few times.
var testConfig = Config{Events: 50_000, Rate: 1000}

func events(t *testing.T, cfg Config, splits int) []Event {
	t.Helper()
	seq, err := Events(cfg, splits)
	if err != nil {
		t.Fatal(err)
	}
	return slices.Collect(seq)
}

// TestGeneratorFollowsTheSpec: the mix of events, their ids and their
// timestamps follow the reference generator's formulas.
func TestGeneratorFollowsTheSpec(t *testing.T) {
	const splits = 3
	evs := events(t, testConfig, splits)
	if len(evs) != int(testConfig.Events) {
		t.Fatalf("%d events, want %d", len(evs), testConfig.Events)
	}
	kinds := map[Kind]int{}
	per := testConfig.Events / splits
	base := DefaultBaseTime.UnixMilli()
	for i, e := range evs {
		kinds[e.Kind]++
		split := min(int64(i)/per, splits-1)
		number := int64(i) - split*per + 1
		id := 1 + split*per + number
		// 1e6 µs / 1000 events/s × 3 splits = 3000 µs between a split's events.
		if want := base + number*3000/1000; int64(e.dateTime()) != want {
			t.Fatalf("event %d (split %d, number %d): time %d, want %d", i, split, number, e.dateTime(), want)
		}
		switch rem := id % 50; {
		case rem < 1:
			if e.Kind != PersonEvent || e.Person.ID != id/50+1000 {
				t.Fatalf("event id %d: %v %+v, want person %d", id, e.Kind, e.Person, id/50+1000)
			}
		case rem < 4:
			if e.Kind != AuctionEvent || e.Auction.ID != (id/50)*3+rem-1+1000 {
				t.Fatalf("event id %d: %v %+v, want auction %d", id, e.Kind, e.Auction, (id/50)*3+rem-1+1000)
			}
			if a := e.Auction; a.Expires <= a.DateTime || a.Category < 10 || a.Category >= 15 || a.Reserve <= a.InitialBid || a.InitialBid < 100 {
				t.Fatalf("auction %+v out of range", a)
			}
		default:
			if b := e.Bid; e.Kind != BidEvent || b.Price < 100 || b.Price > 100_000_000 || b.Channel == "" || b.URL == "" {
				t.Fatalf("event id %d: %v %+v, want a bid", id, e.Kind, e.Bid)
			}
		}
	}
	// 1 : 3 : 46 of every 50, within a few events of each split's ends.
	for k, share := range map[Kind]float64{PersonEvent: 1, AuctionEvent: 3, BidEvent: 46} {
		if want := share / 50 * float64(len(evs)); float64(kinds[k]) < want-10 || float64(kinds[k]) > want+10 {
			t.Errorf("%d %v events, want about %.0f", kinds[k], k, want)
		}
	}
	// Bids mostly go to recent auctions and people, which exist; events'
	// random values are independent (no two bids share price and extra).
	var hot int
	type priceExtra struct {
		price int64
		extra string
	}
	seen := map[priceExtra]int64{}
	for _, e := range evs {
		if e.Kind != BidEvent {
			continue
		}
		if e.Bid.Auction%100 == 0 {
			hot++
		}
		k := priceExtra{e.Bid.Price, e.Bid.Extra}
		if other, ok := seen[k]; ok {
			t.Fatalf("bids on auctions %d and %d have the same price and extra: correlated random values", other, e.Bid.Auction)
		}
		seen[k] = e.Bid.Auction
	}
	if hot < kinds[BidEvent]/3 {
		t.Errorf("%d of %d bids on hot auctions, want about half", hot, kinds[BidEvent])
	}
}

// TestEventsAreJSONLines: an event marshals to one of {"person":…},
// {"auction":…}, {"bid":…} and back.
func TestEventsAreJSONLines(t *testing.T) {
	for _, e := range events(t, Config{Events: 200}, 1) {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(b), `{"`+e.Kind.String()+`":{`) || strings.Contains(string(b), "\n") {
			t.Fatalf("%s", b)
		}
		var back Event
		if err := json.Unmarshal(b, &back); err != nil || back.Kind != e.Kind || back.Person != e.Person && e.Kind == PersonEvent ||
			back.Auction != e.Auction && e.Kind == AuctionEvent || back.Bid != e.Bid && e.Kind == BidEvent {
			t.Fatalf("%s read back as %+v (%v)", b, back, err)
		}
	}
	var e Event
	for _, bad := range []string{`{}`, `{"person":{},"bid":{}}`, `{"bid":{"dateTime":"yesterday"}}`} {
		if err := json.Unmarshal([]byte(bad), &e); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// run runs query q over the events of cfg at parallelism 2, its results
// into dir; alignment holds the checkpoints' Alignment and AlignedTimeout.
// crashAt, if not 0, fails the job once, at the first event after that
// many once a checkpoint has completed, so that it restores the
// checkpoint: the sources hold their input after crashAt events until a
// checkpoint has completed, for under load (-race, a busy CI) the first
// one took longer than the whole input.
func run(t *testing.T, q Query, cfg Config, dir string, crashAt int64, alignment weir.CheckpointConfig) weir.Result {
	t.Helper()
	var completed, restored atomic.Int64
	cc := alignment
	cc.Interval = 10 * time.Millisecond
	env := weir.New(weir.Config{Job: "nexmark-" + q.Name, Parallelism: 2, WatermarkInterval: time.Millisecond,
		Checkpoint: cc,
		Restart:    weir.FixedDelay{Delay: time.Millisecond, MaxAttempts: 3},
		OnEvent: func(ev weir.JobEvent) {
			switch ev.Kind {
			case weir.EventCheckpointCompleted:
				completed.Add(1)
			case weir.EventRunning:
				restored.Store(int64(ev.RestoredFrom))
			}
		}})
	gen, err := Generator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	if crashAt > 0 {
		open := gen
		gen = func() weir.SourceReader[Event] {
			return heldReader{open().(*reader), func() bool { return n.Load() >= crashAt && completed.Load() == 0 }}
		}
	}
	events := weir.Source(env, "nexmark", gen, weir.Watermarks(weir.BoundedOutOfOrderness(Watermark, EventTime)))
	if crashAt > 0 {
		var crashed atomic.Bool
		events = weir.Map(events, "crash", func(e Event) Event {
			if n.Add(1) >= crashAt && completed.Load() > 0 && !crashed.Swap(true) {
				panic(errors.New("injected failure"))
			}
			return e
		})
	}
	if err := q.add(events, Output{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := env.Execute(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range env.Metrics() {
		if m.Late > 0 {
			t.Errorf("%s dropped %d records as late: the generator makes none", m.UID, m.Late)
		}
	}
	if crashAt > 0 && (res.Attempts < 2 || restored.Load() == 0) {
		t.Fatalf("%d attempts, restored from checkpoint %d: the failure did not happen after a checkpoint", res.Attempts, restored.Load())
	}
	return res
}

// heldReader reads nothing while hold says so.
type heldReader struct {
	*reader
	hold func() bool
}

func (h heldReader) Read(out weir.Collector[Event]) (operator.PollResult, error) {
	if h.hold() {
		return operator.PollResult{IdleUntil: h.ctx.Now().Add(time.Millisecond)}, nil
	}
	return h.reader.Read(out)
}

// committed reads the JSON lines the file sink committed in dir, sorted.
func committed(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasPrefix(n.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, n.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for l := range strings.SplitSeq(strings.TrimSuffix(string(b), "\n"), "\n") {
			if l != "" {
				out = append(out, l)
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestQueriesAgainstBruteForce: every query's results, straight through
// and with a crash midway (restored from a checkpoint), are exactly the
// results computed directly from the same events, in plain Go.
func TestQueriesAgainstBruteForce(t *testing.T) {
	evs := events(t, testConfig, 2)
	for _, q := range Queries {
		t.Run(q.Name, func(t *testing.T) {
			want := jsonLines(t, bruteForce[q.Name](evs))
			if len(want) == 0 {
				t.Fatal("the brute force finds no results: the test data is too small")
			}
			t.Logf("%d results", len(want))
			straight := t.TempDir()
			run(t, q, testConfig, straight, 0, weir.CheckpointConfig{})
			if got := committed(t, straight); !slices.Equal(got, want) {
				t.Fatalf("straight: %s", diff(got, want))
			}
			// Slowed down, so that checkpoints complete before the crash.
			crashed, slow := t.TempDir(), testConfig
			slow.Throttle = 100_000
			run(t, q, slow, crashed, testConfig.Events*3/5, weir.CheckpointConfig{})
			if got := committed(t, crashed); !slices.Equal(got, want) {
				t.Fatalf("with a crash: %s", diff(got, want))
			}
		})
	}
}

// TestUnalignedQueriesAgainstBruteForce: the queries with exchanges, with
// unaligned checkpoints and with aligned ones that a 1 ms timeout switches,
// crashed midway and restored: exactly the brute force's results.
func TestUnalignedQueriesAgainstBruteForce(t *testing.T) {
	evs := events(t, testConfig, 2)
	for _, name := range []string{"q3", "q5", "q8"} {
		q, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		want := jsonLines(t, bruteForce[name](evs))
		for _, cc := range []weir.CheckpointConfig{{Alignment: weir.Unaligned}, {AlignedTimeout: time.Millisecond}} {
			t.Run(fmt.Sprintf("%s/%v-timeout-%v", name, cc.Alignment, cc.AlignedTimeout), func(t *testing.T) {
				// Slower than TestQueriesAgainstBruteForce's, so that more
				// checkpoints fall within the input: the first unaligned
				// one, holding the backlog, takes long.
				crashed, slow := t.TempDir(), testConfig
				slow.Throttle = 40_000
				run(t, q[0], slow, crashed, testConfig.Events*3/5, cc)
				if got := committed(t, crashed); !slices.Equal(got, want) {
					t.Fatalf("with a crash: %s", diff(got, want))
				}
			})
		}
	}
}

// jsonLines marshals each element of the slice rows, as the sink does.
func jsonLines(t *testing.T, rows any) []string {
	t.Helper()
	var out []string
	v := reflect.ValueOf(rows)
	for i := range v.Len() {
		b, err := json.Marshal(v.Index(i).Interface())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	slices.Sort(out)
	return out
}

// diff summarises how sorted got differs from sorted want.
func diff(got, want []string) string {
	count := func(l []string) map[string]int {
		m := map[string]int{}
		for _, s := range l {
			m[s]++
		}
		return m
	}
	g, w := count(got), count(want)
	var missing, extra []string
	for s, n := range w {
		if g[s] < n {
			missing = append(missing, s)
		}
	}
	for s, n := range g {
		if w[s] < n {
			extra = append(extra, s)
		}
	}
	slices.Sort(missing)
	slices.Sort(extra)
	return fmt.Sprintf("%d results, want %d: %d missing (first %v), %d extra (first %v)",
		len(got), len(want), len(missing), missing[:min(2, len(missing))], len(extra), extra[:min(2, len(extra))])
}

// bruteForce computes each query's results from all the events at once,
// without Weir, by the reference queries' definitions.
var bruteForce = map[string]func([]Event) any{
	"q0": func(evs []Event) any {
		var out []BidRow
		for _, b := range bidsOf(evs) {
			out = append(out, BidRow{b.Auction, b.Bidder, b.Price, b.DateTime, b.Extra})
		}
		return out
	},
	"q1": func(evs []Event) any {
		var out []EuroBid
		for _, b := range bidsOf(evs) {
			out = append(out, EuroBid{b.Auction, b.Bidder, 0.908 * float64(b.Price), b.DateTime, b.Extra})
		}
		return out
	},
	"q2": func(evs []Event) any {
		var out []AuctionPrice
		for _, b := range bidsOf(evs) {
			if b.Auction%123 == 0 {
				out = append(out, AuctionPrice{b.Auction, b.Price})
			}
		}
		return out
	},
	"q3": func(evs []Event) any {
		people := map[int64]Person{}
		for _, e := range evs {
			if e.Kind == PersonEvent && (e.Person.State == "OR" || e.Person.State == "ID" || e.Person.State == "CA") {
				people[e.Person.ID] = e.Person
			}
		}
		var out []LocalSeller
		for _, e := range evs {
			if p, ok := people[e.Auction.Seller]; ok && e.Kind == AuctionEvent && e.Auction.Category == 10 {
				out = append(out, LocalSeller{p.Name, p.City, p.State, e.Auction.ID})
			}
		}
		return out
	},
	"q4": func(evs []Event) any {
		bids := map[int64][]Bid{}
		for _, b := range bidsOf(evs) {
			bids[b.Auction] = append(bids[b.Auction], b)
		}
		// Winning prices by category and 10 s window of closing time.
		type cw struct{ category, window int64 }
		sums := map[cw]sum{}
		for _, e := range evs {
			a := e.Auction
			if e.Kind != AuctionEvent {
				continue
			}
			var best int64
			for _, b := range bids[a.ID] {
				if a.DateTime <= b.DateTime && b.DateTime <= a.Expires {
					best = max(best, b.Price)
				}
			}
			if best > 0 {
				k := cw{a.Category, int64(a.Expires) - int64(a.Expires)%10_000}
				sums[k] = sum{sums[k].Total + best, sums[k].Count + 1}
			}
		}
		var out []CategoryAverage
		running := map[int64]sum{}
		for _, k := range slices.SortedFunc(maps.Keys(sums), func(a, b cw) int { return int(a.window - b.window) }) {
			r := running[k.category]
			r = sum{r.Total + sums[k].Total, r.Count + sums[k].Count}
			running[k.category] = r
			out = append(out, CategoryAverage{k.category, r.Total / r.Count, Timestamp(k.window + 10_000)})
		}
		return out
	},
	"q5": func(evs []Event) any {
		type wa struct{ start, auction int64 }
		counts := map[wa]int64{}
		for _, b := range bidsOf(evs) {
			ts := int64(b.DateTime)
			for s := ts - ts%2000; s > ts-10_000; s -= 2000 {
				counts[wa{s, b.Auction}]++
			}
		}
		most := map[int64]int64{}
		for k, n := range counts {
			most[k.start] = max(most[k.start], n)
		}
		var out []HotItem
		for k, n := range counts {
			if n == most[k.start] {
				out = append(out, HotItem{k.auction, n, Timestamp(k.start)})
			}
		}
		return out
	},
	"q7": func(evs []Event) any {
		highest := map[int64]int64{}
		for _, b := range bidsOf(evs) {
			w := int64(b.DateTime) - int64(b.DateTime)%10_000
			highest[w] = max(highest[w], b.Price)
		}
		var out []BidRow
		for _, b := range bidsOf(evs) {
			// B.dateTime BETWEEN window_end − 10 s AND window_end.
			for end, top := range highest {
				end += 10_000
				if b.Price == top && end-10_000 <= int64(b.DateTime) && int64(b.DateTime) <= end {
					out = append(out, BidRow{b.Auction, b.Bidder, b.Price, b.DateTime, b.Extra})
				}
			}
		}
		return out
	},
	"q8": func(evs []Event) any {
		type iw struct{ id, window int64 }
		sellers := map[iw]bool{}
		for _, e := range evs {
			if e.Kind == AuctionEvent {
				sellers[iw{e.Auction.Seller, int64(e.Auction.DateTime) - int64(e.Auction.DateTime)%10_000}] = true
			}
		}
		var out []NewSeller
		for _, e := range evs {
			if p := e.Person; e.Kind == PersonEvent {
				w := int64(p.DateTime) - int64(p.DateTime)%10_000
				if sellers[iw{p.ID, w}] {
					out = append(out, NewSeller{p.ID, p.Name, Timestamp(w)})
				}
			}
		}
		return out
	},
}

func bidsOf(evs []Event) []Bid {
	var out []Bid
	for _, e := range evs {
		if e.Kind == BidEvent {
			out = append(out, e.Bid)
		}
	}
	return out
}

type collected []Event

func (c *collected) Collect(e Event) { *c = append(*c, e) }

// key identifies an event by its record.
func key(e Event) string {
	b, _ := json.Marshal(e)
	return string(b)
}

// TestSourceRestoresAtAnotherParallelism: the source's splits, read partly
// by two subtasks and restored by three, replay exactly the events the
// splits generate, each once; a restore for another event count is
// refused.
func TestSourceRestoresAtAnotherParallelism(t *testing.T) {
	cfg := Config{Events: 10_000, BatchSize: 100}
	newReader, err := Generator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var got collected
	w := &operatortest.MemWriter{}
	var handles []checkpoint.Handle
	run := &operatortest.Run{}
	defer run.Close()
	for sub := range 2 {
		r := newReader()
		if err := r.Open(run.Context("nexmark", sub, 2, nil)); err != nil {
			t.Fatal(err)
		}
		for range 7 {
			if _, err := r.Read(&got); err != nil {
				t.Fatal(err)
			}
		}
		async, err := r.Snapshot(1)
		if err != nil {
			t.Fatal(err)
		}
		hs, err := async(w)
		if err != nil {
			t.Fatal(err)
		}
		handles = append(handles, hs...)
	}
	restore := &operator.Restore{Checkpoint: 1, Handles: handles, Read: w.Read}
	for sub := range 3 {
		r := newReader()
		if err := r.Open(run.Context("nexmark", sub, 3, restore)); err != nil {
			t.Fatal(err)
		}
		for {
			res, err := r.Read(&got)
			if err != nil {
				t.Fatal(err)
			}
			if res.Exhausted {
				break
			}
		}
	}
	var want []string
	for _, e := range events(t, cfg, 2) {
		want = append(want, key(e))
	}
	var keys []string
	for _, e := range got {
		keys = append(keys, key(e))
	}
	slices.Sort(want)
	slices.Sort(keys)
	if !slices.Equal(keys, want) {
		t.Fatalf("read %s", diff(keys, want))
	}

	other, _ := Generator(Config{Events: 20_000})
	err = other().Open(run.Context("nexmark", 0, 3, restore))
	if !operator.IsPermanent(err) || !strings.Contains(fmt.Sprint(err), "started for 10000 events, this one is for 20000") {
		t.Fatalf("restoring for another count: %v", err)
	}
}

func TestBadConfigurationIsRefused(t *testing.T) {
	for _, c := range []Config{{Events: -1}, {Rate: -5}, {Splits: -1}, {BatchSize: -1}, {Throttle: -1},
		// Not finite (found by an outside review, session 39: a throttle
		// of Inf generated nothing, for ever; a rate of NaN dated events
		// in the year -290253), or event times that overflow.
		{Rate: math.NaN()}, {Rate: math.Inf(1)}, {Throttle: math.NaN()}, {Throttle: math.Inf(1)}, {Events: 1000, Rate: 1e-9}, {Rate: 1e-9} /* unbounded */} {
		if _, err := Generator(c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if _, err := Events(Config{}, 2); err == nil {
		t.Error("listing an unbounded source's events: no error")
	}
	if _, err := Lookup("q0,q6"); err == nil || !strings.Contains(err.Error(), `no query "q6"`) {
		t.Errorf("Lookup q6: %v", err)
	}
	if qs, err := Lookup("all"); err != nil || len(qs) != 8 {
		t.Errorf("Lookup all: %d %v", len(qs), err)
	}
}

// TestAThrottleBeyondCountingEmits: a throttle too great for its events
// to count in an int64 (1e300) is as fast as it can, not nothing: the
// count overflowed, and the source emitted nothing, for ever. Found by an
// outside review, session 39.
func TestAThrottleBeyondCountingEmits(t *testing.T) {
	newReader, err := Generator(Config{Events: 100, BatchSize: 100, Throttle: 1e300})
	if err != nil {
		t.Fatal(err)
	}
	run := &operatortest.Run{}
	defer run.Close()
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	ctx := run.Context("nexmark", 0, 1, nil)
	ctx.Now = func() time.Time { return now }
	r := newReader()
	if err := r.Open(ctx); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	var got collected
	if _, err := r.Read(&got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 100 {
		t.Fatalf("a throttle of 1e300: %d events in the first read, want the batch's 100", len(got))
	}
}

// TestThrottleIsSharedBySplits: --throttle bounds the events of all
// subtasks together, and a subtask's share is its share of the splits. A
// job started at parallelism 1 (one split) and restored at 4 has one
// subtask with a split: it emits at the whole throttle, not a quarter of
// it (the three without a split have nothing to emit).
func TestThrottleIsSharedBySplits(t *testing.T) {
	const throttle = 1000
	newReader, err := Generator(Config{Events: 100_000, BatchSize: 10_000, Throttle: throttle})
	if err != nil {
		t.Fatal(err)
	}
	run := &operatortest.Run{}
	defer run.Close()
	start := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	// emitted opens subtask sub of p (restoring rs) and reads once a
	// second of its clock after it opened.
	emitted := func(sub, p int, rs *operator.Restore) (int, weir.SourceReader[Event]) {
		t.Helper()
		now := start
		ctx := run.Context("nexmark", sub, p, rs)
		ctx.Now = func() time.Time { return now }
		r := newReader()
		if err := r.Open(ctx); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Second)
		var got collected
		if _, err := r.Read(&got); err != nil {
			t.Fatal(err)
		}
		return len(got), r
	}
	n, first := emitted(0, 1, nil)
	if n != throttle+1 {
		t.Fatalf("one subtask, one split: %d events in its first second, want %d", n, throttle+1)
	}
	async, err := first.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	w := &operatortest.MemWriter{}
	hs, err := async(w)
	if err != nil {
		t.Fatal(err)
	}
	restore := &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read}
	total := 0
	for sub := range 4 {
		n, _ := emitted(sub, 4, restore)
		total += n
	}
	if total != throttle+1 {
		t.Fatalf("restored at parallelism 4: %d events in the first second, want %d (the throttle's)", total, throttle+1)
	}
}
