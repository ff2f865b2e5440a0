package heap

import (
	"reflect"
	"strings"
	"unsafe"
)

// owner copies the strings of the keys a table keeps, so that a kept key
// shares no memory with the record it came from: a record's strings may be
// cut from a chunk shared with other records (a line source's block,
// wordcount.Split's lower-cased text; see internal/arena), and a key kept
// for the job's life would keep that whole chunk alive.
//
// A table copies a key once, when it first stores it, and never lets a Go
// map replace its copy: a map assignment to a key already there stores the
// caller's key (Go maps update string keys on assignment), so a table
// assigns only new keys (copied) or the copy it already has, which its
// entries carry for that.
//
// The zero value copies nothing: K holds no string (strings inside
// pointers and interfaces are not followed; those keys are their identity).
type owner[K comparable] struct {
	clone func(K) K
}

func ownerOf[K comparable]() owner[K] {
	t := reflect.TypeFor[K]()
	switch {
	case t == reflect.TypeFor[string]():
		return owner[K]{clone: func(k K) K { return any(strings.Clone(any(k).(string))).(K) }}
	case holdsString(t):
		return owner[K]{clone: func(k K) K {
			cloneStrings(reflect.ValueOf(&k).Elem())
			return k
		}}
	}
	return owner[K]{}
}

// own returns k as a table may keep it.
func (o owner[K]) own(k K) K {
	if o.clone == nil {
		return k
	}
	return o.clone(k)
}

// holdsString says whether values of t hold a string by value.
func holdsString(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.String:
		return true
	case reflect.Array:
		return holdsString(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if holdsString(t.Field(i).Type) {
				return true
			}
		}
	}
	return false
}

// cloneStrings replaces every string v holds by value with a copy; v is
// addressable.
func cloneStrings(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		if !v.CanSet() { // an unexported field: reach it through its address
			v = reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem()
		}
		v.SetString(strings.Clone(v.String()))
	case reflect.Array:
		for i := range v.Len() {
			cloneStrings(v.Index(i))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			cloneStrings(v.Field(i))
		}
	}
}
