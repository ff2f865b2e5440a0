package weir_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/weirstream/weir"
)

// Third outside review, session 40: the state-type check at a restore.

type celsius float64

// TestReview3S40Float64ToNamedFloat64: v1 keeps ValueState[float64]; v2
// keeps the same numbers as a named type (type celsius float64). The
// description of both is "float64" ("a named type's name does not count"),
// so the restore is not refused; but codec.For[float64] is the built-in
// big-endian float64Codec while codec.For[celsius] is Binary, little-endian:
// the restored values are other numbers, silently. Want: the old values, or
// a refusal.
func TestReview3S40Float64ToNamedFloat64(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ckpt := filepath.Join(t.TempDir(), "ckpt")
			sb := b.sb(t)
			if _, _, err := evolveRun(t, ckpt, 1, 2, sb, 10, valueJob(10, func(_ float64, x int64) float64 { return float64(1000 + x) })); err != nil {
				t.Fatal(err)
			}
			got, res, err := evolveRun(t, ckpt, 2, 2, sb, 10, valueJob(10, func(_ celsius, x int64) celsius { return celsius(1000 + x) }))
			if err != nil {
				checkRefused(t, got, res, err, "acc")
				return
			}
			bad := 0
			for _, l := range got {
				var k int64
				var v float64
				var ok bool
				if _, e := fmt.Sscanf(l, "%d %t %g", &k, &ok, &v); e != nil || ok && v != float64(1000+k) {
					if bad++; bad <= 3 {
						t.Errorf("%q: want the old value %d (%v)", l, 1000+k, e)
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d records read another value; the restore was not refused", bad, len(got))
			}
		})
	}
}

type userID string

// TestReview3S40KeyStringToNamedString: KeyBy's key goes from string to a
// named string type (type userID string), the same keys. Both describe as
// "string", so the restore is not refused; but codec.ForKey[string] is the
// raw string codec and codec.ForKey[userID] is JSON (a quoted string): no
// restored key is found (or, on heap, decoding fails). Want: every key's
// old value, or a refusal at the start.
func TestReview3S40KeyStringToNamedString(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ckpt := filepath.Join(t.TempDir(), "ckpt")
			sb := b.sb(t)
			if _, _, err := evolveRun(t, ckpt, 1, 2, sb, 10, keyJob(func(v int64) string { return fmt.Sprint(v % 10) })); err != nil {
				t.Fatal(err)
			}
			got, res, err := evolveRun(t, ckpt, 2, 2, sb, 10, keyJob(func(v int64) userID { return userID(fmt.Sprint(v % 10)) }))
			t.Logf("err=%.400v attempts=%d", err, res.Attempts)
			if err != nil {
				checkRefused(t, got, res, err, "acc")
				return
			}
			bad := 0
			for _, l := range got {
				var k, v int64
				var ok bool
				if _, e := fmt.Sscanf(l, "%d %t %d", &k, &ok, &v); e != nil || !ok || v != 1000+k {
					if bad++; bad <= 3 {
						t.Errorf("%q: want key %d's old value %d (%v)", l, k, 1000+k, e)
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d keys lost their state; the restore was not refused", bad, len(got))
			}
		})
	}
}

// pointCached: pointV1 plus fields the binary codec does not write (an
// unexported one, and one tagged json:"-"): its bytes are pointV1's.
type pointCached struct {
	X, Y  int64
	note  string
	Cache string `json:"-"`
}

// TestReview3S40UnwrittenFieldAddedIsRefused: v2 adds to the state's
// struct a field the binary codec never writes (unexported, or json:"-").
// The bytes are the same and read back as they were; the restore must go
// on. It is refused for good: describe lists every field, not the ones
// the codec writes.
func TestReview3S40UnwrittenFieldAddedIsRefused(t *testing.T) {
	ckpt := filepath.Join(t.TempDir(), "ckpt")
	sb := weir.StateBackend{}
	if _, _, err := evolveRun(t, ckpt, 1, 2, sb, 10, valueJob(10, func(_ pointV1, x int64) pointV1 { return pointV1{X: 1000 + x, Y: x} })); err != nil {
		t.Fatal(err)
	}
	got, res, err := evolveRun(t, ckpt, 2, 2, sb, 10, valueJob(10, func(_ pointCached, x int64) pointCached { return pointCached{X: 1000 + x, Y: x, note: "n", Cache: "c"} }))
	if err != nil {
		t.Fatalf("a restore whose state type only gained fields the codec does not write was refused (attempts %d): %v", res.Attempts, err)
	}
	for _, l := range got {
		var k, x, y int64
		var ok bool
		if _, e := fmt.Sscanf(l, "%d %t {X:%d Y:%d", &k, &ok, &x, &y); e != nil || !ok || x != 1000+k || y != k {
			t.Errorf("%q: want the old {X:%d Y:%d} (%v)", l, 1000+k, k, e)
		}
	}
}

type keyTagA struct {
	N int64 `json:"n"`
}

type keyTagB struct {
	N int64 `json:"id"`
}

// TestReview3S40KeyStructJSONTagRenamed: the key struct keeps its Go
// field and type but its JSON name changes (json:"n" to json:"id"). Keys
// are JSON-coded (codec.ForKey: JSON for every struct), by field name, so
// every restored key's bytes are another key's; the description of both is
// "struct{N int64}" (tags not counted) and the restore is not refused.
// Want: every key's old value, or a refusal.
func TestReview3S40KeyStructJSONTagRenamed(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ckpt := filepath.Join(t.TempDir(), "ckpt")
			sb := b.sb(t)
			if _, _, err := evolveRun(t, ckpt, 1, 2, sb, 10, keyJob(func(v int64) keyTagA { return keyTagA{v % 10} })); err != nil {
				t.Fatal(err)
			}
			got, res, err := evolveRun(t, ckpt, 2, 2, sb, 10, keyJob(func(v int64) keyTagB { return keyTagB{v % 10} }))
			t.Logf("err=%.300v attempts=%d", err, res.Attempts)
			if err != nil {
				checkRefused(t, got, res, err, "acc")
				return
			}
			bad := 0
			for _, l := range got {
				var k, v int64
				var ok bool
				if _, e := fmt.Sscanf(l, "{%d} %t %d", &k, &ok, &v); e != nil || !ok || v != 1000+k {
					if bad++; bad <= 3 {
						t.Errorf("%q: want key {%d}'s old value %d (%v)", l, k, 1000+k, e)
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d keys read no state or another key's; the restore was not refused", bad, len(got))
			}
		})
	}
}
