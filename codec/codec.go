// Package codec serialises records and state values.
//
// A Codec appends a value's encoding to a buffer and decodes one from the
// front of a buffer. For returns a fast built-in codec for basic types
// (strings, integers, floats, bools, byte slices), Binary for plain
// structs, slices and arrays (what JSON would carry, in binary), and JSON
// for any other type; ForKey, for keys, JSON for every type but the basic
// ones. Both serve exported fields of structs, and a user with other needs
// supplies a Codec of their own.
package codec

import (
	"bytes"
	"encoding"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"unsafe"

	"github.com/cespare/xxhash/v2"
)

// Codec encodes and decodes values of type T. Implementations must be safe
// for concurrent use and deterministic: equal values encode equally (keys
// are hashed from their encoding).
type Codec[T any] interface {
	// Append appends v's encoding to dst.
	Append(dst []byte, v T) []byte
	// Decode decodes a value from the front of src and says how many bytes
	// it used.
	Decode(src []byte) (v T, n int, err error)
}

// ErrShort means the input ended inside a value.
var ErrShort = errors.New("codec: input ends inside a value")

// For returns the codec Weir uses for records and state values of type T
// when the user gives none: a built-in one for basic types, Binary for a
// type whose JSON is plain (structs, slices, arrays and pointers of
// numbers, strings and bools), JSON for the rest.
func For[T any]() Codec[T] {
	c := ForKey[T]()
	if _, isJSON := c.(keyJSON[T]); isJSON {
		if binaryPlain(reflect.TypeFor[T](), map[reflect.Type]bool{}) {
			return Binary[T]{}
		}
		return JSON[T]{}
	}
	if _, isKey := any(c).(float64KeyCodec); isKey {
		return any(float64Codec{}).(Codec[T])
	}
	return c
}

// ForKey returns the codec Weir uses for keys of type T (a KeyBy's, a map
// state's user keys) when the user gives none: as For, but JSON for every
// struct, as before Binary, because a key's encoding decides its key group
// and is the Pebble backend's key. Keys equal under == encode alike (float
// 0 and -0 as 0, in a struct too); a struct or array key holding a string
// that is not UTF-8, which JSON would write as another string, panics with
// a *KeyError.
func ForKey[T any]() Codec[T] {
	var zero T
	var c any
	switch any(zero).(type) {
	case string:
		c = stringCodec{}
	case []byte:
		c = bytesCodec{}
	case int:
		c = intCodec[int]{}
	case int64:
		c = intCodec[int64]{}
	case int32:
		c = intCodec[int32]{}
	case uint64:
		c = uintCodec[uint64]{}
	case uint32:
		c = uintCodec[uint32]{}
	case float64:
		c = float64KeyCodec{}
	case bool:
		c = boolCodec{}
	default:
		return keyJSON[T]{}
	}
	return c.(Codec[T])
}

// KeyCheck returns a check that a key of type T can be encoded, apart from
// every other key, by ForKey's codec (else a *KeyError), or nil if every
// key can. A backend may encode keys late (the heap's, only for a
// snapshot, on a goroutine of its own): a key that cannot be encoded must
// fail where it is made.
func KeyCheck[T any]() func(T) error {
	if _, isJSON := ForKey[T]().(keyJSON[T]); !isJSON || !mayChange(reflect.TypeFor[T](), map[reflect.Type]bool{}) {
		return nil
	}
	var buf []byte
	return func(v T) (err error) {
		defer func() {
			if r := recover(); r != nil {
				ke, is := r.(*KeyError)
				if !is {
					panic(r)
				}
				err = ke
			}
		}()
		buf = keyJSON[T]{}.Append(buf[:0], v)
		return nil
	}
}

// AppendLen appends n as a uvarint.
func AppendLen(dst []byte, n int) []byte { return binary.AppendUvarint(dst, uint64(n)) }

