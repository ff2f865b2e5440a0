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

var binarySeeds = flag.Int("binary.seeds", 0, "values TestBinaryRoundTrip draws (default 2,000; 300 under -race)")

// defaultBinarySeeds is how many values TestBinaryRoundTrip draws without
// -binary.seeds (race_test.go lowers it: every value's prefixes are
// decoded too).
var defaultBinarySeeds = 2000

type inner struct {
	A int8
	B *string
	C []inner2
}

type inner2 struct{ X, Y uint16 }

type empty struct{}

// every holds a field of every kind Binary encodes, and fields JSON drops.
type every struct {
	I       int
	I8      int8
	I16     int16
	I32     int32
	I64     int64
	U       uint
	U8      uint8
	U16     uint16
	U32     uint32
	U64     uint64
	UP      uintptr
	F32     float32
	F64     float64
	B       bool
	S       string
	Bytes   []byte
	Strs    []string
	Arr     [3]int32
	Ptr     *int64
	PtrS    *inner
	In      inner
	Ins     []inner
	Empties []empty
	M       map[string]int64
	MI      map[int32][]inner2
	Omit    string `json:"o,omitempty"`
	Renamed int    `json:"renamed"`
	Dropped string `json:"-"`
	hidden  int
}

// carried is v as JSON carries it: without the fields JSON drops.
func carried(v every) every {
	v.Dropped, v.hidden = "", 0
	return v
}

func drawString(rng *rand.Rand) string {
	b := make([]byte, rng.IntN(20))
	for i := range b {
		b[i] = byte(rng.IntN(256)) // not always UTF-8: Binary keeps the bytes
	}
	return string(b)
}

func drawEvery(rng *rand.Rand) every {
	n := func() int { return rng.IntN(4) - 1 } // -1: nil
	v := every{
		I: int(rng.Uint64()), I8: int8(rng.Uint64()), I16: int16(rng.Uint64()), I32: int32(rng.Uint64()), I64: int64(rng.Uint64()),
		U: uint(rng.Uint64()), U8: uint8(rng.Uint64()), U16: uint16(rng.Uint64()), U32: uint32(rng.Uint64()), U64: rng.Uint64(), UP: uintptr(rng.Uint64()),
		F32: float32(rng.NormFloat64()), F64: rng.NormFloat64() * 1e10, B: rng.IntN(2) == 0, S: drawString(rng),
		Arr: [3]int32{rng.Int32(), -rng.Int32(), 0}, Omit: strings.Repeat("o", rng.IntN(2)), Renamed: rng.IntN(9), Dropped: "x", hidden: 7,
	}
	if k := n(); k >= 0 {
		v.Bytes = []byte(drawString(rng))[:0:0]
		for range k {
			v.Bytes = append(v.Bytes, byte(rng.IntN(256)))
		}
	}
	if k := n(); k >= 0 {
		v.Strs = make([]string, k)
		for i := range v.Strs {
			v.Strs[i] = drawString(rng)
		}
	}
	if rng.IntN(2) == 0 {
		x := rng.Int64()
		v.Ptr = &x
	}
	drawInner := func() inner {
		in := inner{A: int8(rng.IntN(256))}
		if rng.IntN(2) == 0 {
			s := drawString(rng)
			in.B = &s
		}
		if k := n(); k >= 0 {
			in.C = make([]inner2, k)
			for i := range in.C {
				in.C[i] = inner2{uint16(rng.Uint32()), uint16(rng.Uint32())}
			}
		}
		return in
	}
	v.In = drawInner()
	if k := n(); k >= 0 {
		v.M = make(map[string]int64, k)
		for range k {
			v.M[drawString(rng)] = rng.Int64()
		}
	}
	if k := n(); k >= 0 {
		v.MI = make(map[int32][]inner2, k)
		for range k {
			v.MI[rng.Int32()] = drawInner().C
		}
	}
	if rng.IntN(2) == 0 {
		in := drawInner()
		v.PtrS = &in
	}
	if k := n(); k >= 0 {
		v.Ins = make([]inner, k)
		for i := range v.Ins {
			v.Ins[i] = drawInner()
		}
	}
	if k := n(); k >= 0 {
		v.Empties = make([]empty, k*1000)
	}
	return v
}

