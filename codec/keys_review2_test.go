package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"testing"
)

// rev2Temp encodes itself only through a pointer: json.Marshal of a value
// (as JSON.marshal calls it) never calls MarshalJSON on a non-addressable
// value, so it encodes rev2Temp's fields.
type rev2Temp struct{ C float64 }

func (t *rev2Temp) MarshalJSON() ([]byte, error) { return []byte(`"custom"`), nil }

type rev2Reading struct {
	Where string
	T     rev2Temp
}

// rev2Self is a top-level key with a pointer-receiver MarshalJSON.
type rev2Self struct {
	Name string
	C    float64
}

func (s *rev2Self) MarshalJSON() ([]byte, error) { return []byte(`"self"`), nil }

// rev2Text has a pointer-receiver MarshalText.
type rev2Text struct{ C float32 }

func (t *rev2Text) MarshalText() ([]byte, error) { return []byte("text"), nil }

type rev2TextKey struct {
	T [2]rev2Text
	N int
}

// rev2Promoted embeds a type whose *T has MarshalJSON: *rev2Promoted gets
// it promoted, so custom(rev2Promoted) is true for every field.
type rev2Promoted struct {
	rev2Temp
	Name string
	X    float64
}

func rev2Marshal(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestPointerMarshalerKeysEqualUnderEqualsEncodeAlike: keys whose type
// (or a field's type) has a pointer-receiver MarshalJSON/MarshalText are
// encoded by json.Marshal field by field (the value is not addressable),
// and canonicalized so: 0 and -0 encode alike. canonicalize skipped them
// as types that encode themselves. Found by an outside review, session 37.
func TestPointerMarshalerKeysEqualUnderEqualsEncodeAlike(t *testing.T) {
	neg := math.Copysign(0, -1)
	check := func(name string, a, b any, ea, eb []byte) {
		t.Helper()
		if a != b {
			t.Fatalf("%s: not one key", name)
		}
		if !bytes.Equal(ea, eb) {
			t.Errorf("%s: keys equal under == encode apart: %q vs %q (json.Marshal: %s)", name, ea, eb, rev2Marshal(a))
		}
	}
	{
		a, b := rev2Reading{"x", rev2Temp{neg}}, rev2Reading{"x", rev2Temp{0}}
		kc := ForKey[rev2Reading]()
		check("field with pointer MarshalJSON", a, b, kc.Append(nil, a), kc.Append(nil, b))
	}
	{
		a, b := rev2Self{"x", neg}, rev2Self{"x", 0}
		kc := ForKey[rev2Self]()
		check("key with pointer MarshalJSON", a, b, kc.Append(nil, a), kc.Append(nil, b))
	}
	{
		a, b := rev2TextKey{T: [2]rev2Text{{float32(neg)}, {1}}}, rev2TextKey{T: [2]rev2Text{{0}, {1}}}
		kc := ForKey[rev2TextKey]()
		check("array of pointer MarshalText", a, b, kc.Append(nil, a), kc.Append(nil, b))
	}
	{
		a, b := rev2Promoted{rev2Temp{neg}, "x", neg}, rev2Promoted{rev2Temp{0}, "x", 0}
		kc := ForKey[rev2Promoted]()
		check("embedded pointer MarshalJSON (promoted)", a, b, kc.Append(nil, a), kc.Append(nil, b))
	}
}

// TestPointerMarshalerKeyNotUTF8IsRefused: such a key holding a string
// that is not UTF-8 is refused (*KeyError); it was not, and two different
// keys had one encoding. Found by an outside review, session 37.
func TestPointerMarshalerKeyNotUTF8IsRefused(t *testing.T) {
	for name, f := range map[string]func() []byte{
		"key with pointer MarshalJSON": func() []byte { return ForKey[rev2Self]().Append(nil, rev2Self{Name: "\xff"}) },
		"embedded pointer MarshalJSON": func() []byte { return ForKey[rev2Promoted]().Append(nil, rev2Promoted{Name: "\xff"}) },
	} {
		func() {
			defer func() {
				err, _ := recover().(error)
				var ke *KeyError
				if !errors.As(err, &ke) {
					t.Errorf("%s: a key holding \\xff was not refused (panic %v); it encodes as %q, as the key holding \\xfe does", name, err, f())
				}
			}()
			f()
		}()
	}
}
