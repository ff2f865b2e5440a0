package checkpoint

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var testOperators = []Operator{{UID: "op", Kind: "source", MaxParallelism: 128}}

func parseTask(t testing.TB, s string) TaskID {
	v, n, ok := strings.Cut(s, "#")
	i, err := strconv.Atoi(n)
	if !ok || err != nil {
		t.Fatalf("task %q: want vertex#subtask", s)
	}
	return TaskID{Vertex: v, Subtask: i}
}

func parseTasks(t testing.TB, s string) []TaskID {
	var out []TaskID
	for _, f := range strings.Split(s, ",") {
		out = append(out, parseTask(t, f))
	}
	return out
}

// TestCoordinatorScripts runs the scripts in testdata/coordinator: each
// command feeds the coordinator one event and prints the actions it decided.
func TestCoordinatorScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/coordinator", func(t *testing.T, path string) {
		var c *Coordinator
		at := func(d *datadriven.TestData) time.Time {
			var ms int
			d.ScanArgs(t, "t", &ms)
			return t0.Add(time.Duration(ms) * time.Millisecond)
		}
		// maybeAt is at, or t0 for a command that does not say.
		maybeAt := func(d *datadriven.TestData) time.Time {
			if d.HasArg("t") {
				return at(d)
			}
			return t0
		}
		taskArg := func(d *datadriven.TestData) TaskID {
			var s string
			d.ScanArgs(t, "task", &s)
			return parseTask(t, s)
		}
		idArg := func(d *datadriven.TestData) ID {
			var id uint64
			d.ScanArgs(t, "id", &id)
			return ID(id)
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var b strings.Builder
			switch d.Cmd {
			case "new":
				var cfg Config
				dur := func(key string, dst *time.Duration) {
					var s string
					if d.MaybeScanArgs(t, key, &s) {
						v, err := time.ParseDuration(s)
						if err != nil {
							t.Fatal(err)
						}
						*dst = v
					}
				}
				dur("interval", &cfg.Interval)
				dur("timeout", &cfg.Timeout)
				dur("min-pause", &cfg.MinPause)
				d.MaybeScanArgs(t, "max-concurrent", &cfg.MaxConcurrent)
				d.MaybeScanArgs(t, "tolerable", &cfg.TolerableFailures)
				d.MaybeScanArgs(t, "retained", &cfg.Retained)
				cfg.RetainOnCancel = d.HasArg("retain-on-cancel")
				tasks := Tasks{All: parseTasks(t, "src#0,src#1,sink#0"), Sources: parseTasks(t, "src#0,src#1")}
				var s string
				if d.MaybeScanArgs(t, "tasks", &s) {
					tasks.All = parseTasks(t, s)
				}
				if d.MaybeScanArgs(t, "sources", &s) {
					tasks.Sources = parseTasks(t, s)
				}
				var r Restored
				var maxID uint64
				if d.MaybeScanArgs(t, "restored-max", &maxID) {
					r.MaxID = ID(maxID)
				}
				if d.MaybeScanArgs(t, "damaged", &s) {
					for _, f := range strings.Split(s, ",") {
						n, err := strconv.ParseUint(f, 10, 64)
						if err != nil {
							t.Fatal(err)
						}
						r.Damaged = append(r.Damaged, ID(n))
					}
				}
				if d.MaybeScanArgs(t, "restored", &s) {
					for _, f := range strings.Split(s, ",") {
						sp := strings.HasSuffix(f, "sp")
						n, err := strconv.ParseUint(strings.TrimSuffix(f, "sp"), 10, 64)
						if err != nil {
							t.Fatal(err)
						}
						r.Completed = append(r.Completed, Completed{ID: ID(n), Savepoint: sp})
					}
				}
				var err error
				c, err = New(Job{Name: "job", Tasks: tasks, Operators: testOperators}, cfg, r)
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				return "ok\n"
			case "start":
				c.Start(at(d))
			case "tick":
				c.Tick(at(d))
			case "ack":
				fmt.Fprintf(&b, "ack: %v\n", c.Acknowledge(maybeAt(d), taskArg(d), idArg(d), []Handle{{Operator: "op", Parallelism: 1, Inline: []byte("s")}}))
			case "decline":
				var cause error = errors.New("snapshot failed")
				if d.HasArg("subsumed") {
					cause = ErrSubsumedAtTask
				}
				c.Decline(taskArg(d), idArg(d), cause)
			case "trigger-failed":
				c.TriggerFailed(idArg(d), errors.New("disk full"))
			case "persisted":
				var err error
				var s string
				if d.MaybeScanArgs(t, "err", &s) {
					err = errors.New(s)
				}
				c.Persisted(at(d), idArg(d), err)
			case "task-failed":
				c.TaskFailed(taskArg(d), errors.New("boom"))
			case "task-finished":
				c.TaskFinished(taskArg(d))
			case "exhausted":
				c.InputExhausted(at(d), taskArg(d))
			case "savepoint":
				id, err := c.TriggerSavepoint(at(d))
				if err != nil {
					fmt.Fprintf(&b, "error: %v\n", err)
				} else {
					fmt.Fprintf(&b, "savepoint: %d\n", id)
				}
			case "cancel":
				c.Cancel()
			case "state":
				l, _ := c.Latest()
				fmt.Fprintf(&b, "pending=%v latest=%d retained=%v failures=%d last-id=%d\n",
					c.PendingIDs(), l.ID, c.Retained(), c.ConsecutiveFailures(), c.LastID())
				return b.String()
			case "pending":
				for _, p := range c.Pending() {
					fmt.Fprintf(&b, "%d savepoint=%v triggered=%s persisting=%v acked=%d/%d\n", p.ID, p.Savepoint, p.Triggered.Sub(t0), p.Persisting, p.Acknowledged(), len(p.Tasks))
					for _, pt := range p.Tasks {
						if pt.Acknowledged {
							fmt.Fprintf(&b, "  %s acked at %s\n", pt.Task, pt.At.Sub(t0))
						} else {
							fmt.Fprintf(&b, "  %s waiting\n", pt.Task)
						}
					}
				}
				if b.Len() == 0 {
					return "(none)\n"
				}
				return b.String()
			default:
				t.Fatalf("unknown command %q", d.Cmd)
			}
			for _, a := range c.Ready() {
				fmt.Fprintf(&b, "%v\n", a)
			}
			if b.Len() == 0 {
				return "(nothing)\n"
			}
			return b.String()
		})
	})
}