// Every value Binary encodes decodes to itself, as JSON carries it (the
// fields JSON drops are dropped), nil and empty slices and nil pointers
// included, using every byte it wrote, after other bytes in the buffer.
func TestBinaryRoundTrip(t *testing.T) {
	c := For[every]()
	if _, ok := c.(Binary[every]); !ok {
		t.Fatalf("For[every] is %T, want Binary", c)
	}
	seeds := *binarySeeds
	if seeds == 0 {
		seeds = defaultBinarySeeds
	}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 102))
		v := drawEvery(rng)
		buf := c.Append([]byte("before"), v)
		got, n, err := c.Decode(buf[len("before"):])
		if err != nil || n != len(buf)-len("before") {
			t.Fatalf("seed %d: decode: %v, used %d of %d bytes", seed, err, n, len(buf)-len("before"))
		}
		if want := carried(v); !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d: decoded\n%+v\nwant\n%+v", seed, got, want)
		}
		// Every shorter prefix is an error, not a value.
		for cut := range n {
			if _, _, err := c.Decode(buf[len("before") : len("before")+cut]); err == nil {
				t.Fatalf("seed %d: %d of %d bytes decoded without an error", seed, cut, n)
			}
		}
	}
}

// Floats keep their bits: -0, infinities and NaN (which JSON cannot encode).
func TestBinaryFloats(t *testing.T) {
	type fs struct {
		A float64
		B float32
	}
	c := For[[]fs]()
	in := []fs{{math.Copysign(0, -1), float32(math.Inf(-1))}, {math.NaN(), float32(math.NaN())}, {math.Inf(1), math.SmallestNonzeroFloat32}}
	got, _, err := c.Decode(c.Append(nil, in))
	if err != nil {
		t.Fatal(err)
	}
	for i := range in {
		if math.Float64bits(got[i].A) != math.Float64bits(in[i].A) || math.Float32bits(got[i].B) != math.Float32bits(in[i].B) {
			t.Fatalf("element %d: %v, want %v", i, got[i], in[i])
		}
	}
}

// Maps keep what JSON cannot carry: NaN and infinities (JSON refused to
// encode them, and a job with such a value failed at its first checkpoint
// with channel state, or at a heap copy), float keys (JSON cannot encode
// them at all) and keys and values that are not UTF-8 (JSON changed them
// to U+FFFD, silently, and two keys became one). Found by an outside
// review, session 36.
func TestBinaryMapsKeepWhatJSONCannot(t *testing.T) {
	type rec struct {
		Avg    map[string]float64
		ByTemp map[float64]int64
		Names  map[string]string
		Nil    map[string]int
		Empty  map[string]int
		Sets   map[string]map[int64]struct{}
	}
	in := rec{
		Avg:    map[string]float64{"nan": math.NaN(), "inf": math.Inf(-1), "zero": math.Copysign(0, -1)},
		ByTemp: map[float64]int64{1.5: 1, -273.15: 2, 0: 3},
		Names:  map[string]string{"\xff": "\xfe\xfd", "\xfe": "ok"},
		Empty:  map[string]int{},
		Sets:   map[string]map[int64]struct{}{"a": {1: {}, 2: {}}, "b": nil},
	}
	c := For[rec]()
	if _, ok := c.(Binary[rec]); !ok {
		t.Fatalf("For[rec] is %T, want Binary", c)
	}
	buf := c.Append(nil, in)
	got, n, err := c.Decode(buf)
	if err != nil || n != len(buf) {
		t.Fatalf("decode: %v, used %d of %d bytes", err, n, len(buf))
	}
	if len(got.Avg) != 3 || !math.IsNaN(got.Avg["nan"]) || !math.IsInf(got.Avg["inf"], -1) || !math.Signbit(got.Avg["zero"]) {
		t.Errorf("floats: %v, want NaN, -Inf and -0", got.Avg)
	}
	if !reflect.DeepEqual(got.ByTemp, in.ByTemp) || !reflect.DeepEqual(got.Names, in.Names) || !reflect.DeepEqual(got.Sets, in.Sets) {
		t.Errorf("decoded %+v, want %+v", got, in)
	}
	if got.Nil != nil || got.Empty == nil || len(got.Empty) != 0 {
		t.Errorf("a nil map came back as %v, an empty one as %v", got.Nil, got.Empty)
	}
	for cut := range n {
		if _, _, err := c.Decode(buf[:cut]); err == nil {
			t.Fatalf("%d of %d bytes decoded without an error", cut, n)
		}
	}
	// A length beyond the bytes left allocates nothing: an error.
	if _, _, err := (Binary[map[string]int]{}).Decode([]byte{0, 0xff, 0xff, 0xff, 0xff, 0x0f, 1}); err == nil {
		t.Fatal("a map of 2^32 entries in one byte decoded")
	}
}

// What the JSON codec wrote (state and channel state of an earlier Weir)
// Binary reads as JSON does.
func TestBinaryReadsJSON(t *testing.T) {
	c := For[every]()
	for seed := range 200 {
		rng := rand.New(rand.NewPCG(uint64(seed), 1021))
		v := drawEvery(rng)
		v.S = strings.ToValidUTF8(v.S, "?") // JSON would change it
		old := JSON[every]{}.Append(nil, v)
		want, wn, werr := JSON[every]{}.Decode(old)
		got, n, err := c.Decode(old)
		if werr != nil || err != nil || n != wn || !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d: Binary read %+v (%d bytes, %v); JSON %+v (%d bytes, %v)", seed, got, n, err, want, wn, werr)
		}
	}
}

