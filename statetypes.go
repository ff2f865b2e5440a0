package weir

import (
	"encoding"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state"
)

// State types at a restore (design note 136). A checkpoint records, per
// keyed operator, the type of its key and of each state it declared, as
// the default codecs encode them; a restore compares what the job declares
// now, and refuses a change before any byte is read: the binary codec
// writes a struct's fields by position and an int64 as a zig-zag varint,
// so a struct whose fields moved, or an int64 now a uint64, read old bytes
// as other values, silently (as Flink's serializer snapshots would refuse
// or migrate). A codec the job gives (KeyBy's key codec, a state's codec)
// is the job's to keep compatible: it is recorded as such and not checked.
// Checkpoints of earlier versions record no types and are not checked.

// stateTypes are an operator subtask's state types: restored (nil when the
// checkpoint recorded none) and declared.
type stateTypes struct {
	restored, declared map[string]string
}

// keyTypeName is the entry of the key's type: no state has an empty name;
// windowsTypeName, that of a window operator's windows (their geometry).
const (
	keyTypeName     = ""
	windowsTypeName = "_windows"
)

// declare records state name (keyTypeName: the key) of type desc (typeOf),
// refusing a type other than the restored one.
func (s *stateTypes) declare(uid, name, desc string) error {
	if s.declared == nil {
		s.declared = map[string]string{}
	}
	s.declared[name] = desc
	old, ok := s.restored[name]
	if !ok || old == desc || old == "" || desc == "" {
		return nil
	}
	if name == windowsTypeName {
		return operator.Permanent(fmt.Errorf("operator %q: its windows were %s in the checkpoint it restores, and are %s now: the restored windows would never fire, and their records would be lost; keep the windows as they were, or give the operator a new UID (weir.UID) to start its windows afresh (a stop with a savepoint after the old windows fired loses nothing)",
			uid, old, desc))
	}
	if name == keyTypeName {
		return operator.Permanent(fmt.Errorf("operator %q: its key was %s in the checkpoint it restores, and is %s now: restored state would be looked up under keys read as another type (state lost, or another key's); key by the type it had, give KeyBy a key codec that reads the old keys, or give the operator a new UID (weir.UID) to start its state afresh",
			uid, old, desc))
	}
	return operator.Permanent(fmt.Errorf("operator %q: state %q was %s in the checkpoint it restores, and is %s now: its bytes would be read as another type (wrong values, or a failure later); declare it as it was, give it a codec of your own that reads the old bytes, or give the operator a new UID (weir.UID) to start its state afresh",
		uid, name, old, desc))
}

// snapshot writes the types, restored and declared, as union list state
// (every subtask writes them all).
func (s *stateTypes) snapshot(oc *operator.Context) operator.Async {
	all := maps.Clone(s.restored) // a state this version does not declare keeps its type
	if all == nil {
		all = map[string]string{}
	}
	maps.Copy(all, s.declared)
	names := slices.Sorted(maps.Keys(all))
	items := make([][]byte, len(names))
	for i, n := range names {
		items[i] = []byte(n + "\x00" + all[n])
	}
	return oc.SnapshotList(state.Union, "_types", items)
}

// restoreStateTypes reads the types a checkpoint recorded; nil if none.
func restoreStateTypes(rs *operator.Restore, oc *operator.Context) (map[string]string, error) {
	items, err := state.RestoreList(rs.Handles, rs.Read, state.Union, "_types", oc.Subtask, oc.Parallelism)
	if err != nil || len(items) == 0 {
		return nil, err
	}
	types := map[string]string{}
	for _, it := range items {
		name, desc, ok := strings.Cut(string(it), "\x00")
		if !ok {
			return nil, fmt.Errorf("restore state types: damaged entry %q", it)
		}
		types[name] = desc
	}
	return types, nil
}

// typeOf describes what codec c writes, for the check of a restore: ""
// for a codec the job gave (def is the default), a scalar codec's own type
// (the built-in codecs of string, int64, float64, ...: a named type gets
// another codec), and for the binary and JSON codecs the structure they
// write (binaryShape, jsonShape). A value's JSON reads by field name and
// takes fields added or removed: it is described as "json" only. A key's
// JSON is looked up by its bytes: its fields' names and types count.
func typeOf[T any](c, def codec.Codec[T], key bool) string {
	ct := reflect.TypeOf(c)
	if ct != reflect.TypeOf(def) {
		return ""
	}
	t := reflect.TypeFor[T]()
	switch {
	case ct == reflect.TypeFor[codec.Binary[T]]():
		return "binary " + binaryShape(t, map[reflect.Type]bool{})
	case !key && ct == reflect.TypeFor[codec.JSON[T]]():
		return "json"
	case ct == reflect.TypeFor[codec.JSON[T]]() || strings.HasPrefix(ct.Name(), "keyJSON["):
		if shape := jsonShape(t, map[reflect.Type]bool{}); shape != selfEncoded {
			return "json " + shape
		}
		return "" // it encodes itself, as a codec the job gives does
	}
	return ct.String()
}

// binaryShape is t as the binary codec writes it: a struct's exported
// fields not tagged json:"-", in order; a named type as its kind.
func binaryShape(t reflect.Type, seen map[reflect.Type]bool) string {
	return shape(t, seen, binaryShape, func(f reflect.StructField) (string, bool) {
		return f.Name, f.IsExported() && f.Tag.Get("json") != "-"
	})
}

// jsonShape is t as encoding/json writes it: a struct's fields with their
// JSON tags whole (a name, omitempty, string), embedded structs too, as
// their exported fields are promoted; a type that marshals itself is the
// job's to keep compatible (selfEncoded), as a codec it gives is.
func jsonShape(t reflect.Type, seen map[reflect.Type]bool) string {
	if t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonMarshaler) ||
		t.Implements(textMarshaler) || reflect.PointerTo(t).Implements(textMarshaler) {
		return selfEncoded
	}
	return shape(t, seen, jsonShape, func(f reflect.StructField) (string, bool) {
		tag := f.Tag.Get("json")
		return fmt.Sprintf("%s %q", f.Name, tag), (f.IsExported() || f.Anonymous) && tag != "-"
	})
}

// selfEncoded is the shape of a type that marshals itself.
const selfEncoded = "self-encoded"

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// shape describes t's structure, its parts by of and a struct's fields by
// field (their names, and whether they are written).
func shape(t reflect.Type, seen map[reflect.Type]bool, of func(reflect.Type, map[reflect.Type]bool) string, field func(reflect.StructField) (string, bool)) string {
	if seen[t] {
		return t.String() // a recursive type
	}
	switch t.Kind() {
	case reflect.Struct:
		seen[t] = true
		defer delete(seen, t)
		var fields []string
		for i := range t.NumField() {
			if name, written := field(t.Field(i)); written {
				fields = append(fields, name+" "+of(t.Field(i).Type, seen))
			}
		}
		return "struct{" + strings.Join(fields, "; ") + "}"
	case reflect.Pointer:
		return "*" + of(t.Elem(), seen)
	case reflect.Slice:
		return "[]" + of(t.Elem(), seen)
	case reflect.Array:
		return fmt.Sprintf("[%d]%s", t.Len(), of(t.Elem(), seen))
	case reflect.Map:
		return "map[" + of(t.Key(), seen) + "]" + of(t.Elem(), seen)
	case reflect.Interface:
		return t.String()
	}
	return t.Kind().String()
}
