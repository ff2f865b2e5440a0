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

// TestClockRestoresASubtaskWithoutEventTime: a subtask that had read no
// record by a checkpoint resumes without event time, at the same
// parallelism and at another (the least of the old subtasks' is then none).
// Before, it resumed at the least of the others' (here subtask 0's 1000
// ms), and its records were late (found by an outside review, session
// 39). A subtask snapshotted again before its first record after a
// restore keeps what it restored.
func TestClockRestoresASubtaskWithoutEventTime(t *testing.T) {
	wmOf := func(ms int64) int64 { return ms - 1 }
	// snapshot takes a checkpoint of subtask sub of p, restored from r,
	// having read a record at ms (none if MinTime).
	snapshot := func(w *operatortest.MemWriter, sub, p int, r *operator.Restore, ms int64) []checkpoint.Handle {
		t.Helper()
		c := newClock(wmOf, 0)
		oc := (&operatortest.Run{}).Context("src", sub, p, r)
		if err := c.open(oc); err != nil {
			t.Fatal(err)
		}
		if ms != operator.MinTime {
			c.observe(ms)
		}
		hs, err := c.snapshot(oc)(w)
		if err != nil {
			t.Fatal(err)
		}
		return hs
	}
	w := &operatortest.MemWriter{}
	first := &operator.Restore{Checkpoint: 1, Handles: append(snapshot(w, 0, 2, nil, 1000), snapshot(w, 1, 2, nil, operator.MinTime)...), Read: w.Read}
	// Both subtasks restored, and snapshotted again before a record.
	second := &operator.Restore{Checkpoint: 2, Handles: append(snapshot(w, 0, 2, first, operator.MinTime), snapshot(w, 1, 2, first, operator.MinTime)...), Read: w.Read}
	for _, r := range []*operator.Restore{first, second} {
		for _, tc := range []struct {
			sub, p int
			want   int64
		}{
			{0, 2, 999}, {1, 2, operator.MinTime}, // their own
			{0, 3, operator.MinTime}, {2, 3, operator.MinTime}, {0, 1, operator.MinTime}, // rescaled: the least, none
		} {
			c := newClock(wmOf, 0)
			if err := c.open((&operatortest.Run{}).Context("src", tc.sub, tc.p, r)); err != nil {
				t.Fatal(err)
			}
			c.observe(operator.MinTime + 1)
			if wm, idle := c.Watermark(); wm != tc.want || idle {
				t.Errorf("checkpoint %d: subtask %d of %d restored watermark %d (idle %v), want %d", r.Checkpoint, tc.sub, tc.p, wm, idle, tc.want)
			}
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
