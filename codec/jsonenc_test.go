package codec

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

var jsonSeeds = flag.Int("codec.seeds", 3000, "TestJSONEncoderMatchesEncodingJSON: random types to try")

// TestJSONEncoderMatchesEncodingJSON generates random types (structs of
// numbers, strings, bools, pointers, slices, arrays, nested structs; tags
// with names, omitempty, "-", the options that send a type to
// json.Marshal) and random values of them (strings with HTML, control
// characters, quotes, invalid UTF-8, U+2028; floats at the exponent
// cutoffs, -0), and requires the compiled encoder to write exactly what
// json.Marshal writes: keys are hashed from their encoding, and state
// written before must read back alike.
func TestJSONEncoderMatchesEncodingJSON(t *testing.T) {
	compiled := 0
	for seed := range *jsonSeeds {
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		typ := randomType(r, 0)
		e := encoderOf(typ, false)
		if e == nil {
			continue
		}
		compiled++
		for range 5 {
			v := reflect.New(typ)
			fill(r, v.Elem(), 0)
			want, err := json.Marshal(v.Elem().Interface())
			got, panicked := encodeCatching(e.enc, v)
			if err != nil {
				if !panicked {
					t.Fatalf("seed %d: %v: json.Marshal fails (%v), the encoder wrote %s", seed, typ, err, got)
				}
				continue
			}
			if panicked || !bytes.Equal(got, want) {
				t.Fatalf("seed %d: %v:\n got %s (panicked %v)\nwant %s", seed, typ, got, panicked, want)
			}
		}
	}
	if compiled < *jsonSeeds/2 {
		t.Fatalf("only %d of %d random types compiled: the generator tests json.Marshal against itself", compiled, *jsonSeeds)
	}
	t.Logf("%d of %d random types compiled", compiled, *jsonSeeds)
}

func encodeCatching(e encoder, v reflect.Value) (b []byte, panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(unencodable); !ok {
				panic(r)
			}
			panicked = true
		}
	}()
	return e(nil, v.UnsafePointer()), false
}

var leaves = []reflect.Type{
	reflect.TypeFor[bool](), reflect.TypeFor[int](), reflect.TypeFor[int8](), reflect.TypeFor[int16](),
	reflect.TypeFor[int32](), reflect.TypeFor[int64](), reflect.TypeFor[uint](), reflect.TypeFor[uint8](),
	reflect.TypeFor[uint16](), reflect.TypeFor[uint32](), reflect.TypeFor[uint64](), reflect.TypeFor[uintptr](),
	reflect.TypeFor[float32](), reflect.TypeFor[float64](), reflect.TypeFor[string](), reflect.TypeFor[[]byte](),
	reflect.TypeFor[named](), reflect.TypeFor[time.Duration](),
	// Types json.Marshal must encode: a whole type holding one goes there.
	reflect.TypeFor[time.Time](), reflect.TypeFor[map[string]int](), reflect.TypeFor[any](),
	reflect.TypeFor[json.Number](), reflect.TypeFor[json.RawMessage](), reflect.TypeFor[ptrMarshaler](),
}

type named string

type ptrMarshaler struct{ A int }

func (*ptrMarshaler) MarshalJSON() ([]byte, error) { return []byte(`"mine"`), nil }

func randomType(r *rand.Rand, depth int) reflect.Type {
	k := r.IntN(10)
	if depth > 2 {
		k = 0
	}
	switch k {
	case 0, 1, 2, 3:
		l := leaves[r.IntN(len(leaves))]
		if r.IntN(8) == 0 { // mostly plain ones
			return l
		}
		return leaves[r.IntN(len(leaves)-6)]
	case 4:
		return reflect.PointerTo(randomType(r, depth+1))
	case 5:
		return reflect.SliceOf(randomType(r, depth+1))
	case 6:
		return reflect.ArrayOf(r.IntN(3), randomType(r, depth+1))
	}
	var fields []reflect.StructField
	for i := range 1 + r.IntN(5) {
		f := reflect.StructField{Name: fmt.Sprintf("F%d", i), Type: randomType(r, depth+1)}
		names := []string{"", "a", "name", "a<b&c", "ünï", "with space", "x-y.z", "F0", "F1", "bad\\name"}
		opts := []string{"", ",omitempty", ",omitempty", ",string", ",omitzero", ",other"}
		switch r.IntN(6) {
		case 0:
			f.Tag = `json:"-"`
		case 1, 2, 3:
			f.Tag = reflect.StructTag(fmt.Sprintf(`json:%q`, names[r.IntN(len(names))]+opts[r.IntN(len(opts))]))
		case 4:
			f.Tag = `json:"-,"`
		}
		fields = append(fields, f)
	}
	return reflect.StructOf(fields)
}

