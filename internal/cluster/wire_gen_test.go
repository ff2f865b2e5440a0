package cluster

// The runtime values that cross the control plane, drawn at random: every
// exported field of each, found by reflection, so that a field added to
// runtime.Control, runtime.Report or runtime.SubtaskStats is drawn and
// compared without a change here. Each goes to its message, into the
// request that carries it, through proto.Marshal and Unmarshal, as Connect
// sends it, and back; what comes back must be what was sent. A field that
// does not come back fails the test, by name, unless notCarried says why
// the wire leaves it out: runtime.Control once gained Aligned and
// Triggered and the conversions dropped them, so workers treated every
// barrier wrongly and a Nexmark query lost results.
//
// WEIR_SEED=n reruns the draws of seed n; -wire.seeds (or
// $WEIR_WIRE_SEEDS) sets how many values of each kind are drawn.

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/internal/transport"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/storage"
)

var wireSeeds = flag.Int("wire.seeds", 0, "values of each kind TestWireRoundTrip draws (0: $WEIR_WIRE_SEEDS, else 2000)")

// notCarried are the fields ("package.Type.Field") the wire leaves out on
// purpose, with the reason; any other field must come back as it was sent.
var notCarried = map[string]string{}

// narrowed are the int fields the wire carries in 32 bits, with the
// reason no value needs more; the generator draws them in that range.
var narrowed = map[string]string{
	"checkpoint.TaskID.Subtask":          "a subtask index, below its vertex's max parallelism",
	"checkpoint.Operator.MaxParallelism": "at most keygroup.MaxMaxParallelism",
	"runtime.Control.Kind":               "one of runtime's few control kinds",
	"runtime.SubtaskStats.InputCapacity": "the events one input channel holds",
	"runtime.BarrierProgress.Barriers":   "at most a subtask's input channels",
	"runtime.BarrierProgress.Channels":   "a subtask's input channels",
}

// addressed is a control message with the task it goes to, as
// runtime.Execution.Send takes them.
type addressed struct {
	To      checkpoint.TaskID
	Control runtime.Control
}

// wireCase is a value that crosses the control plane: where its fields'
// names start, what makes a drawn one valid to send, and its trip.
type wireCase struct {
	name, root string
	typ        reflect.Type
	valid      func(v reflect.Value, r *rand.Rand)
	trip       func(v any) (any, error)
}

func wireCaseOf[T any](name, root string, valid func(*T, *rand.Rand), trip func(T) (T, error)) wireCase {
	return wireCase{name: name, root: root, typ: reflect.TypeFor[T](),
		valid: func(v reflect.Value, r *rand.Rand) {
			if valid != nil {
				valid(v.Addr().Interface().(*T), r)
			}
		},
		trip: func(v any) (any, error) { return trip(v.(T)) }}
}

var wireCases = []wireCase{
	wireCaseOf("control", "", nil, func(a addressed) (addressed, error) {
		back, err := overTheWire(&clusterpb.ControlRequest{Attempt: 1, Messages: []*clusterpb.ControlMessage{controlToProto(a.To, a.Control)}})
		if err != nil {
			return addressed{}, err
		}
		id, c := controlFromProto(back.GetMessages()[0])
		return addressed{id, c}, nil
	}),
	wireCaseOf("report", "Report", func(r *runtime.Report, rng *rand.Rand) {
		// reportFromProto refuses any other kind, a negative channel
		// state, and a switch to unaligned of an aligned snapshot.
		r.Kind = runtime.ReportAck + runtime.ReportKind(rng.IntN(int(runtime.ReportReplayed-runtime.ReportAck)+1))
		if r.ChannelState < 0 {
			r.ChannelState = -(r.ChannelState + 1)
		}
		r.Unaligned = r.Unaligned || r.Switched
	}, func(r runtime.Report) (runtime.Report, error) {
		back, err := overTheWire(&clusterpb.ReportRequest{Worker: "w", Attempt: 1, Reports: []*clusterpb.TaskReport{reportToProto(r)}})
		if err != nil {
			return runtime.Report{}, err
		}
		p := back.GetReports()[0]
		// The coordinator reads a failed data connection's peer off the
		// message (Coordinator.Report), not off the runtime.Report.
		var pe peerError // zero unless the failure is a data connection's
		errors.As(r.Err, &pe)
		if p.GetPeerFailed() != pe.peer || p.GetPeerSilent() != errors.Is(pe.err, transport.ErrPeerSilent) {
			return runtime.Report{}, fmt.Errorf("Report.Err: the failure of the data connection to %q (silent: %v) crossed as PeerFailed %q, PeerSilent %v",
				pe.peer, errors.Is(pe.err, transport.ErrPeerSilent), p.GetPeerFailed(), p.GetPeerSilent())
		}
		got, err := reportFromProto(p)
		if err != nil {
			return got, fmt.Errorf("reportFromProto refused a valid report: %w", err)
		}
		return got, nil
	}),
	wireCaseOf("stats", "SubtaskStats", nil, func(ss []runtime.SubtaskStats) ([]runtime.SubtaskStats, error) {
		back, err := overTheWire(&clusterpb.HeartbeatRequest{Worker: "w", Stats: statsToProto(ss)})
		return statsFromProto(back.GetStats()), err
	}),
	wireCaseOf("graph", "Graph", nil, func(g Graph) (Graph, error) {
		back, err := overTheWire(&clusterpb.RegisterRequest{Worker: "w", Graph: graphToProto(g)})
		return graphFromProto(back.GetGraph()), err
	}),
	wireCaseOf("placement", "Placement", nil, func(p Placement) (Placement, error) {
		back, err := overTheWire(&clusterpb.DeployRequest{Attempt: 1, Placement: placementToProto(p)})
		return placementFromProto(back.GetPlacement()), err
	}),
}

