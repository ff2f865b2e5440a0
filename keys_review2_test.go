package weir_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/weirstream/weir"
)

// rev2Temp has a pointer-receiver MarshalJSON, which json.Marshal of a
// key value never calls: its fields are written.
type rev2Temp struct{ C float64 }

func (t *rev2Temp) MarshalJSON() ([]byte, error) { return []byte(fmt.Sprintf(`{"C":%g}`, t.C)), nil }

type rev2Reading struct {
	Where string
	T     rev2Temp
}

// TestPointerMarshalerKeyZeroAndNegativeZeroAreOneKey: as
// TestEmbeddedStructKeyZeroAndNegativeZeroAreOneKey, with the float in a
// field whose type has MarshalJSON on its pointer. Found by an outside review, session 37.
func TestPointerMarshalerKeyZeroAndNegativeZeroAreOneKey(t *testing.T) {
	neg := math.Copysign(0, -1)
	if n := greatestCount(t, rev2Reading{"x", rev2Temp{neg}}, rev2Reading{"x", rev2Temp{0}}); n != 400 {
		t.Errorf("the greatest count of the one key is %d, want 400: 0 and -0 counted apart", n)
	}
}

type rev2Pos struct{ X, Y float64 }

// TestMapStateInfUserKeyFailsAtPut: a user key the codec refuses (+Inf:
// JSON has no form for it) fails the job at Put, on every backend. KeyCheck
// was nil for user keys without strings, so the heap found out only in a
// snapshot, and Pebble's error was not permanent. Found by an outside review, session 37.
func TestMapStateInfUserKeyFailsAtPut(t *testing.T) {
	for _, sb := range []weir.StateBackend{{}, {Full: true}, {Kind: weir.PebbleState, Dir: t.TempDir()}} {
		res, err := runWords(t, weir.Config{StateBackend: sb, Checkpoint: weir.CheckpointConfig{TolerableFailures: 3}}, "pos", func() weir.KeyedProcessFunction[string, string, string] {
			return &userKeys[rev2Pos]{name: "pos", at7: func(m *weir.MapState[string, rev2Pos, int64]) { m.Put(rev2Pos{math.Inf(1), 0}, 1) }, ok: &rev2Pos{1, 2}}
		})
		t.Logf("%v full=%v: attempts %d, err %.400v", sb.Kind, sb.Full, res.Attempts, err)
		if err == nil || res.Attempts > 1 {
			t.Errorf("%v full=%v: a +Inf user key: %.300v after %d attempts, want the job failed at once at Put", sb.Kind, sb.Full, err, res.Attempts)
		}
	}
}

// TestMapStateGetOfANonUTF8UserKeyFindsNothing: as
// TestMapStateGetOfANaNUserKeyFindsNothing, for a user key that is not
// UTF-8 (Put stores none): nothing found on every backend; Pebble failed
// the job. Found by an outside review, session 37.
func TestMapStateGetOfANonUTF8UserKeyFindsNothing(t *testing.T) {
	for _, sb := range []weir.StateBackend{{}, {Kind: weir.PebbleState, Dir: t.TempDir()}} {
		res, err := runWords(t, weir.Config{StateBackend: sb}, "tags", func() weir.KeyedProcessFunction[string, string, string] {
			return &userKeys[reviewTag]{name: "tags", at7: func(m *weir.MapState[string, reviewTag, int64]) {
				m.Get(reviewTag{"\xff"})
				m.Remove(reviewTag{"\xfe"})
			}}
		})
		if err != nil {
			t.Errorf("%v: a Get/Remove of a user key that is not UTF-8: %.300v after %d attempts, want nothing found", sb.Kind, err, res.Attempts)
		}
	}
}
