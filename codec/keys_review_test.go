package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"testing"
)

type reviewBase struct{ Lat float64 }

// Struct keys whose encoding is not compiled (an embedded field, a ",string"
// tag, an "omitzero" tag, a json.Number field) go to json.Marshal: the
// encoder of keys never sees them.
type reviewEmbedded struct {
	reviewBase
	Name string
}

type reviewStringTag struct {
	Name string
	Lat  float64 `json:",string"`
}

type reviewNumber struct {
	N    json.Number
	Name string
	Lat  float64
}

// TestKeyCodecOfStructsJSONMarshalEncodes: ForKey's promise (keys equal
// under == encode alike; a string that is not UTF-8 panics with a
// *KeyError) holds for struct keys whose encoding is not compiled and goes
// to json.Marshal (an embedded field, a ",string" tag, a json.Number
// field): the encoder of keys never saw them. Found by an outside review,
// session 37.
func TestKeyCodecOfStructsJSONMarshalEncodes(t *testing.T) {
	neg := math.Copysign(0, -1)
	alike := func(name string, a, b []byte) {
		if !bytes.Equal(a, b) {
			t.Errorf("%s: keys equal under == encode apart: %q vs %q", name, a, b)
		}
	}
	{
		a, b := reviewEmbedded{reviewBase{neg}, "x"}, reviewEmbedded{reviewBase{0}, "x"}
		if a != b {
			t.Fatal("not one key")
		}
		kc := ForKey[reviewEmbedded]()
		alike("embedded -0", kc.Append(nil, a), kc.Append(nil, b))
	}
	{
		a, b := reviewStringTag{"x", neg}, reviewStringTag{"x", 0}
		kc := ForKey[reviewStringTag]()
		alike(",string -0", kc.Append(nil, a), kc.Append(nil, b))
	}
	{
		a, b := reviewNumber{"1", "x", neg}, reviewNumber{"1", "x", 0}
		kc := ForKey[reviewNumber]()
		alike("json.Number -0", kc.Append(nil, a), kc.Append(nil, b))
	}
	// not UTF-8: two different keys, one encoding, and no KeyError
	refused := func(name string, f func() []byte) {
		defer func() {
			err, _ := recover().(error)
			var ke *KeyError
			if !errors.As(err, &ke) {
				t.Errorf("%s: a key holding a string that is not UTF-8 was not refused with a *KeyError (panic %v)", name, err)
			}
		}()
		f()
	}
	refused("embedded \\xff", func() []byte { return ForKey[reviewEmbedded]().Append(nil, reviewEmbedded{Name: "\xff"}) })
	for name, err := range map[string]error{"embedded": Faithful[reviewEmbedded](), ",string": Faithful[reviewStringTag](), "json.Number": Faithful[reviewNumber]()} {
		if err != nil {
			t.Logf("%s: Faithful refuses it: %v", name, err)
		}
	}
	refused("json.Number \\xff", func() []byte { return ForKey[reviewNumber]().Append(nil, reviewNumber{Name: "\xff"}) })
	refused(",string \\xff", func() []byte { return ForKey[reviewStringTag]().Append(nil, reviewStringTag{Name: "\xff"}) })
	// A type that encodes itself decides: its string is not checked.
	if got := ForKey[reviewNumber]().Append(nil, reviewNumber{N: "1", Name: "a"}); !bytes.Contains(got, []byte(`"N":1`)) {
		t.Errorf("json.Number: %q", got)
	}
}
