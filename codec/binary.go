package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync"
	"unsafe"
)

// Binary is the codec For gives a type that has no codec of its own and
// is plain (binaryPlain: structs of named fields, numbers, strings, bools,
// pointers, slices, arrays and maps of them, without a Marshaler
// anywhere): what JSON would carry (a struct's fields in their order), in
// binary — varints, a float's bits, lengths before strings, slices and
// maps — behind a zero byte. (Maps were JSON's until session 36: JSON
// cannot encode NaN or float keys, and changes strings that are not
// UTF-8.) It carries the same fields as JSON (so
// Faithful's answer holds for it), and their values more exactly, as a
// record that stays in one process (never encoded) keeps them: an empty
// slice stays empty where omitempty made JSON's nil, as do -0 and a
// pointer to a nil pointer, and a string's bytes stay as they are where
// JSON replaces invalid UTF-8. It is under half of JSON's size for
// Nexmark's records and several times cheaper to encode and decode, which
// is what heap snapshots and a cluster's channels spend most of their time
// on (design note 102). Decode also reads the JSON codec's encoding (a
// length, never 0, then the JSON), whose first byte is never zero: state
// and channel state written by an earlier Weir restore.
//
// NB: keys keep the JSON codec (ForKey): a key's encoding is hashed to
// its key group and is the Pebble backend's key, both of which a restore
// of an earlier checkpoint needs unchanged.
type Binary[T any] struct{}

// binaryMarker begins every value Binary encodes.
const binaryMarker = 0

func (Binary[T]) Append(dst []byte, v T) []byte {
	c := binaryOf(reflect.TypeFor[T]())
	spare := c.spares.Get().(unsafe.Pointer)
	*(*T)(spare) = v
	dst = c.enc(append(dst, binaryMarker), spare)
	var zero T
	*(*T)(spare) = zero // keep nothing of v alive
	c.spares.Put(spare)
	return dst
}

func (Binary[T]) Decode(src []byte) (T, int, error) {
	var v T
	if len(src) == 0 {
		return v, 0, ErrShort
	}
	if src[0] != binaryMarker {
		return JSON[T]{}.Decode(src)
	}
	// Into a spare value, as Append: a pointer to v would make it escape.
	// Decoders expect a zero value (they leave what T does not carry).
	c := binaryOf(reflect.TypeFor[T]())
	spare := c.spares.Get().(unsafe.Pointer)
	n, err := c.dec(src[1:], spare)
	v, *(*T)(spare) = *(*T)(spare), v
	c.spares.Put(spare)
	if err != nil {
		var zero T
		return zero, 0, fmt.Errorf("codec: decode %s: %w", reflect.TypeFor[T](), err)
	}
	return v, 1 + n, nil
}

// binaryEncoder appends the value at p; binaryDecoder reads one into p
// from src and says how many bytes it used.
type (
	binaryEncoder func(dst []byte, p unsafe.Pointer) []byte
	binaryDecoder func(src []byte, p unsafe.Pointer) (int, error)
)

type binaryCompiled struct {
	enc    binaryEncoder
	dec    binaryDecoder
	spares sync.Pool
}

var binaries sync.Map // reflect.Type → *binaryCompiled

// binaryOf is t's compiled codec. A type whose JSON is not plain is a
// programming error in the job that named Binary for it (For never does).
func binaryOf(t reflect.Type) *binaryCompiled {
	if c, ok := binaries.Load(t); ok {
		return c.(*binaryCompiled)
	}
	if !binaryPlain(t, map[reflect.Type]bool{}) {
		panic(fmt.Sprintf("codec: Binary cannot encode %s (an interface, a Marshaler, an embedded field or a recursive type in it): use codec.For, which gives it JSON, or a codec of its own", t))
	}
	enc, dec := compileBinary(t)
	c := &binaryCompiled{enc: enc, dec: dec}
	c.spares.New = func() any { return reflect.New(t).UnsafePointer() }
	c2, _ := binaries.LoadOrStore(t, c)
	return c2.(*binaryCompiled)
}

var errLength = errors.New("a length exceeds the bytes left")

func readUvarint(src []byte) (uint64, int, error) {
	v, n := binary.Uvarint(src)
	if n <= 0 {
		return 0, 0, ErrShort
	}
	return v, n, nil
}

