package codec_test

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/weirstream/weir/codec"
)

type review2Skipped struct {
	ID    int
	Cache string `json:"-"`
}

// An exported field tagged json:"-" is dropped by the JSON codec exactly as
// an unexported one is, yet Faithful skips it (codec.go: the `json:"-"`
// continue): the check misses a lossy type.
func TestReview2FaithfulMissesJSONDashField(t *testing.T) {
	c := codec.For[review2Skipped]()
	in := review2Skipped{ID: 1, Cache: "kept?"}
	out, _, err := c.Decode(c.Append(nil, in))
	if err != nil {
		t.Fatal(err)
	}
	if err := codec.Faithful[review2Skipped](); err == nil && !reflect.DeepEqual(in, out) {
		t.Fatalf("Faithful said nil, but %+v came back as %+v", in, out)
	}
}

// A type that encodes itself as text (encoding.TextMarshaler and
// TextUnmarshaler, as netip.Addr) round-trips through encoding/json, yet
// Faithful refuses it for its unexported fields: a false refusal.
func TestReview2FaithfulRefusesTextMarshaler(t *testing.T) {
	c := codec.For[netip.Addr]()
	in := netip.MustParseAddr("10.1.2.3")
	out, _, err := c.Decode(c.Append(nil, in))
	if err != nil || out != in {
		t.Fatalf("round trip: %v %v", out, err)
	}
	if err := codec.Faithful[netip.Addr](); err != nil {
		t.Fatalf("Faithful refuses a type that round-trips: %v", err)
	}
}
