package heap

import (
	"reflect"
	"strings"
	"unsafe"
)

// Tables own the strings of the keys and values they keep: a kept key or
// value shares no memory with the record it came from. A record's strings
// may be cut from a chunk shared with other records (a line source's
// block, wordcount.Split's lower-cased text, a batch off the network; see
// internal/arena), and a string kept for long would keep that whole chunk
// alive: one small value per key from many batches, a chunk per key.
//
// Keys (owner) are copied once, when first stored, and a table never lets
// a Go map replace its copy: a map assignment to a key already there
// stores the caller's key (Go maps update string keys on assignment), so
// a table assigns only new keys (copied) or the copy it already has, which
// its entries carry for that.
//
// Values (values) are owned when stored, against the value they replace:
// a string the old value holds at the same place, equal or the same
// memory, is kept and not copied again, so a read-modify-write that keeps
// a record's word (a running count of {word, n}) copies nothing. A slice
// in a value is owned in place: its elements' strings are replaced by
// equal copies (the table owns the slice from then on, as it did before);
// elements shared with the old value's array (append(old, x)) are not
// looked at again.
//
// Strings are followed through structs, arrays and slices, not through
// pointers, maps and interfaces (a key of those is its identity; a value
// holding strings there should hold copies).

// walker owns the strings of the value of its type at p, against the old
// value at old (nil: none).
type walker func(p, old unsafe.Pointer)

// owner copies the strings of the keys a table keeps. The zero value
// copies nothing: K holds no string.
type owner[K comparable] struct {
	clone func(K) K
}

func ownerOf[K comparable]() owner[K] {
	t := reflect.TypeFor[K]()
	w := walkerOf(t)
	switch {
	case w == nil:
		return owner[K]{}
	case t == reflect.TypeFor[string]():
		return owner[K]{clone: func(k K) K { return any(strings.Clone(any(k).(string))).(K) }}
	}
	return owner[K]{clone: func(k K) K {
		w(unsafe.Pointer(&k), nil)
		return k
	}}
}

// own returns k as a table may keep it.
func (o owner[K]) own(k K) K {
	if o.clone == nil {
		return k
	}
	return o.clone(k)
}

// values owns the strings of the values a table keeps. The zero value
// owns nothing: V holds no string.
type values[V any] struct{ walk walker }

func valuesOf[V any]() values[V] { return values[V]{walkerOf(reflect.TypeFor[V]())} }

// own makes the strings of the value at v the table's, against the value
// at old (nil: none) it replaces. Both are the table's memory (NB: a
// pointer to a local variable would make it escape, an allocation a call).
func (o values[V]) own(v, old *V) {
	if o.walk != nil {
		o.walk(unsafe.Pointer(v), unsafe.Pointer(old))
	}
}

// walkerOf returns the walker of type t, or nil if t holds no string.
func walkerOf(t reflect.Type) walker {
	return buildWalker(t, map[reflect.Type]*walker{})
}

