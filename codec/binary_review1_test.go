package codec

import (
	"encoding/json"
	"math"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"time"
)

// review1Hidden has no field JSON carries: Binary encodes it to no bytes.
// The first version let a slice of it claim up to 1<<20 elements from a
// handful of bytes, whatever the element's size in memory.
type review1Hidden struct {
	pad [1 << 29]byte
}

// A four-byte input claims 1<<20 elements of a 512 MiB type: Decode
// panics (makeslice: len out of range) instead of returning an error.
// JSON would need at least 3 bytes ("{},") per element.
func TestReview1DecodeHugeSliceOfFieldlessStructsPanics(t *testing.T) {
	c := For[[]review1Hidden]()
	if _, ok := c.(Binary[[]review1Hidden]); !ok {
		t.Skipf("For gives %T", c)
	}
	src := append([]byte{binaryMarker}, appendUvarintR1(nil, 1<<20+1)...)
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("Decode of %d bytes %x panicked: %v", len(src), src, r)
			}
		}()
		_, _, err = c.Decode(src)
	}()
	if err == nil {
		t.Fatalf("Decode of %d bytes %x succeeded", len(src), src)
	}
}

type review1Pad struct {
	pad [256]byte
}

// Four bytes of input make Decode allocate 1<<20 elements of 256 bytes
// (256 MiB): an allocation bounded by the type, not by the input.
func TestReview1DecodeAllocatesWithoutBound(t *testing.T) {
	c := For[[]review1Pad]()
	src := append([]byte{binaryMarker}, appendUvarintR1(nil, 1<<20+1)...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v, _, err := c.Decode(src)
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	if alloc > 16<<20 {
		t.Fatalf("Decode of %d bytes (%x) allocated %d MiB (%d elements, err %v); JSON needs >= 3 bytes an element", len(src), src, alloc>>20, len(v), err)
	}
}

type review1Wide struct {
	X [1 << 12]struct{}
}

// Four bytes claim 1<<20 elements of a type of 4096 empty structs: Decode
// runs 4e9 element decoders (zero-size memory, so no allocation bounds it).
func TestReview1DecodeCPUWithoutBound(t *testing.T) {
	c := For[[]review1Wide]()
	src := append([]byte{binaryMarker}, appendUvarintR1(nil, 1<<20+1)...)
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, _, err := c.Decode(src)
		done <- err
	}()
	select {
	case err := <-done:
		if d := time.Since(start); d > time.Second {
			t.Fatalf("Decode of %d bytes took %v (err %v)", len(src), d, err)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("Decode of %d bytes (%x) still running after 3s", len(src), src)
	}
}

func appendUvarintR1(dst []byte, v uint64) []byte {
	for v >= 0x80 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}

type review1Small struct {
	A int8
	U uint8
	B bool
	P *int
}

// Bytes JSON would refuse (a number out of an int8's range, a bool byte
// other than 0/1, as the bool codec refuses) decode silently into garbage.
func TestReview1DecodeAcceptsOutOfRangeGarbage(t *testing.T) {
	c := For[review1Small]()
	cases := map[string][]byte{
		"int8 300":  {0, 0xd8, 0x04, 0, 0, 0}, // varint 300
		"uint8 256": {0, 0, 0x80, 0x02, 0, 0}, // uvarint 256
		"bool 7":    {0, 0, 0, 7, 0},
		"ptr 9":     {0, 0, 0, 0, 9, 2},
	}
	for name, src := range cases {
		v, n, err := c.Decode(src)
		if err == nil {
			t.Errorf("%s: %x decoded to %+v (%d bytes) without error", name, src, v, n)
		}
	}
	// JSON refuses the same values.
	var s review1Small
	if err := json.Unmarshal([]byte(`{"A":300}`), &s); err == nil {
		t.Fatal("json accepted 300 for int8")
	}
}

type review1Omit struct {
	S  []int   `json:",omitempty"`
	F  float64 `json:",omitempty"`
	PP **int
	St string
}

// Binary carries values more exactly than JSON, as one process (which
// never encodes a record) does: an empty non-nil slice under omitempty
// (JSON: nil), -0 under omitempty (JSON: +0), a non-nil pointer to a nil
// pointer (JSON: nil), invalid UTF-8 (JSON: U+FFFD). The review found the
// differences; they are the codec's contract (its doc says so).
func TestReview1BinaryCarriesWhatJSONDoesNot(t *testing.T) {
	var nilp *int
	in := review1Omit{S: []int{}, F: math.Copysign(0, -1), PP: &nilp, St: "a\xffb"}
	bin, _, err := For[review1Omit]().Decode(For[review1Omit]().Append(nil, in))
	if err != nil {
		t.Fatal(err)
	}
	if bin.S == nil || !math.Signbit(bin.F) || bin.PP == nil || *bin.PP != nil || bin.St != in.St {
		t.Fatalf("Binary gave %+v for %+v", bin, in)
	}
	js, _, err := JSON[review1Omit]{}.Decode(JSON[review1Omit]{}.Append(nil, in))
	if err != nil {
		t.Fatal(err)
	}
	if js.S != nil || math.Signbit(js.F) || js.PP != nil || js.St == in.St {
		t.Fatalf("JSON now carries %+v exactly (%+v): the test's premise changed", in, js)
	}
}

type Celsius float64

type review1Nest struct {
	T     Celsius
	Ts    []Celsius
	Arr   [2][]byte
	PS    *review1Nest2
	E     struct{}
	Named review1Bytes
	R     int `json:"renamed"`
	Z     [0]int
}
type review1Nest2 struct {
	B []byte
	M [][]string
}
type review1Bytes []uint8

// Values of the brief's list round-trip as JSON carries them.
func TestReview1RoundTripsAsJSON(t *testing.T) {
	vals := []review1Nest{
		{},
		{T: -3.5, Ts: []Celsius{1, 2}, Arr: [2][]byte{nil, {}}, PS: &review1Nest2{B: []byte{0, 1}, M: [][]string{nil, {}, {"x"}}}, Named: review1Bytes("hi"), R: 9},
		{Ts: []Celsius{}, Arr: [2][]byte{{1}, nil}, PS: &review1Nest2{}, Named: review1Bytes{}},
	}
	for i, v := range vals {
		bin, n, err := For[review1Nest]().Decode(For[review1Nest]().Append(nil, v))
		if err != nil || n == 0 {
			t.Fatal(err)
		}
		js, _, err := JSON[review1Nest]{}.Decode(JSON[review1Nest]{}.Append(nil, v))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(bin, js) {
			t.Errorf("%d: Binary %+v, JSON %+v", i, bin, js)
		}
	}
	c := For[Celsius]()
	if _, ok := c.(Binary[Celsius]); !ok {
		t.Fatalf("For[Celsius] is %T", c)
	}
	old := JSON[Celsius]{}.Append(nil, 21.5)
	if v, _, err := c.Decode(old); err != nil || v != 21.5 {
		t.Fatalf("old JSON Celsius: %v %v", v, err)
	}
	// A very large slice.
	big := make([]int64, 1<<20)
	for i := range big {
		big[i] = int64(i) * -7
	}
	got, _, err := For[[]int64]().Decode(For[[]int64]().Append(nil, big))
	if err != nil || !reflect.DeepEqual(got, big) {
		t.Fatalf("big slice: %v", err)
	}
}

// Append and Decode from many goroutines (run with -race).
func TestReview1Concurrent(t *testing.T) {
	c := For[review1Nest]()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				v := review1Nest{T: Celsius(g*10000 + i), PS: &review1Nest2{B: []byte{byte(g), byte(i)}}}
				got, _, err := c.Decode(c.Append(nil, v))
				if err != nil || got.T != v.T || got.PS.B[0] != byte(g) || got.PS.B[1] != byte(i) {
					t.Errorf("goroutine %d #%d: %+v %v", g, i, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