// ReadLen reads a uvarint length from src, bounded by what src holds.
func ReadLen(src []byte) (n, used int, err error) {
	v, k := binary.Uvarint(src)
	if k <= 0 {
		return 0, 0, ErrShort
	}
	if v > uint64(len(src)-k) {
		return 0, 0, fmt.Errorf("codec: length %d exceeds the %d bytes left", v, len(src)-k)
	}
	return int(v), k, nil
}

// AppendBytes appends b with a length prefix; ReadBytes reads it back.
func AppendBytes(dst, b []byte) []byte { return append(AppendLen(dst, len(b)), b...) }

// ReadBytes reads a length-prefixed byte string; the result aliases src.
func ReadBytes(src []byte) ([]byte, int, error) {
	n, k, err := ReadLen(src)
	if err != nil {
		return nil, 0, err
	}
	return src[k : k+n], k + n, nil
}

type stringCodec struct{}

func (stringCodec) Append(dst []byte, v string) []byte {
	return append(AppendLen(dst, len(v)), v...)
}
func (stringCodec) Decode(src []byte) (string, int, error) {
	b, n, err := ReadBytes(src)
	return string(b), n, err
}

type bytesCodec struct{}

func (bytesCodec) Append(dst []byte, v []byte) []byte { return AppendBytes(dst, v) }
func (bytesCodec) Decode(src []byte) ([]byte, int, error) {
	b, n, err := ReadBytes(src)
	return append([]byte{}, b...), n, err
}

type intCodec[T int | int64 | int32] struct{}

func (intCodec[T]) Append(dst []byte, v T) []byte { return binary.AppendVarint(dst, int64(v)) }
func (intCodec[T]) Decode(src []byte) (T, int, error) {
	v, n := binary.Varint(src)
	if n <= 0 {
		return 0, 0, ErrShort
	}
	return T(v), n, nil
}

type uintCodec[T uint64 | uint32] struct{}

func (uintCodec[T]) Append(dst []byte, v T) []byte { return binary.AppendUvarint(dst, uint64(v)) }
func (uintCodec[T]) Decode(src []byte) (T, int, error) {
	v, n := binary.Uvarint(src)
	if n <= 0 {
		return 0, 0, ErrShort
	}
	return T(v), n, nil
}

type float64Codec struct{}

func (float64Codec) Append(dst []byte, v float64) []byte {
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(v))
}
func (float64Codec) Decode(src []byte) (float64, int, error) {
	if len(src) < 8 {
		return 0, 0, ErrShort
	}
	return math.Float64frombits(binary.BigEndian.Uint64(src)), 8, nil
}

// float64KeyCodec encodes a float64 key: as float64Codec, but 0 and -0,
// one key under Go's ==, encode alike (as 0), so that they are one key in
// the state and its key group too.
type float64KeyCodec struct{ float64Codec }

func (float64KeyCodec) Append(dst []byte, v float64) []byte {
	if v == 0 {
		v = 0 // not -0
	}
	return float64Codec{}.Append(dst, v)
}

type boolCodec struct{}

func (boolCodec) Append(dst []byte, v bool) []byte {
	if v {
		return append(dst, 1)
	}
	return append(dst, 0)
}
func (boolCodec) Decode(src []byte) (bool, int, error) {
	if len(src) < 1 {
		return false, 0, ErrShort
	}
	if src[0] > 1 {
		return false, 0, fmt.Errorf("codec: bool byte %d", src[0])
	}
	return src[0] == 1, 1, nil
}

// JSON is the default codec for types without a built-in one: a
// length-prefixed JSON document. It serves exported struct fields.
type JSON[T any] struct{}

func (JSON[T]) Append(dst []byte, v T) []byte { return appendJSON(dst, v, false) }

// keyJSON is the default codec of keys whose type has no built-in codec:
// JSON, written by the encoder of keys (compiler.key) where the type's
// encoding is compiled.
type keyJSON[T any] struct{ JSON[T] }

func (keyJSON[T]) Append(dst []byte, v T) []byte { return appendJSON(dst, v, true) }

