package codec

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

type point struct {
	X, Y int
	Name string
}

func roundTrip[T any](t *testing.T, vals ...T) {
	t.Helper()
	c := For[T]()
	var buf []byte
	for _, v := range vals {
		buf = c.Append(buf, v)
	}
	for _, want := range vals {
		got, n, err := c.Decode(buf)
		if err != nil {
			t.Fatalf("%T: %v", want, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%T: got %v, want %v", want, got, want)
		}
		buf = buf[n:]
	}
	if len(buf) != 0 {
		t.Fatalf("%d bytes left", len(buf))
	}
}

func TestRoundTrips(t *testing.T) {
	roundTrip(t, "", "word", "ünïcode")
	roundTrip(t, 0, -1, 1<<40)
	roundTrip(t, int64(-5), int64(7))
	roundTrip(t, uint64(0), uint64(1<<63))
	roundTrip(t, 0.5, -1e300)
	roundTrip(t, true, false)
	roundTrip(t, []byte("abc"), []byte{})
	roundTrip(t, point{1, 2, "p"}, point{})
}

func TestTruncatedInputIsAnError(t *testing.T) {
	buf := For[string]().Append(nil, "hello")
	if _, _, err := For[string]().Decode(buf[:3]); err == nil {
		t.Fatal("decoded a truncated string")
	}
	if _, _, err := For[int]().Decode(nil); !errors.Is(err, ErrShort) {
		t.Fatalf("empty int: %v", err)
	}
	if _, _, err := For[point]().Decode(For[string]().Append(nil, "{")); err == nil {
		t.Fatal("decoded broken JSON")
	}
}

func TestHashIsDeterministic(t *testing.T) {
	h1, h2 := NewHasher(For[point]()), NewHasher(For[point]())
	if h1.Hash(point{1, 2, "a"}) != h2.Hash(point{1, 2, "a"}) || h1.Hash(point{1, 2, "a"}) == h1.Hash(point{1, 2, "b"}) {
		t.Fatal("struct hash not deterministic or not discriminating")
	}
	// Pinned: key groups are stored in checkpoints, so a change of hash
	// function would break every restore.
	if got := NewHasher(For[string]()).Hash("weir"); got != 0x25cb98be5b82688e {
		t.Fatalf("hash of \"weir\" is %#x; the key hash must never change", got)
	}
}

func FuzzDecodeString(f *testing.F) {
	f.Add(For[string]().Append(nil, "x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, n, err := For[string]().Decode(b)
		if err == nil && (n <= 0 || n > len(b)) {
			t.Fatalf("used %d of %d bytes", n, len(b))
		}
	})
}

type withHidden struct {
	A int
	b int
}

type embedsHidden struct {
	withHidden
	C string
}

type marshals struct{ x int }

func (m marshals) MarshalJSON() ([]byte, error)  { return json.Marshal(m.x) }
func (m *marshals) UnmarshalJSON(b []byte) error { return json.Unmarshal(b, &m.x) }

// TestFaithful: Faithful names what JSON would drop or cannot carry, and
// passes what it carries unchanged.
func TestFaithful(t *testing.T) {
	type ok struct {
		A int
		B []string
		M map[string]float64
		T time.Time
		P *marshals
	}
	for _, c := range []struct {
		err  error
		want string
	}{
		{Faithful[int64](), ""},
		{Faithful[ok](), ""},
		{Faithful[marshals](), ""},
		{Faithful[withHidden](), "JSON drops unexported field b of codec.withHidden"},
		{Faithful[[]embedsHidden](), "JSON drops unexported field b of codec.withHidden"},
		{Faithful[map[string]any](), "JSON decodes interface interface {} into maps"},
		{Faithful[struct{ F func() }](), "field F of struct { F func() }: JSON cannot encode a func"},
		{Faithful[struct{ C complex128 }](), "JSON cannot encode a complex128"},
	} {
		switch {
		case c.want == "" && c.err != nil:
			t.Errorf("unexpected %v", c.err)
		case c.want != "" && (c.err == nil || !strings.Contains(c.err.Error(), c.want)):
			t.Errorf("%v, want %q", c.err, c.want)
		}
	}
}