// readCount reads the length plus one of a slice or map of type t at p:
// its count of elements, bounded by the bytes left, as every element
// takes one at least; or -1 for nil, which it stores at p.
func readCount(src []byte, t reflect.Type, p unsafe.Pointer) (n, used int, err error) {
	l, used, err := readUvarint(src)
	switch {
	case err != nil:
		return 0, 0, err
	case l == 0:
		reflect.NewAt(t, p).Elem().SetZero()
		return -1, used, nil
	case l-1 > uint64(len(src)-used):
		return 0, 0, errLength
	}
	return int(l - 1), used, nil
}

func readVarint(src []byte) (int64, int, error) {
	v, n := binary.Varint(src)
	if n <= 0 {
		return 0, 0, ErrShort
	}
	return v, n, nil
}

var errRange = errors.New("a number out of its type's range")

func signed[I int | int8 | int16 | int32 | int64]() (binaryEncoder, binaryDecoder) {
	return func(dst []byte, p unsafe.Pointer) []byte { return binary.AppendVarint(dst, int64(*(*I)(p))) },
		func(src []byte, p unsafe.Pointer) (int, error) {
			v, n, err := readVarint(src)
			if err == nil && int64(I(v)) != v {
				err = errRange
			}
			*(*I)(p) = I(v)
			return n, err
		}
}

func unsigned[U uint | uint8 | uint16 | uint32 | uint64 | uintptr]() (binaryEncoder, binaryDecoder) {
	return func(dst []byte, p unsafe.Pointer) []byte { return binary.AppendUvarint(dst, uint64(*(*U)(p))) },
		func(src []byte, p unsafe.Pointer) (int, error) {
			v, n, err := readUvarint(src)
			if err == nil && uint64(U(v)) != v {
				err = errRange
			}
			*(*U)(p) = U(v)
			return n, err
		}
}

// readFlag reads a byte that must be 0 or 1 (a bool, a pointer's nil).
func readFlag(src []byte) (bool, error) {
	switch {
	case len(src) == 0:
		return false, ErrShort
	case src[0] > 1:
		return false, fmt.Errorf("a flag byte of %d, not 0 or 1", src[0])
	}
	return src[0] == 1, nil
}

// binaryPlain says whether Binary encodes t: numbers, strings, bools, and
// pointers, slices, arrays, maps and structs (of named fields) of them,
// with no Marshaler anywhere (custom: the type decides its encoding, in
// JSON) and not recursive; open holds the types being looked at. Every
// type whose JSON encoder compiles (encoderOf) is one, and maps too.
func binaryPlain(t reflect.Type, open map[reflect.Type]bool) bool {
	if open[t] || custom(t) {
		return false
	}
	open[t] = true
	defer delete(open, t)
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.String:
		return true
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return binaryPlain(t.Elem(), open)
	case reflect.Map:
		return binaryPlain(t.Key(), open) && binaryPlain(t.Elem(), open)
	case reflect.Struct:
		for i := range t.NumField() {
			sf := t.Field(i)
			if sf.Anonymous {
				return false // promoted fields: encoding/json's rules of depth and dominance
			}
			if sf.IsExported() && sf.Tag.Get("json") != "-" && !binaryPlain(sf.Type, open) {
				return false
			}
		}
		return true
	}
	return false // interfaces, complex numbers, channels, funcs
}

