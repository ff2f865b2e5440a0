package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestKeyEncoderWritesEqualKeysAlike: the default codec of keys of a type
// on JSON (a struct, an array, a float32) must encode two keys alike
// exactly when they are equal under ==, the job's test of one key. JSON
// alone wrote a float field 0 and -0 apart (two keys, in two key groups,
// of one key to the job), and wrote the bad bytes of a string that is not
// UTF-8 as U+FFFD (two keys, one state). Over the random types and values
// of TestJSONEncoderMatchesEncodingJSON, the encoder of keys refuses a
// value holding a string that is not UTF-8 (a *KeyError), and otherwise
// writes what json.Marshal writes of the value with every -0 made 0: so a
// key that holds neither keeps the encoding, and the key group, it had
// before. Found by a review of design note 131's leftovers, session 37.
func TestKeyEncoderWritesEqualKeysAlike(t *testing.T) {
	refused, normalised := 0, 0
	for seed := range *jsonSeeds {
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		typ := randomType(r, 0)
		e := encoderOf(typ, true)
		if e == nil {
			continue
		}
		for range 5 {
			v := reflect.New(typ)
			fill(r, v.Elem(), 0)
			got, ok, keyErr := encodeKey(e, v)
			if bad := notUTF8In(v.Elem()); bad || keyErr != nil {
				if !bad || keyErr == nil {
					t.Fatalf("seed %d: %v: a string that is not UTF-8: %v; the encoder of keys refused it: %v", seed, typ, bad, keyErr)
				}
				refused++
				continue
			}
			if makePositive(v.Elem()) {
				normalised++
			}
			want, err := json.Marshal(v.Elem().Interface())
			if err != nil {
				if ok {
					t.Fatalf("seed %d: %v: json.Marshal fails (%v), the encoder of keys wrote %s", seed, typ, err, got)
				}
				continue
			}
			if !ok || !bytes.Equal(got, want) {
				t.Fatalf("seed %d: %v:\n got %s (ok %v)\nwant %s (the value, -0 made 0)", seed, typ, got, ok, want)
			}
		}
	}
	if refused == 0 || normalised == 0 {
		t.Fatalf("%d values refused, %d with -0: the generator missed a case", refused, normalised)
	}
}

// encodeKey runs e on the value v points at: what it wrote and whether it
// could (not: NaN, ±Inf), or the *KeyError it panicked with.
func encodeKey(e *compiled, v reflect.Value) (b []byte, ok bool, keyErr *KeyError) {
	defer func() {
		if r := recover(); r != nil {
			err, is := r.(error)
			if !is || !errors.As(err, &keyErr) {
				panic(r)
			}
		}
	}()
	b, ok = encode(e.enc, nil, v.UnsafePointer())
	return b, ok, nil
}

// notUTF8In says whether v holds a string that is not UTF-8 where the
// compiled encoders write strings (not in []byte, which is base64, nor in
// fields JSON leaves out).
func notUTF8In(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String:
		return !utf8.ValidString(v.String())
	case reflect.Pointer:
		return !v.IsNil() && notUTF8In(v.Elem())
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return false
		}
		fallthrough
	case reflect.Array:
		for i := range v.Len() {
			if notUTF8In(v.Index(i)) {
				return true
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() && f.Tag.Get("json") != "-" && notUTF8In(v.Field(i)) {
				return true
			}
		}
	}
	return false
}

// makePositive makes every -0 float in v 0, and says whether there was one.
func makePositive(v reflect.Value) bool {
	found := false
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		if f := v.Float(); f == 0 && math.Signbit(f) {
			v.SetFloat(0)
			found = true
		}
	case reflect.Pointer:
		if !v.IsNil() {
			found = makePositive(v.Elem())
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			found = makePositive(v.Index(i)) || found
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Field(i).CanSet() {
				found = makePositive(v.Field(i)) || found
			}
		}
	}
	return found
}

// TestKeyCodecOfCompositeKeys: through ForKey, keys equal under == hash
// alike (so they are in one key group), a key that is not UTF-8 is refused
// with an error that names it, says why and is permanent, and values (For)
// keep -0 and such strings as they are.
func TestKeyCodecOfCompositeKeys(t *testing.T) {
	type spot struct{ Lat, Lon float64 }
	type reading struct {
		Sensor string
		At     [2]float32
	}
	neg := math.Copysign(0, -1)
	checkAlike(t, spot{neg, 1}, spot{0, 1})
	checkAlike(t, reading{"a", [2]float32{float32(neg), 2}}, reading{"a", [2]float32{0, 2}})
	checkAlike(t, float32(neg), float32(0))

	kc := ForKey[reading]()
	func() {
		defer func() {
			err, _ := recover().(error)
			var ke *KeyError
			if !errors.As(err, &ke) || !ke.Permanent() || !strings.Contains(err.Error(), `"\xff"`) || !strings.Contains(err.Error(), "not UTF-8") {
				t.Errorf("a key holding a string that is not UTF-8: panicked with %v, want a permanent *KeyError naming the string", err)
			}
		}()
		kc.Append(nil, reading{Sensor: "\xff"})
	}()
	// Why: JSON writes two such keys alike.
	a, b := reading{Sensor: "\xffa"}, reading{Sensor: "\xfea"}
	if !bytes.Equal(JSON[reading]{}.Append(nil, a), JSON[reading]{}.Append(nil, b)) {
		t.Errorf("JSON now writes %q and %q apart: the encoder of keys need not refuse them", a.Sensor, b.Sensor)
	}

	vc := For[reading]()
	v := reading{"\xff", [2]float32{float32(neg), 1}}
	got, _, err := vc.Decode(vc.Append(nil, v))
	if err != nil || got != v || !math.Signbit(float64(got.At[0])) {
		t.Errorf("the value %+v came back as %+v (%v): values keep their sign and bytes", v, got, err)
	}
}

// checkAlike requires keys a and b (equal under ==) to encode alike.
func checkAlike[K comparable](t *testing.T, a, b K) {
	t.Helper()
	if a != b {
		t.Fatalf("%v and %v are not one key", a, b)
	}
	kc := ForKey[K]()
	if ea, eb := kc.Append(nil, a), kc.Append(nil, b); !bytes.Equal(ea, eb) {
		t.Errorf("%T keys %v and %v, one key under ==, encode apart: %q, %q", a, a, b, ea, eb)
	}
	if NewHasher(kc).Hash(a) != NewHasher(kc).Hash(b) {
		t.Errorf("%T keys %v and %v hash apart", a, a, b)
	}
}
