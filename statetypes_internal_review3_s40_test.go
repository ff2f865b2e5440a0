package weir

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/weirstream/weir/codec"
)

// Two versions of a key type that marshals itself: v2 keeps the same
// JSON (the key's bytes, its key group) with another representation.
type skuV1 struct{ code string }

func (s skuV1) MarshalJSON() ([]byte, error)  { return json.Marshal(s.code) }
func (s *skuV1) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &s.code) }

type skuV2 struct{ n int }

func (s skuV2) MarshalJSON() ([]byte, error) { return json.Marshal(strconv.Itoa(s.n)) }
func (s *skuV2) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return err
	}
	n, err := strconv.Atoi(str)
	s.n = n
	return err
}

// TestReview3S40KeyDescribedByItsMarshalerNotItsFields: a key type with its
// own MarshalJSON is encoded by it (codec.ForKey: keyJSON), yet typeOf
// describes its unexported fields, which no codec reads: a key type whose
// internals changed but whose JSON did not is refused at a restore (so is
// a key of a library type whose internals change with a Go release, such as
// time.Time or netip.Addr). Want: alike descriptions (both encode "42" for
// the key 42).
func TestReview3S40KeyDescribedByItsMarshalerNotItsFields(t *testing.T) {
	b1 := codec.ForKey[skuV1]().Append(nil, skuV1{"42"})
	b2 := codec.ForKey[skuV2]().Append(nil, skuV2{42})
	if string(b1) != string(b2) {
		t.Fatalf("the two versions' key bytes differ (%q, %q): the test's premise fails", b1, b2)
	}
	d1 := typeOf(codec.ForKey[skuV1](), codec.ForKey[skuV1](), true)
	d2 := typeOf(codec.ForKey[skuV2](), codec.ForKey[skuV2](), true)
	if d1 != d2 {
		t.Errorf("keys that encode alike are described %q and %q: a restore from one to the other is refused", d1, d2)
	}
}
