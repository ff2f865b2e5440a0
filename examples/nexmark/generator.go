package nexmark

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state"
)

// The reference generator's constants.
const (
	firstPersonID    = 1000
	firstAuctionID   = 1000
	firstCategoryID  = 10
	numCategories    = 5
	personIDLead     = 10
	auctionIDLead    = 10
	hotRatioBucket   = 100
	hotAuctionRatio  = 2
	hotSellersRatio  = 4
	hotBiddersRatio  = 4
	numInFlight      = 100
	numActivePeople  = 1000
	personProportion = 1
	auctionEnd       = 4 // person 1 : auction 3 : bid 46, of 50
	totalProportion  = 50
	avgPersonBytes   = 200
	avgAuctionBytes  = 500
	avgBidBytes      = 100
)

// DefaultRate is the event-time rate of the reference runs: 100,000 events
// per second.
const DefaultRate = 100_000

// DefaultBaseTime is the event time of the first events unless Config
// says otherwise: fixed, so that every run generates the same events.
var DefaultBaseTime = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// Config configures the generator.
type Config struct {
	// Events is how many events the source generates over all its
	// splits; 0 is unbounded.
	Events int64
	// Rate is the event-time rate, in events per second over all splits.
	// It sets the events' timestamps only: generation runs as fast as it
	// can. Default DefaultRate.
	Rate float64
	// BaseTime is the time of the first events. Default DefaultBaseTime.
	BaseTime time.Time
	// Splits is the number of generator splits, which run on parallel
	// timelines; default the source's parallelism at the first start. A
	// restored source keeps the splits it was started with.
	Splits int
	// BatchSize is the most events one Read emits; default 1024.
	BatchSize int
	// Throttle, if set, bounds generation to that many events per second
	// of wall time over all subtasks (the reference's maxEmitSpeed=false
	// is Throttle = Rate).
	Throttle float64
}

func (c Config) withDefaults() (Config, error) {
	if c.Events < 0 || c.Rate < 0 || c.Splits < 0 || c.BatchSize < 0 || c.Throttle < 0 {
		return c, fmt.Errorf("nexmark: events %d, rate %v, splits %d, batch size %d and throttle %v must not be negative", c.Events, c.Rate, c.Splits, c.BatchSize, c.Throttle)
	}
	if math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || math.IsNaN(c.Throttle) || math.IsInf(c.Throttle, 0) {
		return c, fmt.Errorf("nexmark: rate %v and throttle %v must be finite numbers of events per second", c.Rate, c.Throttle)
	}
	if c.Rate == 0 {
		c.Rate = DefaultRate
	}
	// An event's timestamp is the base time plus its id times the delay
	// between two events, in microseconds: that must not overflow. An
	// unbounded source is held to its first billion events.
	events := c.Events
	if events == 0 {
		events = unboundedSpanEvents
	}
	if span := float64(events) * 1e6 / c.Rate; span >= maxSpanUs {
		return c, fmt.Errorf("nexmark: a rate of %v events per second spreads %d events over %.3g years of event time, more than %d: give a greater rate", c.Rate, events, span/1e6/secondsAYear, maxSpanYears)
	}
	if c.BaseTime.IsZero() {
		c.BaseTime = DefaultBaseTime
	}
	if c.BatchSize == 0 {
		c.BatchSize = 1024
	}
	return c, nil
}

// maxSpanYears bounds the event time the generated events span: a
// timestamp in microseconds from the base time overflows an int64 after
// about 292,000 years.
const (
	maxSpanYears = 10_000
	secondsAYear = 365.25 * 24 * 3600
	maxSpanUs    = maxSpanYears * secondsAYear * 1e6
	// unboundedSpanEvents is the events an unbounded source's rate is
	// checked for: a rate that spreads them over maxSpanYears would
	// overflow after some 10^12 more, which no run makes.
	unboundedSpanEvents = 1_000_000_000
)

// split is one generator: a contiguous range of event ids on a timeline
// of its own, as the reference generator's split configs.
type split struct {
	index, of int64 // split index of `of`
	count     int64 // events generated so far
	max       int64 // events it generates
	firstID   int64
	baseMs    int64
	delayUs   float64 // between two events of the split
	id        string  // for per-split watermarks
}

