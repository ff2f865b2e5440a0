package codec

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
	"unsafe"
)

// The JSON codec's encoder. encoding/json looks a value's type up and
// walks it through reflect.Value at every call; state snapshots and a
// cluster's channels encode millions of small structs, and that walk was
// most of a heap snapshot's time (Nexmark q3: three fifths of its
// asynchronous part). So for the types whose encoding is plain — structs
// of named fields, numbers, strings, bools, pointers, slices and arrays of
// them — the codec compiles, once per type, an encoder that reads the
// value's memory by offset and writes exactly the bytes json.Marshal
// writes (keys are hashed from their encoding, and state already written
// must read back the same: TestJSONEncoderMatchesEncodingJSON holds them
// to it). Every other type — with a Marshaler anywhere in it, maps,
// interfaces, embedded fields, the tag options string and omitzero, field
// names that collide, recursive types — goes to json.Marshal as before.

// encoder appends the JSON of the value at p.
type encoder func(dst []byte, p unsafe.Pointer) []byte

// encode runs e, and says false if the value has no JSON. A key that
// cannot be told apart from others (notUTF8) panics with a *KeyError.
func encode(e encoder, dst []byte, p unsafe.Pointer) (out []byte, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			if bad, is := r.(notUTF8); is {
				panic(&KeyError{s: bad.s})
			}
			if _, is := r.(unencodable); !is {
				panic(r)
			}
			out, ok = dst, false
		}
	}()
	return e(dst, p), true
}

// KeyError is the panic of the default codec of keys (ForKey) given a key
// it cannot encode apart from other keys (one holding a string that is not
// UTF-8), or cannot encode at all (one holding NaN or an infinity, which
// JSON has no form for). It is permanent (operator.IsPermanent): the same
// record fails again after a restart.
type KeyError struct {
	s   string // the string that is not UTF-8, if that is the reason
	err error  // else json.Marshal's reason
}

func (e *KeyError) Error() string {
	if e.err != nil {
		return fmt.Sprintf("codec: a key cannot be encoded: %v; keep NaN and infinities out of keys", e.err)
	}
	return fmt.Sprintf("codec: a key holds the string %q, which is not UTF-8: the default key encoding (JSON) writes its bad bytes as U+FFFD, so two keys would share their state; make such bytes text (hex, base64) before they are part of a key", e.s)
}

// Permanent says that a restart does not help.
func (*KeyError) Permanent() bool { return true }

// compiled is a type's encoder, with spare values of the type to encode
// from: an encoder is called through a func value, so a pointer to a
// caller's own copy would make every value escape to the heap.
type compiled struct {
	enc    encoder
	spares sync.Pool
}

// encoders and keyEncoders cache compiled encoders by type, of values and
// of keys; a nil *compiled means the type goes to json.Marshal.
var encoders, keyEncoders sync.Map // reflect.Type → *compiled

// encoderOf is t's compiled encoder; with key, its encoder of keys (see
// compiler.key).
func encoderOf(t reflect.Type, key bool) *compiled {
	cache := &encoders
	if key {
		cache = &keyEncoders
	}
	if c, ok := cache.Load(t); ok {
		return c.(*compiled)
	}
	var c *compiled
	if e := (&compiler{open: map[reflect.Type]bool{}, key: key}).compile(t); e != nil {
		c = &compiled{enc: e}
		c.spares.New = func() any { return reflect.New(t).UnsafePointer() }
	}
	c2, _ := cache.LoadOrStore(t, c)
	return c2.(*compiled)
}

// compiler compiles encoders.
type compiler struct {
	// open holds the types being compiled, to refuse recursive ones.
	open map[reflect.Type]bool
	// key makes an encoder of keys, which must encode two values alike
	// exactly when they are equal under ==, the job's test of one key: a
	// float 0 and -0 are written alike (as 0), and a string that is not
	// UTF-8, which JSON would write as another string (its bad bytes
	// replaced), is refused (panics with a notUTF8). Every other value is
	// written as by the encoder of values, so a key's key group stays
	// what it was before keys had an encoder of their own.
	key bool
}