// appendJSON is JSON's Append; with key, by the encoder of keys.
func appendJSON[T any](dst []byte, v T, key bool) []byte {
	c := JSON[T]{}
	e := encoderOf(reflect.TypeFor[T](), key)
	if e == nil {
		if key {
			b, err := json.Marshal(canonicalKey(v))
			if err != nil {
				panic(&KeyError{err: err})
			}
			return AppendBytes(dst, b)
		}
		return c.marshal(dst, v)
	}
	// The encoder writes after dst; the length goes before it.
	spare := e.spares.Get().(unsafe.Pointer)
	*(*T)(spare) = v
	start := len(dst)
	dst, ok := encode(e.enc, dst, spare)
	var zero T
	*(*T)(spare) = zero // keep nothing of v alive
	e.spares.Put(spare)
	if !ok { // NaN or an infinity
		if key {
			_, err := json.Marshal(v)
			panic(&KeyError{err: err})
		}
		return c.marshal(dst[:start], v) // panics with json.Marshal's reason
	}
	n := len(dst) - start
	var l [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(l[:], uint64(n))
	dst = append(dst, l[:k]...)
	copy(dst[start+k:], dst[start:start+n])
	copy(dst[start:], l[:k])
	return dst
}

// marshal is Append by json.Marshal.
func (JSON[T]) marshal(dst []byte, v T) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// A value that cannot be encoded is a programming error in the
		// job (a channel or func field): say which type.
		panic(fmt.Sprintf("codec: JSON cannot encode %s: %v; give the stream or state a codec of its own", reflect.TypeFor[T](), err))
	}
	return AppendBytes(dst, b)
}

func (JSON[T]) Decode(src []byte) (T, int, error) {
	var v T
	b, n, err := ReadBytes(src)
	if err != nil {
		return v, 0, err
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, 0, fmt.Errorf("codec: decode %s: %w", reflect.TypeFor[T](), err)
	}
	return v, n, nil
}

// Hasher hashes keys deterministically: the same key hashes the same in every
// process and every run, which key groups rely on.
type Hasher[K any] struct {
	codec Codec[K]
	buf   []byte
}

// NewHasher hashes K's with c's encoding (strings and integers directly).
// A Hasher is not safe for concurrent use; each task has its own.
func NewHasher[K any](c Codec[K]) *Hasher[K] { return &Hasher[K]{codec: c} }

// Hash returns k's 64-bit hash.
func (h *Hasher[K]) Hash(k K) uint64 {
	switch v := any(k).(type) {
	case string:
		return xxhash.Sum64String(v)
	case int:
		return uint64(v)
	case int64:
		return uint64(v)
	case uint64:
		return v
	}
	h.buf = h.codec.Append(h.buf[:0], k)
	return xxhash.Sum64(h.buf)
}

// Faithful reports why the codec For returns for T cannot carry every
// value of T unchanged, or nil if it can: JSON drops unexported struct
// fields and fields tagged json:"-", cannot encode funcs, channels or
// complex numbers, and decodes an interface into maps and float64s, not
// the value that was encoded. A type that implements json.Marshaler and
// json.Unmarshaler, or encoding.TextMarshaler and TextUnmarshaler (on its
// pointer), decides for itself. Binary, which For gives most types, drops
// the same fields; a type on JSON (one with an interface or a Marshaler in
// it) cannot have maps keyed by anything but strings, integers and
// TextMarshalers either. Weir asks before records cross a process (a
// cluster's channels) or are stored (unaligned checkpoints' channel
// state), and of keys.
func Faithful[T any]() error {
	t := reflect.TypeFor[T]()
	return faithful(t, !binaryPlain(t, map[reflect.Type]bool{}), map[reflect.Type]bool{})
}