func newSplit(c Config, index, of int64) split {
	initTables()
	total := c.Events
	if total == 0 {
		total = math.MaxInt64 / 4 // unbounded, without overflow
	}
	per := total / of
	s := split{index: index, of: of, max: per, firstID: 1 + index*per, baseMs: c.BaseTime.UnixMilli(),
		delayUs: 1e6 / c.Rate * float64(of), id: "nexmark " + strconv.FormatInt(index, 10) + "/" + strconv.FormatInt(of, 10)}
	if index == of-1 {
		s.max = total - per*(of-1) // the last split takes the remainder
	}
	return s
}

// timestampFor is the event time of the split's event number n.
func (s *split) timestampFor(n int64) int64 { return s.baseMs + int64(float64(n)*s.delayUs)/1000 }

// next fills e with the split's next event.
func (s *split) next(e *Event) {
	number := 1 + s.count // firstEventNumber is 1
	id := s.firstID + number
	ts := s.timestampFor(number)
	r := newRNG(id)
	switch rem := id % totalProportion; {
	case rem < personProportion:
		e.Kind = PersonEvent
		nextPerson(&e.Person, id, &r, ts)
	case rem < auctionEnd:
		e.Kind = AuctionEvent
		nextAuction(&e.Auction, s, number, id, &r, ts)
	default:
		e.Kind = BidEvent
		nextBid(&e.Bid, id, &r, ts)
	}
	s.count++
}

// Events returns every event a source of cfg with the given number of
// splits generates (bounded configs only), split by split: what
// `weir nexmark generate` writes, and what tests compute results from.
func Events(cfg Config, splits int) (iter.Seq[Event], error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Events == 0 || splits < 1 {
		return nil, fmt.Errorf("nexmark: listing events needs a bounded count (got %d) and at least one split (got %d)", cfg.Events, splits)
	}
	return func(yield func(Event) bool) {
		var e Event
		for i := range int64(splits) {
			s := newSplit(cfg, i, int64(splits))
			for s.count < s.max {
				s.next(&e)
				if !yield(e) {
					return
				}
			}
		}
	}, nil
}

// lastPerson is the id (base 0) of the last person generated at or before
// event id.
func lastPerson(id int64) int64 {
	epoch, off := id/totalProportion, id%totalProportion
	if off >= personProportion {
		off = personProportion - 1
	}
	return epoch*personProportion + off
}

// lastAuction is the id (base 0) of the last auction generated at or
// before event id.
func lastAuction(id int64) int64 {
	epoch, off := id/totalProportion, id%totalProportion
	switch {
	case off < personProportion:
		epoch--
		off = auctionEnd - personProportion - 1
	case off >= auctionEnd:
		off = auctionEnd - personProportion - 1
	default:
		off -= personProportion
	}
	return epoch*(auctionEnd-personProportion) + off
}

// nextPersonID picks an active person (base 0), or one a little ahead.
func nextPersonID(id int64, r *rng) int64 {
	people := lastPerson(id) + 1
	active := min(people, numActivePeople)
	return people - active + r.intn(active+personIDLead)
}

// nextAuctionID picks an auction in flight (base 0), or one a little ahead.
func nextAuctionID(id int64, r *rng) int64 {
	last := lastAuction(id)
	lo := max(last-numInFlight, 0)
	return lo + r.intn(last-lo+1+auctionIDLead)
}

func nextPerson(p *Person, id int64, r *rng, ts int64) {
	p.ID = lastPerson(id) + firstPersonID
	p.Name = names[r.intn(int64(len(names)))]
	p.EmailAddress = emails[r.intn(int64(len(emails)))]
	p.CreditCard = creditCards[r.intn(int64(len(creditCards)))]
	p.City = cities[r.intn(int64(len(cities)))]
	p.State = states[r.intn(int64(len(states)))]
	p.DateTime = Timestamp(ts)
	p.Extra = nextExtra(r, 8+len(p.Name)+len(p.EmailAddress)+len(p.CreditCard)+len(p.City)+len(p.State), avgPersonBytes)
}