var (
	jsonNumber = reflect.TypeFor[json.Number]()
	byteSlice  = reflect.TypeFor[[]byte]()
)

// custom reports whether t or *t decides its own encoding.
func custom(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return t == jsonNumber || t.Implements(marshaler) || p.Implements(marshaler) ||
		t.Implements(textMarshaler) || p.Implements(textMarshaler)
}

// compile returns t's encoder, or nil if json.Marshal must encode it.
func (c *compiler) compile(t reflect.Type) encoder {
	if c.open[t] || custom(t) {
		return nil
	}
	c.open[t] = true
	defer delete(c.open, t)
	switch t.Kind() {
	case reflect.Bool:
		return func(dst []byte, p unsafe.Pointer) []byte { return strconv.AppendBool(dst, *(*bool)(p)) }
	case reflect.Int:
		return func(dst []byte, p unsafe.Pointer) []byte { return strconv.AppendInt(dst, int64(*(*int)(p)), 10) }
	case reflect.Int8:
		return func(dst []byte, p unsafe.Pointer) []byte { return strconv.AppendInt(dst, int64(*(*int8)(p)), 10) }
	case reflect.Int16:
		return func(dst []byte, p unsafe.Pointer) []byte { return strconv.AppendInt(dst, int64(*(*int16)(p)), 10) }
	case reflect.Int32:
		return func(dst []byte, p unsafe.Pointer) []byte { return strconv.AppendInt(dst, int64(*(*int32)(p)), 10) }
	case reflect.Int64:
		return func(dst []byte, p unsafe.Pointer) []byte { return strconv.AppendInt(dst, *(*int64)(p), 10) }
	case reflect.Uint, reflect.Uintptr:
		return func(dst []byte, p unsafe.Pointer) []byte { return strconv.AppendUint(dst, uint64(*(*uint)(p)), 10) }
	case reflect.Uint8:
		return func(dst []byte, p unsafe.Pointer) []byte { return strconv.AppendUint(dst, uint64(*(*uint8)(p)), 10) }
	case reflect.Uint16:
		return func(dst []byte, p unsafe.Pointer) []byte { return strconv.AppendUint(dst, uint64(*(*uint16)(p)), 10) }
	case reflect.Uint32:
		return func(dst []byte, p unsafe.Pointer) []byte { return strconv.AppendUint(dst, uint64(*(*uint32)(p)), 10) }
	case reflect.Uint64:
		return func(dst []byte, p unsafe.Pointer) []byte { return strconv.AppendUint(dst, *(*uint64)(p), 10) }
	case reflect.Float32:
		if c.key {
			return func(dst []byte, p unsafe.Pointer) []byte {
				return appendFloat(dst, float64(positiveZero(*(*float32)(p))), 32)
			}
		}
		return func(dst []byte, p unsafe.Pointer) []byte { return appendFloat(dst, float64(*(*float32)(p)), 32) }
	case reflect.Float64:
		if c.key {
			return func(dst []byte, p unsafe.Pointer) []byte { return appendFloat(dst, positiveZero(*(*float64)(p)), 64) }
		}
		return func(dst []byte, p unsafe.Pointer) []byte { return appendFloat(dst, *(*float64)(p), 64) }
	case reflect.String:
		if c.key {
			return func(dst []byte, p unsafe.Pointer) []byte {
				s := *(*string)(p)
				if !utf8.ValidString(s) {
					panic(notUTF8{s})
				}
				return appendString(dst, s)
			}
		}
		return func(dst []byte, p unsafe.Pointer) []byte { return appendString(dst, *(*string)(p)) }
	case reflect.Pointer:
		elem := c.compile(t.Elem())
		if elem == nil {
			return nil
		}
		return func(dst []byte, p unsafe.Pointer) []byte {
			if q := *(*unsafe.Pointer)(p); q != nil {
				return elem(dst, q)
			}
			return append(dst, "null"...)
		}
	case reflect.Slice:
		return c.compileSlice(t)
	case reflect.Array:
		elem := c.compile(t.Elem())
		if elem == nil {
			return nil
		}
		n, size := t.Len(), t.Elem().Size()
		return func(dst []byte, p unsafe.Pointer) []byte {
			dst = append(dst, '[')
			for i := range n {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = elem(dst, unsafe.Add(p, uintptr(i)*size))
			}
			return append(dst, ']')
		}
	case reflect.Struct:
		return c.compileStruct(t)
	}
	return nil // maps, interfaces, complex numbers, channels, funcs
}

