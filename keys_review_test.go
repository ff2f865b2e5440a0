package weir_test

import (
	"fmt"
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
	e := env(weir.Config{Parallelism: 4})
	places := weir.Source(e, "places", gen(t, 400, func(i int64) reviewPlace {
		if i%2 == 0 {
			return reviewPlace{reviewLoc{neg}, "equator"}
		}
		return reviewPlace{reviewLoc{0}, "equator"}
	}))
	type pc struct {
		P reviewPlace
		N int64
	}
	counts := weir.Reduce(weir.KeyBy(weir.Map(places, "one", func(p reviewPlace) pc { return pc{p, 1} }),
		func(c pc) reviewPlace { return c.P }), "count", func(a, b pc) pc { a.N += b.N; return a })
	out := &collect[int64]{}
	weir.Sink(weir.Map(counts, "n", func(c pc) int64 { return c.N }), "out", out.sink())
	execute(t, e)
	var last int64
	for _, n := range out.values() {
		last = max(last, n)
	}
	if last != 400 {
		t.Errorf("the greatest count of the one key is %d, want 400: 0 and -0 counted apart", last)
	}
}

type reviewTag struct{ Name string }

// reviewTagger puts a user key that is not UTF-8 into map state.
type reviewTagger struct {
	m *weir.MapState[string, reviewTag, int64]
}

func (s *reviewTagger) Open(c *weir.KeyedContext[string]) (err error) {
	s.m, err = weir.NewMapState[string, reviewTag, int64](c, "tags")
	return err
}

func (s *reviewTagger) Process(_ *weir.KeyedContext[string], w string, out weir.Collector[string]) error {
	if w == "7" {
		s.m.Put(reviewTag{"\xff"}, 1)
	}
	s.m.Put(reviewTag{"ok"}, 1)
	out.Collect(w)
	return nil
}

// TestMapStateUserKeyNotUTF8FailsTheJobAtOnce: a map state user key
// holding a string that is not UTF-8 fails the job at once (the KeyError is
// permanent), naming the string, on every backend: the heap, which encodes
// keys only for a snapshot, declined checkpoints until the restarts ran
// out. Found by an outside review, session 37.
func TestMapStateUserKeyNotUTF8FailsTheJobAtOnce(t *testing.T) {
	for _, sb := range []weir.StateBackend{{}, {Full: true}, {Kind: weir.PebbleState, Dir: t.TempDir()}} {
		e := env(weir.Config{StateBackend: sb, Checkpoint: weir.CheckpointConfig{TolerableFailures: 3}})
		words := weir.Source(e, "words", gen(t, 1000, func(i int64) string { return fmt.Sprint(i % 10) }))
		weir.Sink(weir.Process(weir.KeyBy(words, func(w string) string { return w }), "tags",
			func() weir.KeyedProcessFunction[string, string, string] { return &reviewTagger{} }), "out", (&collect[string]{}).sink())
		res, err := e.Execute(t.Context())
		if err == nil || !strings.Contains(err.Error(), "not UTF-8") || res.Attempts > 1 {
			t.Errorf("%v full=%v: a user key that is not UTF-8: %.300v after %d attempts, want the job failed at once, naming the string", sb.Kind, sb.Full, err, res.Attempts)
		}
	}
}

// reviewSpotGetter reads (never puts) a NaN user key.
type reviewSpotGetter struct {
	m *weir.MapState[string, spot, int64]
}

func (s *reviewSpotGetter) Open(c *weir.KeyedContext[string]) (err error) {
	s.m, err = weir.NewMapState[string, spot, int64](c, "spots")
	return err
}

func (s *reviewSpotGetter) Process(_ *weir.KeyedContext[string], w string, out weir.Collector[string]) error {
	if w == "7" {
		s.m.Get(spot{math.NaN(), 1})
	}
	out.Collect(w)
	return nil
}

// TestMapStateGetOfANaNUserKeyFindsNothing: a Get of a NaN user key finds
// nothing on every backend (Put stores none); on Pebble it encoded the key,
// which JSON cannot, and the job restarted until the restarts ran out.
// Found by an outside review, session 37.
func TestMapStateGetOfANaNUserKeyFindsNothing(t *testing.T) {
	for _, sb := range []weir.StateBackend{{}, {Kind: weir.PebbleState, Dir: t.TempDir()}} {
		e := env(weir.Config{StateBackend: sb})
		words := weir.Source(e, "words", gen(t, 1000, func(i int64) string { return fmt.Sprint(i % 10) }))
		weir.Sink(weir.Process(weir.KeyBy(words, func(w string) string { return w }), "spots",
			func() weir.KeyedProcessFunction[string, string, string] { return &reviewSpotGetter{} }), "out", (&collect[string]{}).sink())
		res, err := e.Execute(t.Context())
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
	e := env(weir.Config{StateBackend: weir.StateBackend{Kind: weir.PebbleState, Dir: t.TempDir()}})
	words := weir.Source(e, "words", gen(t, 1000, func(i int64) string { return fmt.Sprint(i % 10) }))
	weir.Sink(weir.Process(weir.KeyBy(words, func(w string) string { return w }), "tags",
		func() weir.KeyedProcessFunction[string, string, string] { return &reviewTagger{} }), "out", (&collect[string]{}).sink())
	_, err := e.Execute(t.Context())
	if err == nil || !strings.Contains(err.Error(), `map state "tags"`) || strings.Contains(err.Error(), "in the key function") {
		t.Errorf("a map state user key that is not UTF-8: %.500v\nwant the error to name map state \"tags\" (a user key) and not point at a key function / key codec it cannot have", err)
	}
}

// rkNilCodec is a value codec with a bug: a nil map write on values above 3.
type rkNilCodec struct{}

func (rkNilCodec) Append(dst []byte, v int64) []byte {
	if v > 3 {
		var m map[int]int
		m[0] = 1
	}
	return append(dst, byte(v))
}

func (rkNilCodec) Decode(src []byte) (int64, int, error) { return int64(src[0]), 1, nil }

type rkNilCounter struct {
	v *weir.ValueState[string, int64]
}

func (s *rkNilCounter) Open(c *weir.KeyedContext[string]) (err error) {
	s.v, err = weir.NewValueState[string, int64](c, "count", rkNilCodec{})
	return err
}

func (s *rkNilCounter) Process(_ *weir.KeyedContext[string], w string, out weir.Collector[string]) error {
	n, _ := s.v.Value()
	s.v.Update(n + 1)
	out.Collect(w)
	return nil
}

// TestAsyncPartPanicKeepsItsStack: a panic of a state codec in the
// asynchronous part is reported with the stack that says where it was, as
// a task's panic is. Found by an outside review, session 37.
func TestAsyncPartPanicKeepsItsStack(t *testing.T) {
	for _, full := range []bool{false, true} {
		e := env(weir.Config{StateBackend: weir.StateBackend{Full: full}, Restart: weir.NoRestart{}})
		words := weir.Source(e, "words", gen(t, 1000, func(i int64) string { return fmt.Sprint(i % 10) }))
		weir.Sink(weir.Process(weir.KeyBy(words, func(w string) string { return w }), "counts",
			func() weir.KeyedProcessFunction[string, string, string] { return &rkNilCounter{} }), "out", (&collect[string]{}).sink())
		_, err := e.Execute(t.Context())
		if err == nil || !strings.Contains(err.Error(), "rkNilCodec") {
			t.Errorf("full %v: the decline does not say where the codec panicked (no stack naming rkNilCodec.Append)", full)
		}
	}
}