// compileBinary returns the encoder and decoder of t, a type binaryPlain
// takes.
func compileBinary(t reflect.Type) (binaryEncoder, binaryDecoder) {
	if carriesNothing(t) { // nothing to carry: the value stays zero
		return func(dst []byte, _ unsafe.Pointer) []byte { return dst },
			func([]byte, unsafe.Pointer) (int, error) { return 0, nil }
	}
	switch t.Kind() {
	case reflect.Bool:
		return func(dst []byte, p unsafe.Pointer) []byte {
				if *(*bool)(p) {
					return append(dst, 1)
				}
				return append(dst, 0)
			}, func(src []byte, p unsafe.Pointer) (int, error) {
				b, err := readFlag(src)
				*(*bool)(p) = b
				return 1, err
			}
	case reflect.Int:
		return signed[int]()
	case reflect.Int8:
		return signed[int8]()
	case reflect.Int16:
		return signed[int16]()
	case reflect.Int32:
		return signed[int32]()
	case reflect.Int64:
		return signed[int64]()
	case reflect.Uint:
		return unsigned[uint]()
	case reflect.Uint8:
		return unsigned[uint8]()
	case reflect.Uint16:
		return unsigned[uint16]()
	case reflect.Uint32:
		return unsigned[uint32]()
	case reflect.Uint64:
		return unsigned[uint64]()
	case reflect.Uintptr:
		return unsigned[uintptr]()
	case reflect.Float32:
		return func(dst []byte, p unsafe.Pointer) []byte {
				return binary.LittleEndian.AppendUint32(dst, math.Float32bits(*(*float32)(p)))
			}, func(src []byte, p unsafe.Pointer) (int, error) {
				if len(src) < 4 {
					return 0, ErrShort
				}
				*(*float32)(p) = math.Float32frombits(binary.LittleEndian.Uint32(src))
				return 4, nil
			}
	case reflect.Float64:
		return func(dst []byte, p unsafe.Pointer) []byte {
				return binary.LittleEndian.AppendUint64(dst, math.Float64bits(*(*float64)(p)))
			}, func(src []byte, p unsafe.Pointer) (int, error) {
				if len(src) < 8 {
					return 0, ErrShort
				}
				*(*float64)(p) = math.Float64frombits(binary.LittleEndian.Uint64(src))
				return 8, nil
			}
	case reflect.String:
		return func(dst []byte, p unsafe.Pointer) []byte {
				s := *(*string)(p)
				return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
			}, func(src []byte, p unsafe.Pointer) (int, error) {
				l, n, err := readUvarint(src)
				if err != nil {
					return 0, err
				}
				if l > uint64(len(src)-n) {
					return 0, errLength
				}
				*(*string)(p) = string(src[n : n+int(l)])
				return n + int(l), nil
			}
	case reflect.Pointer:
		return compileBinaryPointer(t)
	case reflect.Slice:
		return compileBinarySlice(t)
	case reflect.Array:
		enc, dec := compileBinary(t.Elem())
		n, size := t.Len(), t.Elem().Size()
		return func(dst []byte, p unsafe.Pointer) []byte {
				for i := range n {
					dst = enc(dst, unsafe.Add(p, uintptr(i)*size))
				}
				return dst
			}, func(src []byte, p unsafe.Pointer) (int, error) {
				used := 0
				for i := range n {
					k, err := dec(src[used:], unsafe.Add(p, uintptr(i)*size))
					if err != nil {
						return 0, err
					}
					used += k
				}
				return used, nil
			}
	case reflect.Map:
		return compileBinaryMap(t)
	case reflect.Struct:
		return compileBinaryStruct(t)
	}
	panic(fmt.Sprintf("codec: binary: %s is not plain", t)) // binaryPlain took it
}

// A pointer is a byte, 0 for nil, then the value it points at.
func compileBinaryPointer(t reflect.Type) (binaryEncoder, binaryDecoder) {
	enc, dec := compileBinary(t.Elem())
	elem := t.Elem()
	return func(dst []byte, p unsafe.Pointer) []byte {
			q := *(*unsafe.Pointer)(p)
			if q == nil {
				return append(dst, 0)
			}
			return enc(append(dst, 1), q)
		}, func(src []byte, p unsafe.Pointer) (int, error) {
			set, err := readFlag(src)
			if err != nil || !set {
				*(*unsafe.Pointer)(p) = nil
				return 1, err
			}
			q := reflect.New(elem).UnsafePointer()
			n, err := dec(src[1:], q)
			if err != nil {
				return 0, err
			}
			*(*unsafe.Pointer)(p) = q
			return 1 + n, nil
		}
}

// A slice is its length plus one (0 for nil, as JSON's null), then its
// elements ([]byte: its bytes). An element of a type that carries nothing
// is a zero byte: every element takes a byte at least, so a length is
// bounded by the bytes left, and damaged input cannot make a decode
// allocate or loop beyond what its size allows.
func compileBinarySlice(t reflect.Type) (binaryEncoder, binaryDecoder) {
	elemEnc, elemDec := compileBinary(t.Elem())
	size := t.Elem().Size()
	bytes := t.Elem().Kind() == reflect.Uint8
	if carriesNothing(t.Elem()) {
		elemEnc = func(dst []byte, _ unsafe.Pointer) []byte { return append(dst, 0) }
		elemDec = func(src []byte, _ unsafe.Pointer) (int, error) {
			if len(src) == 0 || src[0] != 0 {
				return 0, errors.New("an element of a type that carries nothing is not a zero byte")
			}
			return 1, nil
		}
	}
	return func(dst []byte, p unsafe.Pointer) []byte {
			s := (*sliceHeader)(p)
			if s.data == nil {
				return append(dst, 0)
			}
			dst = binary.AppendUvarint(dst, uint64(s.len)+1)
			if bytes {
				return append(dst, unsafe.Slice((*byte)(s.data), s.len)...)
			}
			for i := range s.len {
				dst = elemEnc(dst, unsafe.Add(s.data, uintptr(i)*size))
			}
			return dst
		}, func(src []byte, p unsafe.Pointer) (int, error) {
			n, used, err := readCount(src, t, p)
			if err != nil || n < 0 {
				return used, err
			}
			v := reflect.MakeSlice(t, n, n)
			data := v.UnsafePointer()
			if bytes {
				copy(unsafe.Slice((*byte)(data), n), src[used:])
				used += n
			} else {
				for i := range n {
					k, err := elemDec(src[used:], unsafe.Add(data, uintptr(i)*size))
					if err != nil {
						return 0, err
					}
					used += k
				}
			}
			reflect.NewAt(t, p).Elem().Set(v)
			return used, nil
		}
}