// droppedByJSON names a field of struct type t whose value json.Marshal
// never writes because another field has its name (encoding/json writes
// the shallowest of the fields of a name, and none of two at one depth),
// or is "". It asks json.Marshal: a zero value, and the value with each
// field it can reach made non-zero in turn, must encode apart. Fields of
// types that encode themselves, behind pointers, in interfaces or in
// arrays are not asked.
func droppedByJSON(t reflect.Type) string {
	if custom(t) {
		return "" // its Marshaler decides
	}
	root := reflect.New(t).Elem()
	zero, err := json.Marshal(root.Interface())
	if err != nil {
		return "" // faithful's other checks say why
	}
	var dropped string
	var walk func(sv reflect.Value, path string) bool
	walk = func(sv reflect.Value, path string) bool {
		for i := range sv.NumField() {
			sf := sv.Type().Field(i)
			if !sf.IsExported() && !sf.Anonymous || sf.Tag.Get("json") == "-" {
				continue // faithful says so
			}
			f := sv.Field(i)
			if !f.CanSet() { // in an unexported embedded struct
				f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
			}
			name := path + sf.Name
			if custom(f.Type()) {
				continue
			}
			if f.Kind() == reflect.Struct {
				if !walk(f, name+".") {
					return false
				}
				continue
			}
			if !setNonZero(f) {
				continue
			}
			out, err := json.Marshal(root.Interface())
			f.SetZero()
			if err == nil && bytes.Equal(out, zero) {
				dropped = name
				return false
			}
		}
		return true
	}
	walk(root, "")
	return dropped
}

// setNonZero makes v, a zero value, non-zero, and says whether it could.
func setNonZero(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
	default:
		return false
	}
	return true
}

// jsonKey says whether JSON encodes map keys of type t.
func jsonKey(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.String, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return true
	}
	return t.Implements(textMarshaler) || reflect.PointerTo(t).Implements(textMarshaler)
}

var (
	marshaler       = reflect.TypeFor[json.Marshaler]()
	unmarshaler     = reflect.TypeFor[json.Unmarshaler]()
	textMarshaler   = reflect.TypeFor[encoding.TextMarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// faithful is Faithful for t, which json says JSON encodes.
func faithful(t reflect.Type, json bool, seen map[reflect.Type]bool) error {
	if seen[t] {
		return nil
	}
	seen[t] = true
	if t.Implements(marshaler) && reflect.PointerTo(t).Implements(unmarshaler) ||
		t.Implements(textMarshaler) && reflect.PointerTo(t).Implements(textUnmarshaler) {
		return nil
	}
	switch t.Kind() {
	case reflect.Func, reflect.Chan, reflect.UnsafePointer, reflect.Complex64, reflect.Complex128:
		return fmt.Errorf("JSON cannot encode a %s", t.Kind())
	case reflect.Interface:
		return fmt.Errorf("JSON decodes interface %s into maps and float64s, not the value encoded", t)
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return faithful(t.Elem(), json, seen)
	case reflect.Map:
		if json && !jsonKey(t.Key()) {
			return fmt.Errorf("JSON cannot encode map %s: its keys are not strings, integers or TextMarshalers", t)
		}
		if err := faithful(t.Key(), json, seen); err != nil {
			return err
		}
		return faithful(t.Elem(), json, seen)
	case reflect.Struct:
		if name := droppedByJSON(t); name != "" {
			return fmt.Errorf("JSON drops field %s of %s: another field of its name (promoted from an embedded struct, or tagged so) is written instead, or neither; rename one, or give %s MarshalJSON and UnmarshalJSON", name, t, t)
		}
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() && !(f.Anonymous && f.Type.Kind() == reflect.Struct) {
				return fmt.Errorf("JSON drops unexported field %s of %s: export it, or give %s MarshalJSON and UnmarshalJSON", f.Name, t, t)
			}
			if f.Tag.Get("json") == "-" {
				return fmt.Errorf("JSON drops field %s of %s, tagged json:\"-\": drop the tag, or give %s MarshalJSON and UnmarshalJSON", f.Name, t, t)
			}
			if err := faithful(f.Type, json, seen); err != nil {
				return fmt.Errorf("field %s of %s: %w", f.Name, t, err)
			}
		}
	}
	return nil
}
