package weir

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/operator"
)

// scripted interprets a record's Cmd: "ev:T" registers an event-time
// timer at T, "del:T" deletes it, "pt:T"/"delpt:T" the same in processing
// time, "set:V" sets value state, "madd:K=V" puts map state. onTimer, if
// set, runs in OnTimer after the firing is emitted.
type scripted struct {
	v       *ValueState[string, string]
	m       *MapState[string, string, string]
	l       *ListState[string, string]
	open    func(c *KeyedContext[string]) error
	onTimer func(s *scripted, c *KeyedContext[string], at int64, out Collector[string]) error
}

func (s *scripted) Open(c *KeyedContext[string]) (err error) {
	if s.v, err = NewValueState[string, string](c, "v"); err != nil {
		return err
	}
	if s.m, err = NewMapState[string, string, string](c, "m"); err != nil {
		return err
	}
	if s.l, err = NewListState[string, string](c, "l"); err != nil {
		return err
	}
	if s.open != nil {
		return s.open(c)
	}
	return nil
}

func (s *scripted) Process(c *KeyedContext[string], r kr, out Collector[string]) error {
	for _, cmd := range strings.Split(r.Cmd, ";") {
		op, arg, _ := strings.Cut(cmd, ":")
		n, _ := strconv.ParseInt(arg, 10, 64)
		switch op {
		case "ev":
			c.RegisterEventTimer(time.UnixMilli(n))
		case "del":
			c.DeleteEventTimer(time.UnixMilli(n))
		case "pt":
			c.RegisterTimer(time.UnixMilli(n))
		case "delpt":
			c.DeleteTimer(time.UnixMilli(n))
		case "set":
			s.v.Update(arg)
		case "get":
			v, ok := s.v.Value()
			out.Collect(fmt.Sprintf("get %s %q %v", c.Key(), v, ok))
		case "madd":
			k, v, _ := strings.Cut(arg, "=")
			s.m.Put(k, v)
		case "ladd":
			s.l.Add(arg)
		case "dump":
			var es []string
			for k, v := range s.m.All() {
				es = append(es, k+"="+v)
			}
			slices.Sort(es)
			out.Collect(fmt.Sprintf("map %s %v list %v", c.Key(), es, s.l.Get()))
		case "":
		default:
			return fmt.Errorf("bad cmd %q", cmd)
		}
	}
	return nil
}

func (s *scripted) OnTimer(c *KeyedContext[string], at time.Time, out Collector[string]) error {
	out.Collect(fmt.Sprintf("fire %s %s %d", c.TimeDomain(), c.Key(), at.UnixMilli()))
	if s.onTimer != nil {
		return s.onTimer(s, c, at.UnixMilli(), out)
	}
	return nil
}

func wantOut(t *testing.T, h *kh, want ...string) {
	t.Helper()
	got := slices.Clone(h.out)
	if !slices.Equal(got, want) {
		t.Fatalf("output:\n got  %q\n want %q", got, want)
	}
}

// Re-registering the firing timer's own instant inside OnTimer fires it
// again in the same advance, once.
func TestReviewKPFReRegisterSameInstant(t *testing.T) {
	onBoth(t, func(t *testing.T, pebble bool) {
		h := newKH(t, pebble, func() KeyedProcessFunction[string, kr, string] {
			return &scripted{onTimer: func(s *scripted, c *KeyedContext[string], at int64, out Collector[string]) error {
				if _, ok := s.v.Value(); !ok {
					s.v.Update("again")
					c.RegisterEventTimer(time.UnixMilli(at))
					c.RegisterEventTimer(time.UnixMilli(at - 5))
				}
				return nil
			}}
		})
		must(t, h.open(2))
		must(t, h.record(1, "a", "ev:10"))
		must(t, h.watermark(10))
		wantOut(t, h, "fire event time a 10", "fire event time a 5", "fire event time a 10")
	})
}

// Deleting, inside OnTimer, a later timer of the key that is also due at
// this watermark cancels it.
func TestReviewKPFDeleteLaterDueInOnTimer(t *testing.T) {
	onBoth(t, func(t *testing.T, pebble bool) {
		h := newKH(t, pebble, func() KeyedProcessFunction[string, kr, string] {
			return &scripted{onTimer: func(s *scripted, c *KeyedContext[string], at int64, out Collector[string]) error {
				if at == 10 {
					c.DeleteEventTimer(time.UnixMilli(20))
					c.DeleteEventTimer(time.UnixMilli(10)) // the one firing: no-op
				}
				return nil
			}}
		})
		must(t, h.open(1))
		must(t, h.record(1, "a", "ev:20;ev:10;ev:30"))
		must(t, h.watermark(25))
		must(t, h.watermark(40))
		wantOut(t, h, "fire event time a 10", "fire event time a 30")
	})
}

// Delete then register again (two queue entries), and a timer
// re-registered in OnTimer: fires exactly as registered.
func TestReviewKPFDeleteReRegisterDup(t *testing.T) {
	onBoth(t, func(t *testing.T, pebble bool) {
		h := newKH(t, pebble, func() KeyedProcessFunction[string, kr, string] { return &scripted{} })
		must(t, h.open(1))
		must(t, h.record(1, "a", "ev:10;del:10;ev:10;del:10;ev:10"))
		must(t, h.checkpoint())
		must(t, h.watermark(10))
		must(t, h.restore(1))
		must(t, h.watermark(10))
		wantOut(t, h, "fire event time a 10", "fire event time a 10")
	})
}

// TestReviewKPFTimerInOpen: a timer registered in Open has no current key
// (Flink throws "No key set"). It was registered for the zero key, in
// whatever key group was current, and fired on every subtask (an outside
// review, session 33); now the job is refused.
func TestReviewKPFTimerInOpen(t *testing.T) {
	onBoth(t, func(t *testing.T, pebble bool) {
		h := newKH(t, pebble, func() KeyedProcessFunction[string, kr, string] {
			return &scripted{open: func(c *KeyedContext[string]) error {
				c.RegisterEventTimer(time.UnixMilli(10))
				return nil
			}}
		})
		if err := h.open(2); err == nil || !operator.IsPermanent(err) || !strings.Contains(err.Error(), "in Open, where there is no current key") {
			t.Fatalf("registering a timer in Open: %v, want the job refused, saying there is no current key", err)
		}
	})
}

// TestReviewKPFStateInOpen: keyed state written in Open, with no current
// key, is refused as a timer is.
func TestReviewKPFStateInOpen(t *testing.T) {
	onBoth(t, func(t *testing.T, pebble bool) {
		h := newKH(t, pebble, func() KeyedProcessFunction[string, kr, string] {
			return &scripted{open: func(c *KeyedContext[string]) error {
				v, err := NewValueState[string, string](c, "v2")
				if err != nil {
					return err
				}
				v.Update("from open")
				return nil
			}}
		})
		if err := h.open(2); err == nil || !operator.IsPermanent(err) || !strings.Contains(err.Error(), "in Open, where there is no current key") {
			t.Fatalf("writing keyed state in Open: %v, want the job refused, saying there is no current key", err)
		}
	})
}
