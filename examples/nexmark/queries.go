package nexmark

import (
	"time"

	"github.com/weirstream/weir"
)

// The queries' results, with the columns of the reference queries.

// BidRow is a bid without its channel and URL (q0, q7).
type BidRow struct {
	Auction  int64     `json:"auction"`
	Bidder   int64     `json:"bidder"`
	Price    int64     `json:"price"`
	DateTime Timestamp `json:"dateTime"`
	Extra    string    `json:"extra"`
}

func rowOf(b *Bid) BidRow {
	return BidRow{Auction: b.Auction, Bidder: b.Bidder, Price: b.Price, DateTime: b.DateTime, Extra: b.Extra}
}

// EuroBid is a bid with its price in euro cents (q1).
type EuroBid struct {
	Auction  int64     `json:"auction"`
	Bidder   int64     `json:"bidder"`
	Price    float64   `json:"price"`
	DateTime Timestamp `json:"dateTime"`
	Extra    string    `json:"extra"`
}

// AuctionPrice is an auction and a price bid on it (q2).
type AuctionPrice struct {
	Auction int64 `json:"auction"`
	Price   int64 `json:"price"`
}

// LocalSeller is an auction of a seller in Oregon, Idaho or California
// (q3).
type LocalSeller struct {
	Name  string `json:"name"`
	City  string `json:"city"`
	State string `json:"state"`
	ID    int64  `json:"id"`
}

// CategoryAverage is the average winning price of a category's closed
// auctions, as of the end of a 10 s window of closing times (q4).
type CategoryAverage struct {
	Category int64     `json:"id"`
	Average  int64     `json:"final"`
	AsOf     Timestamp `json:"asOf"`
}

// HotItem is an auction with the most bids in a 10 s window (q5).
type HotItem struct {
	Auction   int64     `json:"auction"`
	Num       int64     `json:"num"`
	StartTime Timestamp `json:"starttime"`
}

// NewSeller is a person who registered and opened an auction in the same
// 10 s window (q8).
type NewSeller struct {
	ID        int64     `json:"id"`
	Name      string    `json:"name"`
	StartTime Timestamp `json:"stime"`
}

// Q0 passes every bid through: the framework's own cost.
func Q0(events *weir.Stream[Event]) *weir.Stream[BidRow] {
	return weir.FlatMap(events, "q0", func(e Event, out weir.Collector[BidRow]) {
		if e.Kind == BidEvent {
			out.Collect(rowOf(&e.Bid))
		}
	})
}

// Q1 converts bid prices from dollars to euros.
func Q1(events *weir.Stream[Event]) *weir.Stream[EuroBid] {
	return weir.FlatMap(events, "q1", func(e Event, out weir.Collector[EuroBid]) {
		if b := &e.Bid; e.Kind == BidEvent {
			out.Collect(EuroBid{Auction: b.Auction, Bidder: b.Bidder, Price: 0.908 * float64(b.Price), DateTime: b.DateTime, Extra: b.Extra})
		}
	})
}

// Q2 selects the bids on every 123rd auction.
func Q2(events *weir.Stream[Event]) *weir.Stream[AuctionPrice] {
	return weir.FlatMap(events, "q2", func(e Event, out weir.Collector[AuctionPrice]) {
		if e.Kind == BidEvent && e.Bid.Auction%123 == 0 {
			out.Collect(AuctionPrice{Auction: e.Bid.Auction, Price: e.Bid.Price})
		}
	})
}

// sellerAuction is an auction reduced to what q3 and q8 need.
type sellerAuction struct {
	Seller, ID int64
}

// localPerson is a person reduced to what q3 needs.
type localPerson struct {
	ID                int64
	Name, City, State string
}