// A map is its length plus one (0 for nil), then its entries, each a key
// and its value, in the map's order (so not always the same bytes for one
// map). An entry of types that carry nothing is a zero byte: every entry
// takes a byte at least, as a slice's elements.
func compileBinaryMap(t reflect.Type) (binaryEncoder, binaryDecoder) {
	keyEnc, keyDec := compileBinary(t.Key())
	elemEnc, elemDec := compileBinary(t.Elem())
	empty := carriesNothing(t.Key()) && carriesNothing(t.Elem())
	return func(dst []byte, p unsafe.Pointer) []byte {
			m := reflect.NewAt(t, p).Elem()
			if m.IsNil() {
				return append(dst, 0)
			}
			dst = binary.AppendUvarint(dst, uint64(m.Len())+1)
			if empty {
				return append(dst, make([]byte, m.Len())...)
			}
			k, v := reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem()
			for it := m.MapRange(); it.Next(); {
				k.SetIterKey(it)
				v.SetIterValue(it)
				dst = elemEnc(keyEnc(dst, k.Addr().UnsafePointer()), v.Addr().UnsafePointer())
			}
			return dst
		}, func(src []byte, p unsafe.Pointer) (int, error) {
			n, used, err := readCount(src, t, p)
			if err != nil || n < 0 {
				return used, err
			}
			m := reflect.MakeMapWithSize(t, n)
			k, v := reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem()
			for range n {
				if empty {
					if src[used] != 0 {
						return 0, errors.New("an entry of types that carry nothing is not a zero byte")
					}
					used++
				} else {
					// Decoders expect a zero value.
					k.SetZero()
					v.SetZero()
					kn, err := keyDec(src[used:], k.Addr().UnsafePointer())
					if err != nil {
						return 0, err
					}
					used += kn
					vn, err := elemDec(src[used:], v.Addr().UnsafePointer())
					if err != nil {
						return 0, err
					}
					used += vn
				}
				m.SetMapIndex(k, v)
			}
			reflect.NewAt(t, p).Elem().Set(m)
			return used, nil
		}
}

// A struct is the fields JSON carries (exported, not tagged "-"), in
// order.
func compileBinaryStruct(t reflect.Type) (binaryEncoder, binaryDecoder) {
	type field struct {
		offset uintptr
		enc    binaryEncoder
		dec    binaryDecoder
	}
	var fields []field
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() || sf.Tag.Get("json") == "-" {
			continue
		}
		enc, dec := compileBinary(sf.Type)
		fields = append(fields, field{offset: sf.Offset, enc: enc, dec: dec})
	}
	return func(dst []byte, p unsafe.Pointer) []byte {
			for i := range fields {
				dst = fields[i].enc(dst, unsafe.Add(p, fields[i].offset))
			}
			return dst
		}, func(src []byte, p unsafe.Pointer) (int, error) {
			used := 0
			for i := range fields {
				k, err := fields[i].dec(src[used:], unsafe.Add(p, fields[i].offset))
				if err != nil {
					return 0, err
				}
				used += k
			}
			return used, nil
		}
}

// carriesNothing says whether t carries nothing: a struct without a field JSON
// carries, an array of none or of such values.
func carriesNothing(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Array:
		return t.Len() == 0 || carriesNothing(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if sf := t.Field(i); sf.IsExported() && sf.Tag.Get("json") != "-" && !carriesNothing(sf.Type) {
				return false
			}
		}
		return true
	}
	return false
}