var pieces = []string{"a", "Z", "0", " ", "<", ">", "&", `"`, `\`, "\n", "\t", "\r", "\b", "\f", "\x01", "\x1f",
	"\x7f", "\xff", "\xc3", "é", "€", "\u2028", "\u2029", "😀", "\ufffd", "/", "'"}

var floats = []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 1e-6, 9.999999e-7, 1e-7, 1e20, 1e21, 9.99e20, 123.456,
	math.MaxFloat64, math.SmallestNonzeroFloat64, 1e-9, 2.5e-10, math.Inf(1), math.NaN()}

func fill(r *rand.Rand, v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(r.IntN(2) == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if r.IntN(4) > 0 {
			v.SetInt(int64(r.Uint64()))
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if r.IntN(4) > 0 {
			v.SetUint(r.Uint64())
		}
	case reflect.Float32, reflect.Float64:
		switch r.IntN(3) {
		case 0:
			if r.IntN(10) > 0 { // NaN and ∞ now and then
				v.SetFloat(floats[r.IntN(len(floats)-2)])
			} else {
				v.SetFloat(floats[r.IntN(len(floats))])
			}
		case 1:
			v.SetFloat(math.Ldexp(r.Float64()-0.5, r.IntN(200)-100))
		}
	case reflect.String:
		var b strings.Builder
		for range r.IntN(8) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		v.SetString(b.String())
	case reflect.Pointer:
		if r.IntN(3) > 0 {
			v.Set(reflect.New(v.Type().Elem()))
			fill(r, v.Elem(), depth+1)
		}
	case reflect.Slice:
		if r.IntN(4) > 0 {
			n := r.IntN(4)
			v.Set(reflect.MakeSlice(v.Type(), n, n))
			for i := range n {
				fill(r, v.Index(i), depth+1)
			}
		}
	case reflect.Array:
		for i := range v.Len() {
			fill(r, v.Index(i), depth+1)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Field(i).CanSet() {
				fill(r, v.Field(i), depth+1)
			}
		}
	case reflect.Map:
		if r.IntN(2) == 0 {
			v.Set(reflect.ValueOf(map[string]int{"b": 2, "a<": 1}))
		}
	}
}

// What goes to json.Marshal, and what does not.
func TestJSONEncoderCompiles(t *testing.T) {
	type plain struct {
		Name  string `json:"name"`
		ID    int64
		Tags  []string `json:",omitempty"`
		Next  *plain   `json:"-"`
		inner int
	}
	type embeds struct {
		plain
		B int
	}
	type recursive struct {
		Next *recursive
	}
	type quoted struct {
		N int `json:",string"`
	}
	collide := reflect.StructOf([]reflect.StructField{ // vet refuses it written out
		{Name: "A", Type: reflect.TypeFor[int](), Tag: `json:"x"`},
		{Name: "B", Type: reflect.TypeFor[int](), Tag: `json:"x"`}})
	for _, c := range []struct {
		t    reflect.Type
		want bool
	}{
		{reflect.TypeFor[plain](), true},
		{reflect.TypeFor[[]plain](), true},
		{reflect.TypeFor[embeds](), false},
		{reflect.TypeFor[recursive](), false},
		{reflect.TypeFor[quoted](), false},
		{collide, false},
		{reflect.TypeFor[time.Time](), false},
		{reflect.TypeFor[ptrMarshaler](), false},
		{reflect.TypeFor[map[string]int](), false},
		{reflect.TypeFor[any](), false},
	} {
		if got := encoderOf(c.t, false) != nil; got != c.want {
			t.Errorf("%v compiled: %v, want %v", c.t, got, c.want)
		}
	}
	// And through the codec: the same bytes, length-prefixed, back again.
	v := embeds{plain: plain{Name: "a<b", ID: -3, inner: 9}, B: 2}
	checkJSONCodec(t, v)
	checkJSONCodec(t, plain{Name: "é\u2028", ID: math.MaxInt64, Tags: []string{"x", ""}, inner: 7})
	checkJSONCodec(t, []recursive{{Next: &recursive{}}})
}

func checkJSONCodec[T any](t *testing.T, v T) {
	t.Helper()
	want, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	c := JSON[T]{}
	b := c.Append([]byte("prefix"), v)
	got, n, err := ReadBytes(b[len("prefix"):])
	if err != nil || n != len(b)-len("prefix") || !bytes.Equal(got, want) {
		t.Fatalf("%T: Append wrote %q (n %d, %v), want %q after the prefix", v, b, n, err, want)
	}
	back, _, err := c.Decode(b[len("prefix"):])
	if err != nil {
		t.Fatal(err)
	}
	again, _ := json.Marshal(back)
	if !bytes.Equal(again, want) {
		t.Fatalf("%T: decoded to %s, want %s", v, again, want)
	}
}

// A value JSON cannot carry panics as before, naming the type and the fix.
func TestJSONEncoderNaN(t *testing.T) {
	type f struct{ X float64 }
	defer func() {
		r := recover()
		if s, _ := r.(string); !strings.Contains(s, "codec.f") || !strings.Contains(s, "NaN") || !strings.Contains(s, "codec of its own") {
			t.Fatalf("panic %v, want one naming the type, NaN and the fix", r)
		}
	}()
	JSON[f]{}.Append(nil, f{X: math.NaN()})
}

func BenchmarkJSONAppend(b *testing.B) {
	type person struct {
		ID    int64  `json:"id"`
		Name  string `json:"name"`
		City  string `json:"city"`
		State string `json:"state"`
	}
	v := person{ID: 1234567, Name: "Walter Hunter", City: "Portland", State: "OR"}
	var buf []byte
	b.Run("compiled", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = JSON[person]{}.Append(buf[:0], v)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = JSON[person]{}.marshal(buf[:0], v)
		}
	})
}