func nextAuction(a *Auction, s *split, number, id int64, r *rng, ts int64) {
	a.ID = lastAuction(id) + firstAuctionID
	if r.intn(hotSellersRatio) > 0 {
		a.Seller = lastPerson(id) / hotRatioBucket * hotRatioBucket
	} else {
		a.Seller = nextPersonID(id, r)
	}
	a.Seller += firstPersonID
	a.Category = firstCategoryID + r.intn(numCategories)
	a.InitialBid = nextPrice(r)
	// The auction lasts on average until about numInFlight auctions later.
	horizon := s.timestampFor(number+numInFlight*totalProportion/(auctionEnd-personProportion)) - ts
	a.Expires = Timestamp(ts + 1 + r.intn(max(2*horizon, 1)))
	a.Reserve = a.InitialBid + nextPrice(r)
	a.ItemName = nextString(r, 20)
	a.Description = nextString(r, 100)
	a.DateTime = Timestamp(ts)
	a.Extra = nextExtra(r, 8+len(a.ItemName)+len(a.Description)+8+8+8+8+8, avgAuctionBytes)
}

func nextBid(b *Bid, id int64, r *rng, ts int64) {
	if r.intn(hotAuctionRatio) > 0 {
		b.Auction = lastAuction(id) / hotRatioBucket * hotRatioBucket
	} else {
		b.Auction = nextAuctionID(id, r)
	}
	b.Auction += firstAuctionID
	if r.intn(hotBiddersRatio) > 0 {
		b.Bidder = lastPerson(id)/hotRatioBucket*hotRatioBucket + 1
	} else {
		b.Bidder = nextPersonID(id, r)
	}
	b.Bidder += firstPersonID
	b.Price = nextPrice(r)
	if r.intn(2) == 0 {
		i := r.intn(int64(len(hotChannels)))
		b.Channel, b.URL = hotChannels[i], hotURLs[i]
	} else {
		i := r.intn(int64(len(channels)))
		b.Channel, b.URL = channels[i], channelURLs[i]
	}
	b.DateTime = Timestamp(ts)
	b.Extra = nextExtra(r, 8+8+8+8, avgBidBytes)
}

// nextPrice is round(10^(6U) × 100) cents: from 1 dollar to a million.
// 10^x is computed as e^(x·ln 10), within a few units in the last place of
// math.Pow(10, x) and at half its cost (a logarithm fewer); it was half the
// generator's time.
func nextPrice(r *rng) int64 { return int64(math.Round(math.Exp(r.float()*(6*math.Ln10)) * 100)) }

// nextString is 3 to max−1 characters of a–z and spaces, trimmed.
func nextString(r *rng, max int) string {
	n := 3 + int(r.intn(int64(max-3)))
	off := int(r.intn(int64(len(text) - n)))
	return strings.TrimSpace(text[off : off+n])
}

// nextExtra pads a record to about avg bytes: d ± 20%, d = avg − size.
func nextExtra(r *rng, size, avg int) string {
	if size >= avg {
		return ""
	}
	d := avg - size
	delta := int(math.Round(0.2 * float64(d)))
	n := d - delta
	if delta > 0 {
		n += int(r.intn(int64(2 * delta)))
	}
	off := int(r.intn(int64(len(text) - n)))
	return text[off : off+n]
}

// rng is SplitMix64, seeded with the event id: each event's values depend
// on its id alone, so a restored source regenerates the same events. The
// seed is the id mixed, so that neighbouring ids' streams are unrelated
// (seeded with the id times the step, id+1's stream would be id's shifted
// by one draw).
type rng struct{ s uint64 }

func newRNG(id int64) rng { return rng{s: mix(uint64(id) ^ 0x5851f42d4c957f2d)} }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	return mix(r.s)
}

// mix is SplitMix64's finalizer.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// intn is uniform in [0, n), n > 0.
func (r *rng) intn(n int64) int64 {
	hi, _ := bits.Mul64(r.next(), uint64(n))
	return int64(hi)
}

// float is uniform in [0, 1).
func (r *rng) float() float64 { return float64(r.next()>>11) / (1 << 53) }

// Pools of values, built once from a fixed seed: records take substrings
// and entries of them, so that generating allocates nothing.
var (
	text        string // a–z with a space about every 13th character
	names       []string
	emails      []string
	creditCards []string
	cities      = []string{"Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"}
	states      = []string{"AZ", "CA", "ID", "OR", "WA", "WY"}
	hotChannels = []string{"Google", "Facebook", "Baidu", "Apple"}
	hotURLs     = []string{"https://www.google.com/search", "https://www.facebook.com/marketplace", "https://www.baidu.com/s", "https://www.apple.com/shop"}
	channels    []string
	channelURLs []string
)