// Q3 joins the auctions of category 10 with their sellers, when they live
// in Oregon, Idaho or California: an incremental join whose state holds
// every such auction and person (as the reference query's).
func Q3(events *weir.Stream[Event]) *weir.Stream[LocalSeller] {
	auctions := weir.FlatMap(events, "q3 auctions", func(e Event, out weir.Collector[sellerAuction]) {
		if e.Kind == AuctionEvent && e.Auction.Category == 10 {
			out.Collect(sellerAuction{Seller: e.Auction.Seller, ID: e.Auction.ID})
		}
	})
	persons := weir.FlatMap(events, "q3 persons", func(e Event, out weir.Collector[localPerson]) {
		if p := &e.Person; e.Kind == PersonEvent && (p.State == "OR" || p.State == "ID" || p.State == "CA") {
			out.Collect(localPerson{ID: p.ID, Name: p.Name, City: p.City, State: p.State})
		}
	})
	return weir.Join(weir.KeyBy(auctions, func(a sellerAuction) int64 { return a.Seller }), weir.KeyBy(persons, func(p localPerson) int64 { return p.ID }),
		"q3 join", func(a sellerAuction, p localPerson) LocalSeller {
			return LocalSeller{Name: p.Name, City: p.City, State: p.State, ID: a.ID}
		}, weir.JoinConfig{})
}

// Q4 averages, per category, the winning bids of closed auctions: the
// highest bid between an auction's opening and its expiry. An auction
// closes when the watermark passes its expiry (or the input ends); each
// category's average is updated at the end of every 10 s of closing times
// (the reference query updates it at every change).
func Q4(events *weir.Stream[Event]) *weir.Stream[CategoryAverage] {
	auctions := weir.FlatMap(events, "q4 auctions", func(e Event, out weir.Collector[auctionSpan]) {
		if a := &e.Auction; e.Kind == AuctionEvent {
			out.Collect(auctionSpan{ID: a.ID, Category: a.Category, Opens: int64(a.DateTime), Expires: int64(a.Expires)})
		}
	})
	bids := weir.FlatMap(events, "q4 bids", func(e Event, out weir.Collector[priceAt]) {
		if e.Kind == BidEvent {
			out.Collect(priceAt{Auction: e.Bid.Auction, Price: e.Bid.Price, At: int64(e.Bid.DateTime)})
		}
	})
	closed := weir.KeyedCoProcess(weir.KeyBy(auctions, func(a auctionSpan) int64 { return a.ID }), weir.KeyBy(bids, func(b priceAt) int64 { return b.Auction }),
		"q4 winning bids", func() weir.KeyedCoProcessFunction[int64, auctionSpan, priceAt, winningBid] { return &winningBids{} })
	sums := weir.WindowAggregate(weir.Window(weir.KeyBy(closed, func(w winningBid) int64 { return w.Category }), weir.Tumbling(10*time.Second)),
		"q4 sums", sumCount{})
	running := weir.Reduce(weir.KeyBy(sums, func(r weir.WindowResult[int64, sum]) int64 { return r.Key }), "q4 running sums",
		func(acc, r weir.WindowResult[int64, sum]) weir.WindowResult[int64, sum] {
			r.Value.Total += acc.Value.Total
			r.Value.Count += acc.Value.Count
			return r
		})
	return weir.Map(running, "q4 averages", func(r weir.WindowResult[int64, sum]) CategoryAverage {
		return CategoryAverage{Category: r.Key, Average: r.Value.Total / r.Value.Count, AsOf: Timestamp(r.Window.End.UnixMilli())}
	})
}

// auctionSpan is an auction reduced to what q4 needs.
type auctionSpan struct {
	ID, Category, Opens, Expires int64
}

// priceAt is a bid reduced to what q4 needs.
type priceAt struct {
	Auction, Price, At int64
}

// winningBid is the highest bid of a closed auction of a category.
type winningBid struct {
	Category, Price int64
}

// winningBids keeps, per auction, its span and highest bid so far, and
// emits the highest when the auction closes. Bids that come before their
// auction wait for it until the watermark passes them: by then an auction
// still to come opens after them, and they cannot count.
type winningBids struct {
	auction *weir.ValueState[int64, openAuction]
	waiting *weir.ListState[int64, priceAt]
}

type openAuction struct {
	Span    auctionSpan
	Highest int64 // 0: no bid yet
}

func (w *winningBids) Open(c *weir.KeyedContext[int64]) (err error) {
	if w.auction, err = weir.NewValueState[int64, openAuction](c, "auction"); err != nil {
		return err
	}
	w.waiting, err = weir.NewListState[int64, priceAt](c, "waiting bids")
	return err
}

