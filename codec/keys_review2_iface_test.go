package codec

import (
	"bytes"
	"math"
	"testing"
)

type rev2inner struct{ F float64 }
type rev2Hidden struct {
	rev2inner
	S string
}
type rev2Named float32
type rev2Str string

type rev2IfKey struct {
	X any
	Y any
}

// TestInterfaceFieldsOfKeysCanonicalize: interface fields holding various
// types: no reflect panic, and -0 / 0 encode alike. Written by an outside
// review, session 37 (it found nothing here).
func TestInterfaceFieldsOfKeysCanonicalize(t *testing.T) {
	neg := math.Copysign(0, -1)
	cases := []struct{ a, b rev2IfKey }{
		{rev2IfKey{rev2inner{neg}, nil}, rev2IfKey{rev2inner{0}, nil}},
		{rev2IfKey{rev2Hidden{rev2inner{neg}, "s"}, 1}, rev2IfKey{rev2Hidden{rev2inner{0}, "s"}, 1}},
		{rev2IfKey{rev2Named(neg), rev2Str("a")}, rev2IfKey{rev2Named(0), rev2Str("a")}},
		{rev2IfKey{[2]any{neg, rev2inner{neg}}, nil}, rev2IfKey{[2]any{0.0, rev2inner{0}}, nil}},
		{rev2IfKey{rev2IfKey{neg, nil}, nil}, rev2IfKey{rev2IfKey{0.0, nil}, nil}},
		{rev2IfKey{struct{ rev2inner }{rev2inner{neg}}, nil}, rev2IfKey{struct{ rev2inner }{rev2inner{0}}, nil}},
	}
	kc := ForKey[rev2IfKey]()
	for i, c := range cases {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("case %d: panic %v", i, p)
				}
			}()
			if c.a != c.b {
				t.Fatalf("case %d not one key", i)
			}
			ea, eb := kc.Append(nil, c.a), kc.Append(nil, c.b)
			if !bytes.Equal(ea, eb) {
				t.Errorf("case %d: %q vs %q", i, ea, eb)
			}
		}()
	}
}