func (c *compiler) compileSlice(t reflect.Type) encoder {
	if t.Elem().Kind() == reflect.Uint8 && !custom(t.Elem()) {
		return func(dst []byte, p unsafe.Pointer) []byte {
			b := *(*[]byte)(p)
			if b == nil {
				return append(dst, "null"...)
			}
			dst = append(dst, '"')
			dst = base64.StdEncoding.AppendEncode(dst, b)
			return append(dst, '"')
		}
	}
	elem := c.compile(t.Elem())
	if elem == nil {
		return nil
	}
	size := t.Elem().Size()
	return func(dst []byte, p unsafe.Pointer) []byte {
		s := (*sliceHeader)(p)
		if s.data == nil {
			return append(dst, "null"...)
		}
		dst = append(dst, '[')
		for i := range s.len {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = elem(dst, unsafe.Add(s.data, uintptr(i)*size))
		}
		return append(dst, ']')
	}
}

// sliceHeader is a slice's memory layout (any element type).
type sliceHeader struct {
	data     unsafe.Pointer
	len, cap int
}

type structField struct {
	key       string // `"name":`
	offset    uintptr
	enc       encoder
	omitEmpty func(p unsafe.Pointer) bool // nil: never omitted
}

func (c *compiler) compileStruct(t reflect.Type) encoder {
	var fields []structField
	names := map[string]bool{}
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Anonymous {
			return nil // promoted fields: encoding/json's rules of depth and dominance
		}
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if !validTag(name) {
			name = sf.Name
		}
		omit := false
		for o := range strings.SplitSeq(opts, ",") {
			switch o {
			case "omitempty":
				omit = true
			case "string", "omitzero":
				return nil
			}
		}
		if names[name] {
			return nil // colliding names: encoding/json drops or picks one
		}
		names[name] = true
		enc := c.compile(sf.Type)
		if enc == nil {
			return nil
		}
		key, _ := json.Marshal(name)
		f := structField{key: string(key) + ":", offset: sf.Offset, enc: enc}
		if omit {
			f.omitEmpty = isEmpty(sf.Type)
		}
		fields = append(fields, f)
	}
	return func(dst []byte, p unsafe.Pointer) []byte {
		dst = append(dst, '{')
		first := true
		for i := range fields {
			f := &fields[i]
			q := unsafe.Add(p, f.offset)
			if f.omitEmpty != nil && f.omitEmpty(q) {
				continue
			}
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = append(dst, f.key...)
			dst = f.enc(dst, q)
		}
		return append(dst, '}')
	}
}

// isEmpty is omitempty's test for a field of type t (encoding/json's
// isEmptyValue).
func isEmpty(t reflect.Type) func(p unsafe.Pointer) bool {
	switch t.Kind() {
	case reflect.String:
		return func(p unsafe.Pointer) bool { return len(*(*string)(p)) == 0 }
	case reflect.Slice:
		return func(p unsafe.Pointer) bool { return (*sliceHeader)(p).len == 0 }
	case reflect.Array:
		n := t.Len()
		return func(unsafe.Pointer) bool { return n == 0 }
	case reflect.Float32:
		return func(p unsafe.Pointer) bool { return *(*float32)(p) == 0 } // -0 too
	case reflect.Float64:
		return func(p unsafe.Pointer) bool { return *(*float64)(p) == 0 }
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Pointer:
		size := t.Size()
		return func(p unsafe.Pointer) bool {
			for _, b := range unsafe.Slice((*byte)(p), size) {
				if b != 0 {
					return false
				}
			}
			return true
		}
	}
	return nil // structs are never empty
}