// overTheWire is m as its receiver reads it.
func overTheWire[M proto.Message](m M) (M, error) {
	back := m.ProtoReflect().New().Interface().(M)
	b, err := proto.Marshal(m)
	if err == nil {
		err = proto.Unmarshal(b, back)
	}
	if err != nil {
		return back, fmt.Errorf("a %T cannot cross: %w", m, err)
	}
	return back, nil
}

// TestWireRoundTrip: every value of every kind comes back as it was sent.
func TestWireRoundTrip(t *testing.T) {
	seed, n := wireSeed(t), wireDraws(t)
	checkWireLists(t)
	for _, c := range wireCases {
		t.Run(c.name, func(t *testing.T) {
			for i := range n {
				want := c.draw(t, seed, i)
				got, err := c.trip(want)
				if err != nil {
					t.Fatalf("draw %d of WEIR_SEED=%d: %v", i, seed, err)
				}
				if ds := wireDiff(c.root, want, got); len(ds) > 0 {
					var msgs []string
					for _, d := range ds[:min(len(ds), 5)] {
						msgs = append(msgs, d.String())
					}
					t.Fatalf("draw %d of WEIR_SEED=%d: lost on the wire:\n  %s", i, seed, strings.Join(msgs, "\n  "))
				}
			}
		})
	}
}

// TestWireRoundTripSeesEveryField plants, for each field of each value in
// turn, the defect TestWireRoundTrip is for (a conversion that drops it),
// and requires the draws to catch it by the field's name: neither the
// generator (a field always drawn zero) nor the comparison (a kind it
// skips) can stop seeing a field unnoticed.
func TestWireRoundTripSeesEveryField(t *testing.T) {
	const draws = 200
	seed := wireSeed(t)
	for _, c := range wireCases {
		leaves := wireLeaves(c.root, c.typ)
		if len(leaves) == 0 {
			t.Errorf("%s: no fields", c.name)
		}
		t.Logf("%s: %s", c.name, strings.Join(leaves, " "))
		for _, leaf := range leaves {
			caught := false
			for i := 0; i < draws && !caught; i++ {
				want := c.draw(t, seed, i)
				back, err := c.trip(want)
				if err != nil {
					t.Fatalf("%s: draw %d of WEIR_SEED=%d: %v", c.name, i, seed, err)
				}
				got := reflect.New(c.typ).Elem()
				got.Set(reflect.ValueOf(back))
				wireWalk(c.root, got, func(path string, v reflect.Value) {
					if path == leaf {
						v.SetZero()
					}
				})
				for _, d := range wireDiff(c.root, want, got.Interface()) {
					caught = caught || d.generic == leaf || strings.HasPrefix(leaf, d.generic+".")
				}
			}
			if !caught {
				t.Errorf("%s: a conversion that drops %s passes %d draws of WEIR_SEED=%d", c.name, leaf, draws, seed)
			}
		}
	}
}

func wireSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("WEIR_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("WEIR_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("WEIR_SEED=%d", seed)
	return seed
}

func wireDraws(t *testing.T) int {
	if *wireSeeds > 0 {
		return *wireSeeds
	}
	if s := os.Getenv("WEIR_WIRE_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("WEIR_WIRE_SEEDS=%q: want a count", s)
		}
		return n
	}
	return 2000
}

