package codec

import "reflect"

// Copier returns a function that copies a value of type V deeply, by a
// round trip through c, or nil if V holds nothing its holder could change
// in place (no map, slice, pointer, interface, channel or function), or if
// the round trip would not give V back (Faithful: unexported fields, the
// types in interfaces; such values stay shared). Heap state gives out a
// copy of such a value the first time it is read after a snapshot froze
// it, as Flink's copy-on-write heap state does (the snapshot encodes the
// frozen value on another goroutine while an accumulator's Add may change
// the value in place), and a sliding window merges copies of its panes.
func Copier[V any](c Codec[V]) func(V) V {
	if !mutable(reflect.TypeFor[V](), map[reflect.Type]bool{}) {
		return nil
	}
	if Faithful[V]() != nil {
		// NB: JSON would lose unexported fields and the types in
		// interfaces: a copy that changes the value is worse than none.
		return nil
	}
	return func(v V) V {
		cp, _, err := c.Decode(c.Append(nil, v))
		if err != nil {
			// NB: a codec that cannot read what it wrote fails every
			// checkpoint and restore anyway, saying so.
			return v
		}
		return cp
	}
}

// mutable says whether a value of type t holds memory its holder could
// change in place; seen holds the types being looked at (t within itself).
func mutable(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Map, reflect.Slice, reflect.Pointer, reflect.Interface, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return true
	case reflect.Array:
		return mutable(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if mutable(t.Field(i).Type, seen) {
				return true
			}
		}
	}
	return false
}