// initTables fills the tables once, when the first split is made: every
// process that links this package (the weir command, whether or not it
// runs Nexmark) paid 13 ms and 3 MB at start when it was an init function.
var initTables = sync.OnceFunc(func() {
	r := newRNG(-1)
	b := make([]byte, 1<<16)
	for i := range b {
		if r.intn(13) == 0 {
			b[i] = ' '
		} else {
			b[i] = byte('a' + r.intn(26))
		}
	}
	text = string(b)
	for _, f := range []string{"Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"} {
		for _, l := range []string{"Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"} {
			names = append(names, f+" "+l)
		}
	}
	for range 4096 {
		emails = append(emails, nextString(&r, 7)+"@"+nextString(&r, 5)+".com")
		creditCards = append(creditCards, fmt.Sprintf("%04d %04d %04d %04d", r.intn(10000), r.intn(10000), r.intn(10000), r.intn(10000)))
	}
	for i := range 10_000 {
		channels = append(channels, "channel-"+strconv.Itoa(i))
		channelURLs = append(channelURLs, "https://www.nexmark.com/"+word(&r)+"/"+word(&r)+"/"+word(&r)+"/item.htm?query=1&channel_id="+strconv.Itoa(i))
	}
})

// word is 5 letters.
func word(r *rng) string {
	var b [5]byte
	for i := range b {
		b[i] = byte('a' + r.intn(26))
	}
	return string(b[:])
}

// Generator returns the Nexmark source's reader factory. Its splits are
// checkpointed with their positions and move between subtasks when the
// job is restored at another parallelism; each has its own watermark.
func Generator(cfg Config) (func() weir.SourceReader[Event], error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return func() weir.SourceReader[Event] { return &reader{cfg: cfg} }, nil
}

type reader struct {
	operator.Base
	cfg    Config
	ctx    *operator.Context
	splits []split
	// done are the splits read to the end: checkpointed too, so that a
	// rewind knows every split of the source (see rewind).
	done    []split
	turn    int
	entered bool
	ev      Event
	// throttling: this subtask's share of Config.Throttle, and the events
	// emitted since start
	perTask float64
	start   time.Time
	emitted int64
}

func (r *reader) Open(ctx *operator.Context) error {
	r.ctx, r.start = ctx, ctx.Now()
	err := r.open(ctx)
	// A subtask's share of the throttle is its share of the splits, which
	// a restore at another parallelism keeps: 1/parallelism would leave
	// the shares of subtasks without a split unused.
	if mine := slices.Concat(r.splits, r.done); len(mine) > 0 {
		r.perTask = r.cfg.Throttle * float64(len(mine)) / float64(mine[0].of)
	}
	return err
}

func (r *reader) open(ctx *operator.Context) error {
	if ctx.Rewind {
		return r.rewind(ctx.Restore)
	}
	if ctx.Restore == nil {
		n := int64(r.cfg.Splits)
		if n == 0 {
			n = int64(ctx.Parallelism)
		}
		for i := int64(ctx.Subtask); i < n; i += int64(ctx.Parallelism) {
			r.splits = append(r.splits, newSplit(r.cfg, i, n))
		}
		return nil
	}
	splits, err := r.restoreSplits(ctx.Restore, ctx.Subtask, ctx.Parallelism)
	for _, s := range splits {
		if s.count == s.max {
			r.done = append(r.done, s)
		} else {
			r.splits = append(r.splits, s)
		}
	}
	return err
}

// restoreSplits is subtask i of p's share of the splits rs records, at
// their positions.
func (r *reader) restoreSplits(rs *operator.Restore, i, p int) ([]split, error) {
	items, err := state.RestoreList(rs.Handles, rs.Read, state.Split, "splits", i, p)
	if err != nil {
		return nil, err
	}
	var splits []split
	for _, it := range items {
		var v [4]int64
		for i := range v {
			x, n := binary.Varint(it)
			if n <= 0 {
				return nil, fmt.Errorf("nexmark: restore split: %w", codec.ErrShort)
			}
			v[i], it = x, it[n:]
		}
		index, of, count, events := v[0], v[1], v[2], v[3]
		if events != r.cfg.Events {
			return nil, operator.Permanent(fmt.Errorf("nexmark: the checkpoint's generator was started for %d events, this one is for %d: restore with the same count", events, r.cfg.Events))
		}
		s := newSplit(r.cfg, index, of)
		s.count = count
		splits = append(splits, s)
	}
	return splits, nil
}