// checkWireLists fails for an entry of notCarried or narrowed that names
// no field of a value that crosses: a stale one would hide a field of
// the same name added later.
func checkWireLists(t *testing.T) {
	fields := map[string]bool{}
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		switch t.Kind() {
		case reflect.Struct:
			for i := range t.NumField() {
				if f := t.Field(i); f.IsExported() && !fields[field(t, f)] {
					fields[field(t, f)] = true
					walk(f.Type)
				}
			}
		case reflect.Slice:
			walk(t.Elem())
		case reflect.Map:
			walk(t.Key())
			walk(t.Elem())
		}
	}
	for _, c := range wireCases {
		walk(c.typ)
	}
	for _, list := range []map[string]string{notCarried, narrowed} {
		for f := range list {
			if !fields[f] {
				t.Errorf("%s is listed, but no value that crosses the control plane has it", f)
			}
		}
	}
}

var (
	timeType  = reflect.TypeFor[time.Time]()
	errorType = reflect.TypeFor[error]()
)

// wireLeaf reports whether the walks take a value of t as a whole.
func wireLeaf(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Struct:
		return t == timeType
	case reflect.Slice:
		return t.Elem().Kind() == reflect.Uint8
	case reflect.Map:
		return false
	}
	return true
}

// field is the key of the lists: "package.Type.Field".
func field(t reflect.Type, f reflect.StructField) string { return t.String() + "." + f.Name }

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// wireLeaves are the paths of t's fields that cross: an element of a
// slice is path[], a map's key path{key} and its value path{}.
func wireLeaves(path string, t reflect.Type) []string {
	switch {
	case wireLeaf(t):
		return []string{path}
	case t.Kind() == reflect.Struct:
		var out []string
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && notCarried[field(t, f)] == "" {
				out = append(out, wireLeaves(join(path, f.Name), f.Type)...)
			}
		}
		return out
	case t.Kind() == reflect.Slice:
		return wireLeaves(path+"[]", t.Elem())
	default: // map
		return append(wireLeaves(path+"{key}", t.Key()), wireLeaves(path+"{}", t.Elem())...)
	}
}

// wireWalk calls leaf with each leaf of v that crosses, settable.
func wireWalk(path string, v reflect.Value, leaf func(path string, v reflect.Value)) {
	t := v.Type()
	switch {
	case wireLeaf(t):
		leaf(path, v)
	case t.Kind() == reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && notCarried[field(t, f)] == "" {
				wireWalk(join(path, f.Name), v.Field(i), leaf)
			}
		}
	case t.Kind() == reflect.Slice:
		for i := range v.Len() {
			wireWalk(path+"[]", v.Index(i), leaf)
		}
	case !v.IsNil(): // a map, rebuilt from settable copies of its entries
		m := reflect.MakeMapWithSize(t, v.Len())
		for it := v.MapRange(); it.Next(); {
			k, e := reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem()
			k.Set(it.Key())
			e.Set(it.Value())
			wireWalk(path+"{key}", k, leaf)
			wireWalk(path+"{}", e, leaf)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	}
}

// draw is value i of seed: each has its own stream, so one draw can be
// rerun alone.
func (c wireCase) draw(t *testing.T, seed uint64, i int) any {
	g := wireGen{t: t, r: rand.New(rand.NewPCG(seed, uint64(i)))}
	v := reflect.New(c.typ).Elem()
	g.fill(c.root, v, "")
	c.valid(v, g.r)
	return v.Interface()
}

// wireGen fills values with random contents, by their types.
type wireGen struct {
	t *testing.T
	r *rand.Rand
}

// fill draws v, the value of field key (for narrowed).
func (g wireGen) fill(path string, v reflect.Value, key string) {
	t := v.Type()
	switch {
	case t == timeType:
		v.Set(reflect.ValueOf(g.time()))
		return
	case t == errorType:
		if err := g.err(); err != nil {
			v.Set(reflect.ValueOf(err))
		}
		return
	}
	switch t.Kind() {
	case reflect.Bool:
		v.SetBool(g.r.IntN(2) == 1)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := t.Bits()
		if narrowed[key] != "" {
			bits = 32
		}
		v.SetInt(g.int(bits))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(g.uint(t.Bits()))
	case reflect.String:
		v.SetString(g.text(g.r.IntN(12)))
	case reflect.Slice:
		// Nil or empty: the wire cannot tell them apart, nor need it.
		n := g.r.IntN(5) - 1
		if n < 0 {
			return
		}
		v.Set(reflect.MakeSlice(t, n, n))
		for i := range n {
			g.fill(path+"[]", v.Index(i), key)
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(t))
		for range g.r.IntN(5) {
			k, e := reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem()
			g.fill(path+"{key}", k, key)
			g.fill(path+"{}", e, key)
			v.SetMapIndex(k, e)
		}
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() {
				g.fill(join(path, f.Name), v.Field(i), field(t, f))
			}
		}
	default:
		g.t.Fatalf("%s: cannot draw a %s: teach wireGen.fill and wireDiff its kind", path, t)
	}
}