func (w *winningBids) Process1(c *weir.KeyedContext[int64], a auctionSpan, _ weir.Collector[winningBid]) error {
	open := openAuction{Span: a}
	for _, b := range w.waiting.Get() {
		if a.Opens <= b.At && b.At <= a.Expires {
			open.Highest = max(open.Highest, b.Price)
		}
	}
	w.waiting.Clear()
	w.auction.Update(open)
	c.RegisterEventTimer(time.UnixMilli(a.Expires))
	return nil
}

func (w *winningBids) Process2(c *weir.KeyedContext[int64], b priceAt, _ weir.Collector[winningBid]) error {
	open, ok := w.auction.Value()
	switch {
	case !ok:
		w.waiting.Add(b)
		c.RegisterEventTimer(time.UnixMilli(b.At))
	case open.Span.Opens <= b.At && b.At <= open.Span.Expires && b.Price > open.Highest:
		open.Highest = b.Price
		w.auction.Update(open)
	}
	return nil
}

func (w *winningBids) OnTimer(c *weir.KeyedContext[int64], at time.Time, out weir.Collector[winningBid]) error {
	open, ok := w.auction.Value()
	if !ok {
		// Bids the watermark passed: their auction opens later, if at all.
		limit := at.UnixMilli()
		var keep []priceAt
		for _, b := range w.waiting.Get() {
			if b.At > limit {
				keep = append(keep, b)
			}
		}
		w.waiting.Update(keep)
		return nil
	}
	if at.UnixMilli() == open.Span.Expires {
		if open.Highest > 0 {
			out.Collect(winningBid{Category: open.Span.Category, Price: open.Highest})
		}
		w.auction.Clear()
	}
	return nil
}

// sum is a total and a count, for an average.
type sum struct {
	Total, Count int64
}

type sumCount struct{}

func (sumCount) Zero() sum { return sum{} }
func (sumCount) Add(s sum, w winningBid) sum {
	return sum{Total: s.Total + w.Price, Count: s.Count + 1}
}
func (sumCount) Merge(a, b sum) sum { return sum{Total: a.Total + b.Total, Count: a.Count + b.Count} }
func (sumCount) Result(s sum) sum   { return s }

// Q5 finds the hot items: in every 10 s window sliding by 2 s, the
// auctions with the most bids. The count per auction is incremental (on
// 2 s panes); a second window gathers each window's counts.
func Q5(events *weir.Stream[Event]) *weir.Stream[HotItem] {
	auctions := weir.FlatMap(events, "q5 bids", func(e Event, out weir.Collector[int64]) {
		if e.Kind == BidEvent {
			out.Collect(e.Bid.Auction)
		}
	})
	counts := weir.WindowAggregate(weir.Window(weir.KeyBy(auctions, func(a int64) int64 { return a }), weir.Sliding(10*time.Second, 2*time.Second)),
		"q5 bids per auction", weir.Count[int64]())
	byWindow := weir.KeyBy(counts, weir.WindowEnd[int64, int64])
	return weir.WindowProcess(weir.Window(byWindow, weir.Tumbling(2*time.Second)), "q5 hottest",
		func(_ int64, _ weir.TimeWindow, in []weir.WindowResult[int64, int64], out weir.Collector[HotItem]) error {
			var most int64
			for _, r := range in {
				most = max(most, r.Value)
			}
			for _, r := range in {
				if r.Value == most {
					out.Collect(HotItem{Auction: r.Key, Num: r.Value, StartTime: Timestamp(r.Window.Start.UnixMilli())})
				}
			}
			return nil
		})
}

// Q7 finds the highest bids of every tumbling 10 s window, with the
// reference query's bounds: a bid at a window's very end (the next
// window's first millisecond) counts for it too, when its price is that
// window's highest. Each window's maximum is found in two steps: per
// share of the bids (by price), then over the shares.
func Q7(events *weir.Stream[Event]) *weir.Stream[BidRow] {
	bids := weir.FlatMap(events, "q7 bids", func(e Event, out weir.Collector[BidRow]) {
		if e.Kind == BidEvent {
			out.Collect(rowOf(&e.Bid))
		}
	})
	shares := weir.WindowAggregate(weir.Window(weir.KeyBy(bids, func(b BidRow) int64 { return b.Price % 64 }), weir.Tumbling(10*time.Second)),
		"q7 highest per share", highest{})
	atEnds := weir.Filter(bids, "q7 bids at window ends", func(b BidRow) bool { return b.DateTime%q7Window == 0 })
	return weir.KeyedCoProcess(
		weir.KeyBy(shares, func(r weir.WindowResult[int64, []BidRow]) int64 { return r.Window.Start.UnixMilli() }),
		weir.KeyBy(atEnds, func(b BidRow) int64 { return int64(b.DateTime) - q7Window }),
		"q7 highest bids", func() weir.KeyedCoProcessFunction[int64, weir.WindowResult[int64, []BidRow], BidRow, BidRow] {
			return &highestBids{}
		})
}

