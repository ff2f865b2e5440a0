package weir

import (
	"strings"
	"testing"

	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/operator"
)

type typesV1 struct{ X, Y int64 }

type typesV1Renamed struct{ X, Y int64 }

type typesSwapped struct{ Y, X int64 }

// TestTypeOfSaysWhatTheCodecsRead: a type's description changes when the
// default codecs would read old bytes as other values, and only then.
func TestTypeOfSaysWhatTheCodecsRead(t *testing.T) {
	def := func(c codec.Codec[typesV1]) string { return typeOf(c, codec.For[typesV1](), false) }
	same := []struct{ a, b string }{
		{def(codec.For[typesV1]()), typeOf(codec.For[typesV1Renamed](), codec.For[typesV1Renamed](), false)}, // a type renamed
		{typeOf(codec.For[[]string](), codec.For[[]string](), false), typeOf(codec.For[[]string](), codec.For[[]string](), false)},
	}
	for _, s := range same {
		if s.a != s.b {
			t.Errorf("%q and %q differ; want them alike", s.a, s.b)
		}
	}
	differ := []struct{ a, b string }{
		{def(codec.For[typesV1]()), typeOf(codec.For[typesSwapped](), codec.For[typesSwapped](), false)},
		{typeOf(codec.For[int64](), codec.For[int64](), false), typeOf(codec.For[uint64](), codec.For[uint64](), false)},
		{typeOf(codec.For[int64](), codec.For[int64](), false), typeOf(codec.For[float64](), codec.For[float64](), false)},
		{typeOf(codec.ForKey[int64](), codec.ForKey[int64](), true), typeOf(codec.ForKey[string](), codec.ForKey[string](), true)},
	}
	for _, d := range differ {
		if d.a == d.b || d.a == "" || d.b == "" {
			t.Errorf("%q and %q: want two descriptions that differ", d.a, d.b)
		}
	}
	if got := def(codec.JSON[typesV1]{}); got != "" {
		t.Errorf("a codec the job gave is described %q; want \"\" (not checked)", got)
	}
}

// TestDeclareRefusesOnlyAChange: a restored type refuses another, for good;
// the same type, an unrecorded one, and a codec the job gave pass.
func TestDeclareRefusesOnlyAChange(t *testing.T) {
	s := stateTypes{restored: map[string]string{"acc": "value of int64", "custom": "", keyTypeName: "int64"}}
	for _, ok := range []struct{ name, desc string }{{"acc", "value of int64"}, {"custom", "value of uint64"}, {"new", "value of string"}, {"acc", ""}} {
		if err := s.declare("op", ok.name, ok.desc); err != nil {
			t.Errorf("declare(%q, %q): %v", ok.name, ok.desc, err)
		}
	}
	err := s.declare("op", "acc", "value of uint64")
	if !operator.IsPermanent(err) || !strings.Contains(err.Error(), `state "acc" was value of int64`) {
		t.Errorf("declare of a changed type: %v; want a permanent refusal naming the state and both types", err)
	}
	if err := s.declare("op", keyTypeName, "string"); err == nil || !strings.Contains(err.Error(), "its key was int64") {
		t.Errorf("declare of a changed key: %v", err)
	}
	var none stateTypes // a checkpoint of an earlier version: nothing recorded
	if err := none.declare("op", "acc", "value of uint64"); err != nil {
		t.Errorf("declare without restored types: %v", err)
	}
}
