// Package nexmark is the Nexmark benchmark on Weir: a deterministic,
// parallel generator of an online auction's events (people registering,
// auctions opening, bids), and the benchmark's queries q0–q8 (q6 left out)
// written against Weir's public API. See ../shared/NEXMARK.md in the
// repository's sources, and the nexmark/nexmark reference implementation.
package nexmark

import (
	"encoding/json"
	"fmt"
	"time"
)

// Timestamp is a time in milliseconds since the Unix epoch. In JSON it is
// a SQL timestamp in UTC, "2006-01-02 15:04:05.000", as Flink writes
// TIMESTAMP(3).
type Timestamp int64

const timestampLayout = "2006-01-02 15:04:05.000"

// Time is t as a time.Time.
func (t Timestamp) Time() time.Time { return time.UnixMilli(int64(t)) }

func (t Timestamp) String() string { return t.Time().UTC().Format(timestampLayout) }

func (t Timestamp) MarshalJSON() ([]byte, error) {
	return t.Time().UTC().AppendFormat([]byte{'"'}, timestampLayout+`"`), nil
}

func (t *Timestamp) UnmarshalJSON(b []byte) error {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return fmt.Errorf("nexmark: timestamp %s is not a quoted %q", b, timestampLayout)
	}
	tm, err := time.Parse(timestampLayout, string(b[1:len(b)-1]))
	if err != nil {
		return fmt.Errorf("nexmark: timestamp: %w", err)
	}
	*t = Timestamp(tm.UnixMilli())
	return nil
}

// Person is someone registering to buy or sell.
type Person struct {
	ID           int64     `json:"id"`
	Name         string    `json:"name"`
	EmailAddress string    `json:"emailAddress"`
	CreditCard   string    `json:"creditCard"`
	City         string    `json:"city"`
	State        string    `json:"state"`
	DateTime     Timestamp `json:"dateTime"`
	Extra        string    `json:"extra"`
}

// Auction is an item put up for sale until Expires.
type Auction struct {
	ID          int64     `json:"id"`
	ItemName    string    `json:"itemName"`
	Description string    `json:"description"`
	InitialBid  int64     `json:"initialBid"`
	Reserve     int64     `json:"reserve"`
	DateTime    Timestamp `json:"dateTime"`
	Expires     Timestamp `json:"expires"`
	Seller      int64     `json:"seller"`
	Category    int64     `json:"category"`
	Extra       string    `json:"extra"`
}

// Bid is a bid on an auction, in cents.
type Bid struct {
	Auction  int64     `json:"auction"`
	Bidder   int64     `json:"bidder"`
	Price    int64     `json:"price"`
	Channel  string    `json:"channel"`
	URL      string    `json:"url"`
	DateTime Timestamp `json:"dateTime"`
	Extra    string    `json:"extra"`
}

// Kind says which of an Event's records it holds.
type Kind uint8

const (
	PersonEvent Kind = iota + 1
	AuctionEvent
	BidEvent
)

func (k Kind) String() string {
	switch k {
	case PersonEvent:
		return "person"
	case AuctionEvent:
		return "auction"
	case BidEvent:
		return "bid"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Event is one generated event: the record its Kind names; the other two
// hold leftovers of earlier events. The records are held by value, so that
// generating and passing events allocates nothing.
type Event struct {
	Kind    Kind
	Person  Person
	Auction Auction
	Bid     Bid
}

// EventTime is an event's time, for watermark strategies.
func EventTime(e Event) time.Time { return time.UnixMilli(int64(e.dateTime())) }

func (e *Event) dateTime() Timestamp {
	switch e.Kind {
	case PersonEvent:
		return e.Person.DateTime
	case AuctionEvent:
		return e.Auction.DateTime
	}
	return e.Bid.DateTime
}

// jsonEvent is an event in JSON: {"person":…}, {"auction":…} or {"bid":…}.
type jsonEvent struct {
	Person  *Person  `json:"person,omitempty"`
	Auction *Auction `json:"auction,omitempty"`
	Bid     *Bid     `json:"bid,omitempty"`
}

func (e Event) MarshalJSON() ([]byte, error) {
	var j jsonEvent
	switch e.Kind {
	case PersonEvent:
		j.Person = &e.Person
	case AuctionEvent:
		j.Auction = &e.Auction
	case BidEvent:
		j.Bid = &e.Bid
	default:
		return nil, fmt.Errorf("nexmark: event of %v", e.Kind)
	}
	return json.Marshal(j)
}

func (e *Event) UnmarshalJSON(b []byte) error {
	var j jsonEvent
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*e = Event{}
	switch {
	case j.Person != nil && j.Auction == nil && j.Bid == nil:
		e.Kind, e.Person = PersonEvent, *j.Person
	case j.Auction != nil && j.Person == nil && j.Bid == nil:
		e.Kind, e.Auction = AuctionEvent, *j.Auction
	case j.Bid != nil && j.Person == nil && j.Auction == nil:
		e.Kind, e.Bid = BidEvent, *j.Bid
	default:
		return fmt.Errorf("nexmark: event %s has not exactly one of person, auction and bid", b)
	}
	return nil
}
