package weir

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
)

// TestClockRestoresPerSubtask: a source without splits keeps its event
// time per subtask. Restored at the same parallelism, each subtask resumes
// its own watermark (not the greatest of all, which would make its
// slower records late); at another parallelism, the least of all.
func TestClockRestoresPerSubtask(t *testing.T) {
	wmOf := func(ms int64) int64 { return ms - 1 }
	w := &operatortest.MemWriter{}
	var handles []checkpoint.Handle
	for sub, max := range []int64{1000, 5000} {
		c := newClock(wmOf, 0)
		oc := (&operatortest.Run{}).Context("src", sub, 2, nil)
		if err := c.open(oc); err != nil {
			t.Fatal(err)
		}
		c.observe(max)
		hs, err := c.snapshot(oc)(w)
		if err != nil {
			t.Fatal(err)
		}
		handles = append(handles, hs...)
	}
	r := &operator.Restore{Checkpoint: 1, Handles: handles, Read: w.Read}
	for _, tc := range []struct {
		sub, p int
		want   int64
	}{
		{0, 2, 999}, {1, 2, 4999}, // their own
		{0, 3, 999}, {2, 3, 999}, {0, 1, 999}, // rescaled: the least
	} {
		c := newClock(wmOf, 0)
		if err := c.open((&operatortest.Run{}).Context("src", tc.sub, tc.p, r)); err != nil {
			t.Fatal(err)
		}
		c.observe(operator.MinTime + 1) // reading resumes: an old record moves nothing
		if wm, idle := c.Watermark(); wm != tc.want || idle {
			t.Errorf("subtask %d of %d restored watermark %d (idle %v), want %d", tc.sub, tc.p, wm, idle, tc.want)
		}
	}
}

// TestClockScripts runs the scripts in testdata/clock: a source's
// watermark from its splits' event times, with idleness and finished
// splits.
func TestClockScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/clock", func(t *testing.T, path string) {
		var c *clock
		var now int64
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "clock":
				// clock [idle=ms]: monotonous event time (watermark = the
				// greatest time − 1 ms) and an idle timeout.
				var idle int
				d.MaybeScanArgs(t, "idle", &idle)
				c = newClock(func(ms int64) int64 { return ms - 1 }, time.Duration(idle)*time.Millisecond)
				now = 0
				oc := (&operatortest.Run{}).Context("src", 0, 1, nil)
				oc.Now = func() time.Time { return time.UnixMilli(now) }
				if err := c.open(oc); err != nil {
					t.Fatal(err)
				}
			case "read":
				// read at=ms: records, one a line: split time.
				d.ScanArgs(t, "at", &now)
				for _, l := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					var split string
					var ts int64
					if _, err := fmt.Sscan(l, &split, &ts); err != nil {
						t.Fatalf("record %q: %v", l, err)
					}
					c.enterSplit(split)
					c.observe(ts)
				}
			case "enter":
				var split string
				d.ScanArgs(t, "split", &split)
				c.enterSplit(split)
			case "finish":
				var split string
				d.ScanArgs(t, "split", &split)
				c.finishSplit(split)
			case "watermark":
				d.ScanArgs(t, "at", &now)
				wm, idle := c.Watermark()
				if idle {
					return "idle\n"
				}
				if wm == operator.MinTime {
					return "min\n"
				}
				return fmt.Sprintln(wm)
			default:
				t.Fatalf("unknown command %q", d.Cmd)
			}
			return "ok\n"
		})
	})
}