// int draws small values, the extremes of bits, and any in between.
func (g wireGen) int(bits int) int64 {
	hi := int64(math.MaxInt64 >> (64 - bits))
	switch g.r.IntN(4) {
	case 0:
		return g.r.Int64N(7) - 3
	case 1:
		if g.r.IntN(2) == 0 {
			return hi - g.r.Int64N(2)
		}
		return -hi - 1 + g.r.Int64N(2)
	}
	return int64(g.r.Uint64()) >> (64 - bits)
}

func (g wireGen) uint(bits int) uint64 {
	hi := uint64(math.MaxUint64) >> (64 - bits)
	switch g.r.IntN(4) {
	case 0:
		return g.r.Uint64N(4)
	case 1:
		return hi - g.r.Uint64N(2)
	}
	return g.r.Uint64() >> (64 - bits)
}

// text draws n runes of ASCII, control characters, Latin, CJK and emoji:
// valid UTF-8, as proto3 strings must be (names, paths and errors are).
func (g wireGen) text(n int) string {
	ranges := [][2]rune{{' ', '~'}, {0, 0x1f}, {0xa0, 0x17f}, {0x4e00, 0x9fff}, {0x1f300, 0x1f64f}}
	var b strings.Builder
	for range n {
		rg := ranges[g.r.IntN(len(ranges))]
		b.WriteRune(rg[0] + g.r.Int32N(rg[1]-rg[0]+1))
	}
	return b.String()
}

// time draws the zero time (not said) or an instant, to the nanosecond,
// in the range UnixNano holds and in any location, but never the Unix
// epoch itself: the wire says "not said" with its UnixNano, 0.
func (g wireGen) time() time.Time {
	if g.r.IntN(4) == 0 {
		return time.Time{}
	}
	ns := int64(g.r.Uint64())
	if g.r.IntN(2) == 0 { // within some years of 2026
		ns = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano() + g.r.Int64N(1<<58) - 1<<57
	}
	if ns == 0 {
		ns = 1
	}
	zones := []*time.Location{time.UTC, time.Local, time.FixedZone("UTC-7:30", -7*3600-1800)}
	return time.Unix(0, ns).In(zones[g.r.IntN(len(zones))])
}

// err draws nil or an error as tasks fail: plain, of damaged state (either
// sentinel runtime.DamagedState knows), of a peer's data connection, any
// of them permanent and wrapped. Its text is never empty (the wire says
// "no error" with an empty one), at times over maxErrorBytes, and at
// times not UTF-8 (it quotes a record's raw bytes); or one of the errors
// the driver fails the job for without a restart (runtime.IsPermanent),
// which the wire carries as permanent.
func (g wireGen) err() error {
	if g.r.IntN(3) == 0 {
		return nil
	}
	n := 1 + g.r.IntN(40)
	if g.r.IntN(8) == 0 {
		n = maxErrorBytes/4 + g.r.IntN(maxErrorBytes)
	}
	text := g.text(n)
	if g.r.IntN(8) == 0 {
		text += "\xff\xfe" + g.text(g.r.IntN(4))
	}
	var err error
	switch g.r.IntN(8) {
	case 5:
		err = fmt.Errorf("restore %s: %w", text, checkpoint.ErrCorrupt)
	case 6:
		err = fmt.Errorf("restore %s: %w", text, checkpoint.ErrMismatch)
	case 7:
		err = fmt.Errorf("commit %s: %w", text, storage.ErrLeaseLost)
	case 0:
		err = errors.New(text)
	case 1:
		err = fmt.Errorf("read %s: %w", text, checkpoint.ErrStateDamaged)
	case 2:
		err = fmt.Errorf("restore %s: %w", text, state.ErrCorrupt)
	case 3:
		err = fmt.Errorf("channel state of %s: %w", text, runtime.ErrChannelStateDamaged)
	case 4:
		cause := errors.New(text)
		if g.r.IntN(2) == 0 {
			cause = fmt.Errorf("%s: %w", text, transport.ErrPeerSilent)
		}
		err = peerError{g.text(1 + g.r.IntN(8)), cause}
	}
	if g.r.IntN(3) == 0 {
		err = operator.Permanent(err)
	}
	if g.r.IntN(2) == 0 {
		err = fmt.Errorf("worker %s: %w", g.text(1+g.r.IntN(8)), err)
	}
	return err
}