// validTag is encoding/json's test of a tag's name.
func validTag(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c) && !unicode.IsLetter(c) && !unicode.IsDigit(c) {
			return false
		}
	}
	return true
}

// unencodable is the panic of an encoder that meets a value JSON has no
// form for (NaN, the infinities); Append then lets json.Marshal say so.
type unencodable struct{}

// notUTF8 is the panic of an encoder of keys that meets a string that is
// not UTF-8 (see compiler.key).
type notUTF8 struct{ s string }

// canonicalKey is key v as json.Marshal is to encode it, for the key types
// the encoder of keys does not compile (an embedded field, a tag option
// string or omitzero, a field that encodes itself): a copy with every float
// -0 made 0, and a *KeyError panic for a string that is not UTF-8 which
// json.Marshal writes, as the encoder of keys does; what a Marshaler
// encodes is its own. Keys compare by value (no pointers, slices or maps),
// so the copy shares nothing it changes.
func canonicalKey[T any](v T) T {
	plan := keyPlanOf(reflect.TypeFor[T]())
	if !plan.dynamic {
		if len(plan.floats32)+len(plan.floats64)+len(plan.strings) == 0 {
			return v
		}
		c := v
		if bad := plan.apply(unsafe.Pointer(&c)); len(bad) > 0 {
			// As below, by the strings' offsets.
			before, _ := json.Marshal(c)
			for _, off := range bad {
				sp := (*string)(unsafe.Add(unsafe.Pointer(&c), off))
				s := *sp
				*sp = strings.ToValidUTF8(s, "") + "\x00weir"
				after, _ := json.Marshal(c)
				*sp = s
				if !bytes.Equal(before, after) {
					panic(&KeyError{s: s})
				}
			}
		}
		return c
	}
	c := v
	root := reflect.ValueOf(&c).Elem()
	var bad []reflect.Value
	canonicalize(root, &bad)
	if len(bad) > 0 {
		// Whether json.Marshal writes a string depends on its rules for
		// embedded fields (depth, tags, names that collide): ask it, by
		// changing the string and seeing whether the encoding changes.
		before, _ := json.Marshal(c)
		for _, b := range bad {
			s := b.String()
			b.SetString(strings.ToValidUTF8(s, "") + "\x00weir")
			after, _ := json.Marshal(c)
			b.SetString(s)
			if !bytes.Equal(before, after) {
				panic(&KeyError{s: s})
			}
		}
	}
	return c
}

// keyPlan is where canonicalKey looks in a key of a type without
// interfaces: the offsets of the floats and strings canonicalize would
// visit; dynamic types (with an interface) are walked by reflection.
type keyPlan struct {
	floats32, floats64, strings []uintptr
	dynamic                     bool
}

var keyPlans sync.Map // reflect.Type → *keyPlan

func keyPlanOf(t reflect.Type) *keyPlan {
	if p, ok := keyPlans.Load(t); ok {
		return p.(*keyPlan)
	}
	p := &keyPlan{}
	p.add(t, 0)
	p2, _ := keyPlans.LoadOrStore(t, p)
	return p2.(*keyPlan)
}