// Damaged input is an error, never a panic or a huge allocation.
func FuzzBinaryDecode(f *testing.F) {
	c := For[every]()
	rng := rand.New(rand.NewPCG(1, 2))
	for range 8 {
		f.Add(c.Append(nil, drawEvery(rng)))
	}
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, n, err := c.Decode(b)
		if err == nil && (n > len(b) || n < 1) {
			t.Fatalf("decoded %+v using %d of %d bytes", v, n, len(b))
		}
	})
}

// For gives Binary to types of numbers, strings, bools and the
// containers of them (maps too) and keeps JSON for the others; ForKey keeps JSON for every type without a codec of its own, so
// a key hashes as it did.
func TestForChoosesBinaryOnlyForValues(t *testing.T) {
	type withTime struct{ At time.Time }
	type withMap struct{ M map[string]int }
	type point struct{ X, Y int }
	for _, c := range []struct {
		got  any
		want string
	}{
		{For[point](), "Binary"},
		{For[[]point](), "Binary"},
		{For[[]string](), "Binary"},
		{For[string](), "stringCodec"},
		{For[int64](), "intCodec"},
		{For[withTime](), "JSON"},
		{For[withMap](), "Binary"},
		{For[any](), "JSON"},
		{ForKey[point](), "keyJSON"},
		{ForKey[[]string](), "keyJSON"},
		{ForKey[string](), "stringCodec"},
	} {
		if got := fmt.Sprintf("%T", c.got); !strings.HasPrefix(got, "codec."+c.want+"[") && got != "codec."+c.want {
			t.Errorf("%s, want codec.%s", got, c.want)
		}
	}
	k := point{3, 4}
	js, _ := json.Marshal(k)
	h := NewHasher(ForKey[point]())
	if h.Hash(k) != NewHasher(Codec[point](JSON[point]{})).Hash(k) {
		t.Fatal("a struct key hashes differently from its JSON encoding")
	}
	if !bytes.Contains(ForKey[point]().Append(nil, k), js) {
		t.Fatal("ForKey does not encode a struct key as JSON")
	}
}

// Binary named for a type whose JSON is not plain says so when first
// used, rather than overflowing the stack on a recursive type.
func TestBinaryRefusesWhatJSONMustEncode(t *testing.T) {
	type node struct{ Next *node }
	for name, use := range map[string]func(){
		"recursive": func() { Binary[node]{}.Append(nil, node{}) },
		"interface": func() { Binary[map[string]any]{}.Decode([]byte{0}) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "codec: Binary cannot encode") {
					t.Errorf("%s: recovered %v", name, r)
				}
			}()
			use()
		}()
	}
}

type q3Person struct {
	ID                int64
	Name, City, State string
}

// Binary is smaller and cheaper than JSON for a record like Nexmark's.
func BenchmarkBinaryAgainstJSON(b *testing.B) {
	p := q3Person{ID: 1234567, Name: "Walter Shultz", City: "Portland", State: "OR"}
	for _, c := range []Codec[q3Person]{Binary[q3Person]{}, JSON[q3Person]{}} {
		buf := c.Append(nil, p)
		b.Run(fmt.Sprintf("%T/append", c), func(b *testing.B) {
			b.ReportMetric(float64(len(buf)), "bytes/op")
			for b.Loop() {
				buf = c.Append(buf[:0], p)
			}
		})
		b.Run(fmt.Sprintf("%T/decode", c), func(b *testing.B) {
			for b.Loop() {
				if _, _, err := c.Decode(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Faithful refuses a map JSON cannot encode in a type that stays on JSON
// (time.Time in it has a Marshaler): before, such a job passed the check
// at start and failed at its first record encoded. The same map in a type
// Binary encodes is faithful. Found by an outside review, session 36.
func TestFaithfulRefusesMapKeysJSONCannotEncode(t *testing.T) {
	type onJSON struct {
		At time.Time
		M  map[float64]int64
	}
	type onBinary struct{ M map[float64]int64 }
	if err := Faithful[onJSON](); err == nil || !strings.Contains(err.Error(), "JSON cannot encode map map[float64]int64") {
		t.Errorf("Faithful of a JSON type with a float-keyed map: %v, want it refused", err)
	}
	if err := Faithful[onBinary](); err != nil {
		t.Errorf("Faithful of a Binary type with a float-keyed map: %v, want nil", err)
	}
}