// wireLoss is a difference between what was sent and what came back.
type wireLoss struct {
	path    string // as in the value, with indexes
	generic string // as wireLeaves says it
	key     string // the field, as notCarried would list it
	what    string
}

func (d wireLoss) String() string {
	s := d.path + ": " + d.what
	if d.key != "" {
		s += fmt.Sprintf(" (if the wire leaves it out on purpose, list %s in notCarried, with the reason)", d.key)
	}
	return s
}

// wireDiff compares sent and back as the receiver uses them: times by
// Equal, errors by text (made UTF-8 and clipped to maxErrorBytes) and by
// what the driver asks of them, nil slices as empty ones.
func wireDiff(root string, sent, back any) []wireLoss {
	var out []wireLoss
	var diff func(path, generic, key string, want, got reflect.Value)
	diff = func(path, generic, key string, want, got reflect.Value) {
		lost := func(format string, args ...any) {
			out = append(out, wireLoss{path, generic, key, fmt.Sprintf(format, args...)})
		}
		t := want.Type()
		switch {
		case t == timeType:
			if w, g := want.Interface().(time.Time), got.Interface().(time.Time); !w.Equal(g) {
				lost("sent %v, received %v", w, g)
			}
		case t == errorType:
			w, _ := want.Interface().(error)
			g, _ := got.Interface().(error)
			switch {
			case w == nil && g == nil:
			case w == nil || g == nil:
				lost("sent %s, received %s", show(w), show(g))
			case g.Error() != clipTo(strings.ToValidUTF8(w.Error(), "\uFFFD"), maxErrorBytes):
				lost("sent text %s, received %s", show(w.Error()), show(g.Error()))
			case runtime.DamagedState(w) != runtime.DamagedState(g):
				lost("sent an error of damaged state: %v, received one: %v", runtime.DamagedState(w), runtime.DamagedState(g))
			case runtime.IsPermanent(w) != runtime.IsPermanent(g):
				lost("sent a permanent error: %v, received one: %v", runtime.IsPermanent(w), runtime.IsPermanent(g))
			}
		case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
			if !bytes.Equal(want.Bytes(), got.Bytes()) {
				lost("sent %s, received %s", show(want.Bytes()), show(got.Bytes()))
			}
		case t.Kind() == reflect.Struct:
			for i := range t.NumField() {
				if f := t.Field(i); f.IsExported() && notCarried[field(t, f)] == "" {
					diff(join(path, f.Name), join(generic, f.Name), field(t, f), want.Field(i), got.Field(i))
				}
			}
		case t.Kind() == reflect.Slice:
			if want.Len() != got.Len() {
				lost("sent %d elements, received %d", want.Len(), got.Len())
				return
			}
			for i := range want.Len() {
				diff(fmt.Sprintf("%s[%d]", path, i), generic+"[]", key, want.Index(i), got.Index(i))
			}
		case t.Kind() == reflect.Map:
			for it := want.MapRange(); it.Next(); {
				p := fmt.Sprintf("%s{%v}", path, it.Key())
				if g := got.MapIndex(it.Key()); g.IsValid() {
					diff(p, generic+"{}", key, it.Value(), g)
				} else {
					var keys []string
					for _, k := range got.MapKeys() {
						keys = append(keys, fmt.Sprint(k))
					}
					slices.Sort(keys)
					out = append(out, wireLoss{p, generic + "{key}", key, fmt.Sprintf("sent, not received (received %v)", keys)})
				}
			}
			if got.Len() > want.Len() {
				lost("sent %d entries, received %d", want.Len(), got.Len())
			}
		case want.Comparable():
			if !want.Equal(got) {
				lost("sent %s, received %s", show(want.Interface()), show(got.Interface()))
			}
		default:
			lost("cannot compare a %s: teach wireDiff its kind", t)
		}
	}
	diff(root, root, "", reflect.ValueOf(sent), reflect.ValueOf(back))
	return out
}

// show is v for a failure's message: quoted, and clipped.
func show(v any) string {
	const n = 60
	switch v := v.(type) {
	case nil:
		return "none"
	case error:
		return "error " + show(v.Error())
	case string:
		if len(v) > n {
			m := n
			for m > 0 && !utf8.RuneStart(v[m]) {
				m--
			}
			return fmt.Sprintf("%q…(%d bytes)", v[:m], len(v))
		}
		return strconv.Quote(v)
	case []byte:
		if len(v) > n {
			return fmt.Sprintf("%x…(%d bytes)", v[:n], len(v))
		}
		return fmt.Sprintf("%x", v)
	}
	return fmt.Sprintf("%v", v)
}