// add adds what canonicalize visits in a value of type t at offset off.
func (p *keyPlan) add(t reflect.Type, off uintptr) {
	if encodesItself(t) {
		return
	}
	switch t.Kind() {
	case reflect.Float32:
		p.floats32 = append(p.floats32, off)
	case reflect.Float64:
		p.floats64 = append(p.floats64, off)
	case reflect.String:
		p.strings = append(p.strings, off)
	case reflect.Array:
		for i := range t.Len() {
			p.add(t.Elem(), off+uintptr(i)*t.Elem().Size())
		}
	case reflect.Struct:
		for i := range t.NumField() {
			sf := t.Field(i)
			if !sf.IsExported() && !sf.Anonymous || sf.Tag.Get("json") == "-" {
				continue
			}
			p.add(sf.Type, off+sf.Offset)
		}
	case reflect.Interface:
		p.dynamic = true
	}
}

// apply makes the floats of the key at k 0 where they are -0, and returns
// the offsets of its strings that are not UTF-8.
func (p *keyPlan) apply(k unsafe.Pointer) (bad []uintptr) {
	for _, off := range p.floats32 {
		f := (*float32)(unsafe.Add(k, off))
		*f = positiveZero(*f)
	}
	for _, off := range p.floats64 {
		f := (*float64)(unsafe.Add(k, off))
		*f = positiveZero(*f)
	}
	for _, off := range p.strings {
		if !utf8.ValidString(*(*string)(unsafe.Add(k, off))) {
			bad = append(bad, off)
		}
	}
	return bad
}

// mayChange says whether canonicalKey may change or refuse a key of type t:
// whether it holds a float or a string outside types that encode
// themselves.
func mayChange(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] || encodesItself(t) {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Float32, reflect.Float64, reflect.String, reflect.Interface:
		return true
	case reflect.Array:
		return mayChange(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if mayChange(t.Field(i).Type, seen) {
				return true
			}
		}
	}
	return false
}

// encodesItself reports whether json.Marshal lets a value of type t encode
// itself, given the value (not its address: a key reaches json.Marshal as
// a value, so methods on *t are not called).
func encodesItself(t reflect.Type) bool {
	return t == jsonNumber || t.Implements(marshaler) || t.Implements(textMarshaler)
}

// canonicalize makes canonicalKey's changes to v, which is settable, and
// adds the strings that are not UTF-8 to bad.
func canonicalize(v reflect.Value, bad *[]reflect.Value) {
	if encodesItself(v.Type()) {
		return
	}
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		if v.Float() == 0 {
			v.SetFloat(0)
		}
	case reflect.String:
		if !utf8.ValidString(v.String()) {
			*bad = append(*bad, v)
		}
	case reflect.Array:
		for i := range v.Len() {
			canonicalize(v.Index(i), bad)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			sf := t.Field(i)
			if !sf.IsExported() && !sf.Anonymous || sf.Tag.Get("json") == "-" {
				continue // JSON leaves it out
			}
			f := v.Field(i)
			if !f.CanSet() { // in an unexported embedded struct
				f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
			}
			canonicalize(f, bad)
		}
	case reflect.Interface:
		if !v.IsNil() {
			c := reflect.New(v.Elem().Type()).Elem()
			c.Set(v.Elem())
			var inner []reflect.Value // in a copy the probe cannot change
			canonicalize(c, &inner)
			if len(inner) > 0 {
				panic(&KeyError{s: inner[0].String()})
			}
			v.Set(c)
		}
	}
}

// positiveZero is f, with -0 as 0.
func positiveZero[F float32 | float64](f F) F {
	if f == 0 {
		return 0
	}
	return f
}

// appendFloat writes f as encoding/json does: like strconv's shortest
// form, with exponents only beyond [1e-6, 1e21) and not padded.
func appendFloat(dst []byte, f float64, bits int) []byte {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		panic(unencodable{})
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21)) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, bits)
	if n := len(dst); format == 'e' && n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
		dst[n-2] = dst[n-1] // e-09 → e-9
		dst = dst[:n-1]
	}
	return dst
}

// appendString writes s quoted as encoding/json does by default: HTML's
// <, > and & escaped, invalid UTF-8 replaced, U+2028 and U+2029 escaped.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case c == '\u2028' || c == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[c&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
