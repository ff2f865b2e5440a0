package codec

import (
	"encoding/json"
	"testing"
)

type rev2Meta struct {
	Source string
	Seq    int
}

// rev2Event embeds rev2Meta and shadows its Source: json.Marshal writes
// the outer Source only (the shallower field dominates), never
// rev2Meta.Source.
type rev2Event struct {
	rev2Meta
	Source string
}

type rev2A struct{ S string }
type rev2B struct{ S string }

// rev2Both embeds two structs with a field of one name at one depth:
// json.Marshal writes neither.
type rev2Both struct {
	rev2A
	rev2B
	N int
}

type rev2label string

// rev2Labelled embeds an unexported non-struct type: JSON ignores it.
type rev2Labelled struct {
	rev2label
	N int
}

// TestKeyCheckOnlyWhatJSONWrites: a string that is not UTF-8 where JSON
// never writes it (a shadowed or ambiguous promoted field) cannot make two
// keys one, so the codec of keys writes the key as json.Marshal does; the
// first version of canonicalize refused it, failing a job that ran. Found by an outside review, session 37.
func TestKeyCheckOnlyWhatJSONWrites(t *testing.T) {
	for name, c := range map[string]struct {
		v   any
		enc func()
	}{
		"shadowed": {rev2Event{rev2Meta{"\xff", 1}, "ok"}, func() {
			ForKey[rev2Event]().Append(nil, rev2Event{rev2Meta{"\xff", 1}, "ok"})
		}},
		"ambiguous": {rev2Both{rev2A{"\xff"}, rev2B{"ok"}, 1}, func() {
			ForKey[rev2Both]().Append(nil, rev2Both{rev2A{"\xff"}, rev2B{"ok"}, 1})
		}},
		"unexported embedded string": {rev2Labelled{"\xff", 1}, func() {
			ForKey[rev2Labelled]().Append(nil, rev2Labelled{"\xff", 1})
		}},
	} {
		b, err := json.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s: the key %#v, which json.Marshal writes as %s (no \\xff in it), panics: %v", name, c.v, b, p)
				}
			}()
			c.enc()
		}()
	}
	if err := Faithful[rev2Event](); err != nil {
		t.Logf("Faithful[rev2Event]: %v", err)
	}
	if err := Faithful[rev2Both](); err != nil {
		t.Logf("Faithful[rev2Both]: %v", err)
	}
}

// TestFaithfulRefusesFieldsJSONDrops: Faithful refuses types whose
// shadowed or ambiguous promoted fields JSON drops (so keys unequal under
// == encoded alike, and records lost the fields between processes). An
// older defect, found by an outside review, session 37.
func TestFaithfulRefusesFieldsJSONDrops(t *testing.T) {
	a, b := rev2Event{rev2Meta{"a", 1}, "ok"}, rev2Event{rev2Meta{"b", 1}, "ok"}
	ea, eb := ForKey[rev2Event]().Append(nil, a), ForKey[rev2Event]().Append(nil, b)
	if a != b && string(ea) == string(eb) && Faithful[rev2Event]() == nil {
		t.Errorf("Faithful accepts rev2Event, yet %+v and %+v encode alike: %q", a, b, ea)
	}
	c, d := rev2Both{rev2A{"a"}, rev2B{"x"}, 1}, rev2Both{rev2A{"b"}, rev2B{"y"}, 1}
	ec, ed := ForKey[rev2Both]().Append(nil, c), ForKey[rev2Both]().Append(nil, d)
	if string(ec) == string(ed) && Faithful[rev2Both]() == nil {
		t.Errorf("Faithful accepts rev2Both, yet %+v and %+v encode alike: %q", c, d, ec)
	}
}

type rev2Code struct{ S string }

func (c rev2Code) MarshalJSON() ([]byte, error) { return []byte(`"code"`), nil }

// TestKeyCheckNilWhenNothingIsChecked: a user key whose only string is
// inside a type that encodes itself can never fail KeyCheck (it leaves
// Marshalers alone), so KeyCheck is nil and Put encodes nothing. Found by an outside review, session 37.
func TestKeyCheckNilWhenNothingIsChecked(t *testing.T) {
	type uk struct {
		C rev2Code
		N int
	}
	if check := KeyCheck[uk](); check != nil {
		t.Errorf("KeyCheck[uk] is not nil: each MapState.Put encodes the key (%v allocs per check), though no string of it is ever checked",
			testing.AllocsPerRun(100, func() { _ = check(uk{rev2Code{"\xff"}, 1}) }))
	}
}
