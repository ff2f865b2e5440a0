package weir

import (
	"testing"

	"github.com/weirstream/weir/codec"
)

// Key types whose bytes change while typeOf's description does not.

type r4inner1 struct{ A int }
type r4inner2 struct{ A string }
type r4EmbedV1 struct {
	r4inner1
	B int
}
type r4EmbedV2 struct {
	r4inner2
	B int
}

type r4OmitV1 struct{ A, B int }
type r4OmitV2 struct {
	A int
	B int `json:",omitempty"`
}

type r4StrV1 struct{ A int }
type r4StrV2 struct {
	A int `json:",string"`
}

type r4DashV1 struct {
	A int `json:"-,"`
}
type r4DashV2 struct {
	A string `json:"-,"`
}

func r4KeyPair[A, B any](t *testing.T, a A, b B) {
	t.Helper()
	ba := codec.ForKey[A]().Append(nil, a)
	bb := codec.ForKey[B]().Append(nil, b)
	da := typeOf(codec.ForKey[A](), codec.ForKey[A](), true)
	db := typeOf(codec.ForKey[B](), codec.ForKey[B](), true)
	t.Logf("bytes %q vs %q; described %q vs %q", ba, bb, da, db)
	if string(ba) != string(bb) && da == db {
		t.Errorf("key bytes change (%q -> %q) but the description does not (%q): the restore is let through and the restored state is looked up under other keys (lost, another key group)", ba, bb, da)
	}
}

// TestReview4S40KeyUnexportedEmbeddedFieldsMissed: encoding/json promotes the
// exported fields of an unexported embedded struct; jsonShape drops the
// embedded field (not exported), so its fields' types are not described.
func TestReview4S40KeyUnexportedEmbeddedFieldsMissed(t *testing.T) {
	r4KeyPair(t, r4EmbedV1{r4inner1{1}, 2}, r4EmbedV2{r4inner2{"1"}, 2})
}

// TestReview4S40KeyOmitemptyMissed: the tag's options are cut off.
func TestReview4S40KeyOmitemptyMissed(t *testing.T) {
	r4KeyPair(t, r4OmitV1{1, 0}, r4OmitV2{1, 0})
}

// TestReview4S40KeyStringOptionMissed: ",string" writes the number quoted.
func TestReview4S40KeyStringOptionMissed(t *testing.T) {
	r4KeyPair(t, r4StrV1{1}, r4StrV2{1})
}

// TestReview4S40KeyDashCommaMissed: json:"-," is a field named "-", which
// encoding/json writes; jsonShape takes it for json:"-".
func TestReview4S40KeyDashCommaMissed(t *testing.T) {
	r4KeyPair(t, r4DashV1{1}, r4DashV2{"1"})
}
