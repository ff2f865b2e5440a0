package weir_test

import (
	"math"
	"strings"
	"testing"

	"github.com/weirstream/weir"
)

type reviewLoc struct{ Lat float64 }

// reviewPlace embeds its float: its default key codec is json.Marshal's.
type reviewPlace struct {
	reviewLoc
	Name string
}

// TestEmbeddedStructKeyZeroAndNegativeZeroAreOneKey: as
// TestCompositeKeysEqualUnderEqualsAreOneKey, with the float in an embedded
// struct (a common way to build a key), whose encoding json.Marshal
// writes, not the encoder of keys. Found by an outside review, session 37.
func TestEmbeddedStructKeyZeroAndNegativeZeroAreOneKey(t *testing.T) {
	neg := math.Copysign(0, -1)
	if n := greatestCount(t, reviewPlace{reviewLoc{neg}, "equator"}, reviewPlace{reviewLoc{0}, "equator"}); n != 400 {
		t.Errorf("the greatest count of the one key is %d, want 400: 0 and -0 counted apart", n)
	}
}

type reviewTag struct{ Name string }

// TestMapStateUserKeyNotUTF8FailsTheJobAtOnce: a map state user key
// holding a string that is not UTF-8 fails the job at once (the KeyError is
// permanent), naming the string, on every backend: the heap, which encodes
// keys only for a snapshot, declined checkpoints until the restarts ran
// out. Found by an outside review, session 37.
func TestMapStateUserKeyNotUTF8FailsTheJobAtOnce(t *testing.T) {
	for _, sb := range []weir.StateBackend{{}, {Full: true}, {Kind: weir.PebbleState, Dir: t.TempDir()}} {
		res, err := runWords(t, weir.Config{StateBackend: sb, Checkpoint: weir.CheckpointConfig{TolerableFailures: 3}}, "tags", func() weir.KeyedProcessFunction[string, string, string] {
			return &userKeys[reviewTag]{name: "tags", at7: func(m *weir.MapState[string, reviewTag, int64]) { m.Put(reviewTag{"\xff"}, 1) }, ok: &reviewTag{"ok"}}
		})
		if err == nil || !strings.Contains(err.Error(), "not UTF-8") || res.Attempts > 1 {
			t.Errorf("%v full=%v: a user key that is not UTF-8: %.300v after %d attempts, want the job failed at once, naming the string", sb.Kind, sb.Full, err, res.Attempts)
		}
	}
}

// TestMapStateGetOfANaNUserKeyFindsNothing: a Get of a NaN user key finds
// nothing on every backend (Put stores none); on Pebble it encoded the key,
// which JSON cannot, and the job restarted until the restarts ran out.
// Found by an outside review, session 37.
func TestMapStateGetOfANaNUserKeyFindsNothing(t *testing.T) {
	for _, sb := range []weir.StateBackend{{}, {Kind: weir.PebbleState, Dir: t.TempDir()}} {
		res, err := runWords(t, weir.Config{StateBackend: sb}, "spots", func() weir.KeyedProcessFunction[string, string, string] {
			return &userKeys[spot]{name: "spots", at7: func(m *weir.MapState[string, spot, int64]) { m.Get(spot{math.NaN(), 1}) }}
		})
		if err != nil {
			t.Errorf("%v: a Get of a NaN user key: %.300v after %d attempts, want nothing found", sb.Kind, err, res.Attempts)
		}
	}
}

// TestMapStateUserKeyErrorNamesTheState: the error of a map state user key
// that is not UTF-8 says it is the user key of map state "tags", and
// suggests no fix a user key cannot have (NewMapState takes no codec; there
// is no key function for user keys). Found by an outside review, session 37.
func TestMapStateUserKeyErrorNamesTheState(t *testing.T) {
	_, err := runWords(t, weir.Config{StateBackend: weir.StateBackend{Kind: weir.PebbleState, Dir: t.TempDir()}}, "tags", func() weir.KeyedProcessFunction[string, string, string] {
		return &userKeys[reviewTag]{name: "tags", at7: func(m *weir.MapState[string, reviewTag, int64]) { m.Put(reviewTag{"\xff"}, 1) }, ok: &reviewTag{"ok"}}
	})
	if err == nil || !strings.Contains(err.Error(), `map state "tags"`) || strings.Contains(err.Error(), "in the key function") {
		t.Errorf("a map state user key that is not UTF-8: %.500v\nwant the error to name map state \"tags\" (a user key) and not point at a key function / key codec it cannot have", err)
	}
}