// Rewindable: events are a function of their split and number; a bounded
// generator's checkpoints record every split, those read to the end too.
func (r *reader) Rewindable() error {
	if r.cfg.Events == 0 {
		return errors.New("an unbounded Nexmark generator cannot be rewound")
	}
	return nil
}

// rewind takes this subtask's share of the events checkpoint rs had
// generated (nil: none): each split it records, from its start up to its
// recorded position, without the throttle.
func (r *reader) rewind(rs *operator.Restore) error {
	r.cfg.Throttle = 0
	if rs == nil {
		return nil
	}
	recorded, err := r.restoreSplits(rs, 0, 1)
	if err != nil {
		return err
	}
	// NB: a checkpoint after one of an earlier version of Weir, which did
	// not record the splits read to the end, lacks those.
	seen := map[int64]bool{}
	for _, s := range recorded {
		if s.of != recorded[0].of || seen[s.index] {
			return operator.Permanent(fmt.Errorf("nexmark: checkpoint %d records splits of %d and of %d, or one twice: it cannot be rewound", rs.Checkpoint, recorded[0].of, s.of))
		}
		seen[s.index] = true
	}
	if len(recorded) == 0 || int64(len(seen)) != recorded[0].of {
		return operator.Permanent(fmt.Errorf("nexmark: checkpoint %d records %d of the generator's splits, not all: the others ended before a checkpoint of an earlier version of Weir, which did not record ended splits; it cannot be rewound",
			rs.Checkpoint, len(recorded)))
	}
	for _, s := range recorded {
		if s.index%int64(r.ctx.Parallelism) == int64(r.ctx.Subtask) {
			s.max, s.count = s.count, 0
			r.splits = append(r.splits, s)
		}
	}
	return nil
}

func (r *reader) Read(out weir.Collector[Event]) (operator.PollResult, error) {
	if !r.entered {
		// Every split holds the watermark back from the start.
		for i := range r.splits {
			weir.EnterSplit(out, r.splits[i].id)
		}
		r.entered = true
	}
	if len(r.splits) == 0 {
		return operator.PollResult{Exhausted: true}, nil
	}
	r.turn %= len(r.splits)
	s := &r.splits[r.turn]
	weir.EnterSplit(out, s.id)
	n := min(int64(r.cfg.BatchSize), s.max-s.count)
	if r.cfg.Throttle > 0 {
		elapsed := r.ctx.Now().Sub(r.start)
		// NB: in floating point, as a throttle may be too great for
		// its events to count in an int64 (1e300: as fast as it can).
		if n = int64(min(float64(n), elapsed.Seconds()*r.perTask+1-float64(r.emitted))); n <= 0 {
			wait := time.Duration(float64(r.emitted)/r.perTask*float64(time.Second)) - elapsed
			return operator.PollResult{IdleUntil: r.ctx.Now().Add(max(wait, time.Millisecond))}, nil
		}
		r.emitted += n
	}
	for range n {
		s.next(&r.ev)
		out.Collect(r.ev)
	}
	if s.count == s.max {
		weir.FinishSplit(out, s.id)
		r.done = append(r.done, *s)
		r.splits = append(r.splits[:r.turn], r.splits[r.turn+1:]...)
	} else {
		r.turn++
	}
	return operator.PollResult{Exhausted: len(r.splits) == 0}, nil
}

func (r *reader) Snapshot(checkpoint.ID) (operator.Async, error) {
	items := make([][]byte, 0, len(r.splits)+len(r.done))
	for _, s := range slices.Concat(r.splits, r.done) {
		b := binary.AppendVarint(nil, s.index)
		b = binary.AppendVarint(b, s.of)
		b = binary.AppendVarint(b, s.count)
		items = append(items, binary.AppendVarint(b, r.cfg.Events))
	}
	return r.ctx.SnapshotList(state.Split, "splits", items), nil
}

// Progress implements weir.ProgressReporter: events left in this
// subtask's splits, of the whole source's; unknown (-1) when unbounded.
func (r *reader) Progress() (remaining, total int64) {
	if r.cfg.Events == 0 {
		return -1, 0
	}
	for _, s := range r.splits {
		remaining += s.max - s.count
	}
	return remaining, r.cfg.Events
}