const q7Window = 10_000 // ms

// highest keeps the bids with the highest price.
type highest struct{}

func (highest) Zero() []BidRow { return nil }
func (highest) Add(acc []BidRow, b BidRow) []BidRow {
	switch {
	case len(acc) == 0 || b.Price > acc[0].Price:
		return []BidRow{b}
	case b.Price == acc[0].Price:
		return append(acc, b)
	}
	return acc
}
func (h highest) Merge(a, b []BidRow) []BidRow {
	for _, x := range b {
		a = h.Add(a, x)
	}
	return a
}
func (highest) Result(acc []BidRow) []BidRow { return acc }

// highestBids gathers, per window (keyed by its start), the shares'
// highest bids and the bids at its end, and emits the highest when the
// watermark passes the window's end.
type highestBids struct {
	best *weir.ValueState[int64, []BidRow]
	ends *weir.ListState[int64, BidRow]
}

func (h *highestBids) Open(c *weir.KeyedContext[int64]) (err error) {
	if h.best, err = weir.NewValueState[int64, []BidRow](c, "best"); err != nil {
		return err
	}
	h.ends, err = weir.NewListState[int64, BidRow](c, "bids at the end")
	return err
}

func (h *highestBids) Process1(c *weir.KeyedContext[int64], r weir.WindowResult[int64, []BidRow], _ weir.Collector[BidRow]) error {
	best, _ := h.best.Value()
	h.best.Update(highest{}.Merge(best, r.Value))
	c.RegisterEventTimer(time.UnixMilli(c.Key() + q7Window))
	return nil
}

func (h *highestBids) Process2(c *weir.KeyedContext[int64], b BidRow, _ weir.Collector[BidRow]) error {
	h.ends.Add(b)
	c.RegisterEventTimer(time.UnixMilli(c.Key() + q7Window))
	return nil
}

func (h *highestBids) OnTimer(_ *weir.KeyedContext[int64], _ time.Time, out weir.Collector[BidRow]) error {
	best, _ := h.best.Value()
	for _, b := range best {
		out.Collect(b)
	}
	if len(best) > 0 {
		for _, b := range h.ends.Get() {
			if b.Price == best[0].Price {
				out.Collect(b)
			}
		}
	}
	h.best.Clear()
	h.ends.Clear()
	return nil
}

// personName is a person reduced to what q8 needs.
type personName struct {
	ID   int64
	Name string
}

// Q8 finds the people who registered and opened an auction in the same
// tumbling 10 s window.
func Q8(events *weir.Stream[Event]) *weir.Stream[NewSeller] {
	persons := weir.FlatMap(events, "q8 persons", func(e Event, out weir.Collector[personName]) {
		if e.Kind == PersonEvent {
			out.Collect(personName{ID: e.Person.ID, Name: e.Person.Name})
		}
	})
	sellers := weir.FlatMap(events, "q8 sellers", func(e Event, out weir.Collector[int64]) {
		if e.Kind == AuctionEvent {
			out.Collect(e.Auction.Seller)
		}
	})
	return weir.WindowCoGroup(weir.KeyBy(persons, func(p personName) int64 { return p.ID }), weir.KeyBy(sellers, func(s int64) int64 { return s }),
		weir.Tumbling(10*time.Second), "q8 join",
		func(id int64, w weir.TimeWindow, ps []personName, sellers []int64, out weir.Collector[NewSeller]) error {
			if len(sellers) == 0 {
				return nil
			}
			seen := map[string]bool{}
			for _, p := range ps {
				if !seen[p.Name] {
					seen[p.Name] = true
					out.Collect(NewSeller{ID: id, Name: p.Name, StartTime: Timestamp(w.Start.UnixMilli())})
				}
			}
			return nil
		})
}