// buildWalker builds the walker of t; built holds those built or being
// built (t within itself, through a slice).
func buildWalker(t reflect.Type, built map[reflect.Type]*walker) walker {
	if !holdsString(t, map[reflect.Type]bool{}) {
		return nil
	}
	if w, ok := built[t]; ok {
		return func(p, old unsafe.Pointer) { (*w)(p, old) } // built by the time it runs
	}
	w := new(walker)
	built[t] = w
	if offs, ok := stringOffsets(t, 0, nil); ok && t.Kind() != reflect.String {
		// Strings held by value only: one loop, no call a field.
		*w = func(p, old unsafe.Pointer) {
			for _, off := range offs {
				ownString(unsafe.Add(p, off), offset(old, off))
			}
		}
		return *w
	}
	switch t.Kind() {
	case reflect.String:
		*w = ownString
	case reflect.Array:
		elem, size, n := buildWalker(t.Elem(), built), t.Elem().Size(), t.Len()
		*w = func(p, old unsafe.Pointer) {
			for i := range n {
				elem(unsafe.Add(p, uintptr(i)*size), offset(old, uintptr(i)*size))
			}
		}
	case reflect.Slice:
		elem, size := buildWalker(t.Elem(), built), t.Elem().Size()
		*w = func(p, old unsafe.Pointer) {
			s := *(*[]byte)(p) // the slice's header, whatever its elements: len counts them
			var o []byte
			if old != nil {
				o = *(*[]byte)(old)
			}
			sp, op := unsafe.Pointer(unsafe.SliceData(s)), unsafe.Pointer(unsafe.SliceData(o))
			i := 0
			switch {
			case sp == op:
				i = min(len(s), len(o)) // the old value's own elements
			case len(s) > 0:
				// The array is the caller's, and may be another's as well (a
				// record handed to two operators, the frozen value it was
				// sliced from): the copies go into an array of the table's.
				c := reflect.MakeSlice(t, len(s), len(s))
				reflect.Copy(c, reflect.NewAt(t, p).Elem())
				reflect.NewAt(t, p).Elem().Set(c)
				sp = c.UnsafePointer()
			}
			for ; i < len(s); i++ {
				var oe unsafe.Pointer
				if i < len(o) {
					oe = unsafe.Add(op, uintptr(i)*size)
				}
				elem(unsafe.Add(sp, uintptr(i)*size), oe)
			}
		}
	case reflect.Struct:
		type field struct {
			off uintptr
			w   walker
		}
		var fields []field
		for i := range t.NumField() {
			if fw := buildWalker(t.Field(i).Type, built); fw != nil {
				fields = append(fields, field{t.Field(i).Offset, fw})
			}
		}
		*w = func(p, old unsafe.Pointer) {
			for _, f := range fields {
				f.w(unsafe.Add(p, f.off), offset(old, f.off))
			}
		}
	}
	return *w
}

// stringOffsets appends to offs the offsets of the strings a value of t
// at offset base holds by value; ok is false if t holds a slice of them.
func stringOffsets(t reflect.Type, base uintptr, offs []uintptr) (_ []uintptr, ok bool) {
	switch t.Kind() {
	case reflect.String:
		return append(offs, base), true
	case reflect.Slice:
		return offs, !holdsString(t, map[reflect.Type]bool{})
	case reflect.Array:
		for i := range t.Len() {
			if offs, ok = stringOffsets(t.Elem(), base+uintptr(i)*t.Elem().Size(), offs); !ok {
				return offs, false
			}
		}
	case reflect.Struct:
		for i := range t.NumField() {
			if offs, ok = stringOffsets(t.Field(i).Type, base+t.Field(i).Offset, offs); !ok {
				return offs, false
			}
		}
	}
	return offs, true
}

// holdsString says whether values of t hold a string in themselves or
// in their slices' elements; seen are the types t is within.
func holdsString(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false // found on another path, if at all
	}
	seen[t] = true
	defer delete(seen, t)
	switch t.Kind() {
	case reflect.String:
		return true
	case reflect.Array, reflect.Slice:
		return holdsString(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if holdsString(t.Field(i).Type, seen) {
				return true
			}
		}
	}
	return false
}

// offset is p+off, or nil if p is.
func offset(p unsafe.Pointer, off uintptr) unsafe.Pointer {
	if p == nil {
		return nil
	}
	return unsafe.Add(p, off)
}

// ownString makes the string at p the table's: the old one at old if
// equal, else a copy. An empty string becomes "", which points nowhere.
func ownString(p, old unsafe.Pointer) {
	s := (*string)(p)
	switch {
	case len(*s) == 0:
		*s = ""
	case old == nil:
		*s = strings.Clone(*s)
	case unsafe.StringData(*s) == unsafe.StringData(*(*string)(old)):
		// the old string's memory: the table's already
	case *s == *(*string)(old):
		*s = *(*string)(old)
	default:
		*s = strings.Clone(*s)
	}
}
