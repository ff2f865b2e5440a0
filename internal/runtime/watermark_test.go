package runtime

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/weirstream/weir/operator"
)

// wmOp is a chained operator that records the watermarks it is given.
type wmOp struct {
	operator.Base
	name string
	log  *[]string
}

func (o *wmOp) AdvanceWatermark(wm int64) error {
	*o.log = append(*o.log, fmt.Sprintf("%s: %s", o.name, fmtTime(wm)))
	return nil
}

// wmHead is a task head that makes watermarks, as a source with a
// watermark strategy does.
type wmHead struct {
	wmOp
	wm   int64
	idle bool
}

func (h *wmHead) Watermark() (int64, bool) { return h.wm, h.idle }

// untimedOp is an operator that fires nothing by event time.
type untimedOp struct{ operator.Operator }

// logOutput records what a task broadcasts downstream.
type logOutput struct{ log *[]string }

func (o logOutput) Flush() error   { return nil }
func (o logOutput) FlushChannels() {}
func (o logOutput) Err() error     { return nil }
func (o logOutput) Broadcast(e Event) error {
	s := e.String()
	if e.Kind == KindWatermark {
		s = "watermark " + fmtTime(e.Time)
	}
	*o.log = append(*o.log, "downstream: "+s)
	return nil
}
func (o logOutput) Overtake(e Event) error     { return o.Broadcast(e) }
func (o logOutput) Congested() <-chan struct{} { return nil }

func fmtTime(t int64) string {
	switch t {
	case operator.MinTime:
		return "min"
	case operator.MaxTime:
		return "max"
	}
	return fmt.Sprint(t)
}

// TestWatermarkScripts runs the scripts in testdata/watermark: how a task
// with input channels, or a head that makes watermarks, moves its
// watermark, tells its operators in chain order and downstream after
// them, and goes idle and active again.
func TestWatermarkScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/watermark", func(t *testing.T, path string) {
		var tk *task
		var head *wmHead
		var log []string
		var now time.Time
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var err error
			switch d.Cmd {
			case "task":
				// task inputs=N: a task with N input channels and two
				// chained operators; task inputs=N untimed: one whose
				// operator fires nothing by event time (a map); task
				// source: one whose head makes watermarks, at most one per
				// interval=ms.
				var inputs, interval int
				d.MaybeScanArgs(t, "inputs", &inputs)
				d.MaybeScanArgs(t, "interval", &interval)
				log, now = nil, time.UnixMilli(0)
				tk = &task{outputs: []Output{logOutput{&log}}, now: func() time.Time { return now }, wmInterval: time.Duration(interval) * time.Millisecond}
				first := &wmOp{name: "op1", log: &log}
				if d.HasArg("source") {
					head = &wmHead{wmOp: wmOp{name: "source", log: &log}, wm: operator.MinTime}
					tk.ops = []operator.Operator{head, first}
				} else {
					tk.ops = []operator.Operator{first, &wmOp{name: "op2", log: &log}}
					if d.HasArg("untimed") {
						tk.ops = []operator.Operator{untimedOp{}}
					}
					tk.gate = NewGate()
					for range inputs {
						tk.gate.Add(NewLocalChannel(1, tk.gate.Ready()))
					}
				}
				// What run does before reading: open and find the roles.
				tk.wm = operator.MinTime
				for _, op := range tk.ops {
					if et, ok := op.(operator.EventTimed); ok {
						tk.eventTimed = append(tk.eventTimed, et)
					}
				}
				tk.wmSource, _ = tk.ops[0].(operator.WatermarkSource)
				if tk.gate != nil {
					tk.chanWM, tk.chanIdle = make([]int64, inputs), make([]bool, inputs)
					for i := range tk.chanWM {
						tk.chanWM[i] = operator.MinTime
					}
				}
				return "ok\n"
			case "watermark", "idle":
				// watermark ch=C t=T | idle ch=C: an event on a channel.
				var ch int
				d.ScanArgs(t, "ch", &ch)
				ev := Event{Kind: KindIdle}
				if d.Cmd == "watermark" {
					ev.Kind = KindWatermark
					d.ScanArgs(t, "t", &ev.Time)
				}
				err = tk.handle(t.Context(), ch, ev)
			case "head":
				// head t=T [idle] at=ms: the head's watermark at clock ms.
				var at int64
				head.idle = d.HasArg("idle")
				d.MaybeScanArgs(t, "t", &head.wm)
				d.MaybeScanArgs(t, "at", &at)
				now = time.UnixMilli(at)
				err = tk.advance()
			default:
				t.Fatalf("unknown command %q", d.Cmd)
			}
			if err != nil {
				return "error: " + err.Error() + "\n"
			}
			out := strings.Join(log, "\n")
			log = nil
			if out == "" {
				return "(nothing)\n"
			}
			return out + "\n"
		})
	})
}
