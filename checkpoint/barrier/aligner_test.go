package barrier

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/weirstream/weir/checkpoint"
)

// TestAlignerScripts runs the scripts in testdata/aligner: each command feeds
// the aligner one event and prints its actions.
func TestAlignerScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/aligner", func(t *testing.T, path string) {
		var a *Aligner
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var ch int
			var id uint64
			var acts []Action
			switch d.Cmd {
			case "new":
				var mode string
				var n int
				d.ScanArgs(t, "mode", &mode)
				d.ScanArgs(t, "channels", &n)
				m := map[string]Mode{"exactly-once": ExactlyOnce, "at-least-once": AtLeastOnce, "unaligned": Unaligned}[mode]
				var opts []Option
				if d.HasArg("timeout-ms") {
					var ms int
					d.ScanArgs(t, "timeout-ms", &ms)
					opts = append(opts, AlignedTimeout(time.Duration(ms)*time.Millisecond))
				}
				a = New(m, n, opts...)
				return "ok\n"
			case "barrier":
				d.ScanArgs(t, "ch", &ch)
				d.ScanArgs(t, "id", &id)
				if d.HasArg("savepoint") {
					acts = a.OnAlignedBarrier(ch, checkpoint.ID(id))
				} else {
					acts = a.OnBarrier(ch, checkpoint.ID(id))
				}
			case "tick":
				var ms int
				d.ScanArgs(t, "ms", &ms)
				acts = a.Tick(time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond))
			case "cancel":
				d.ScanArgs(t, "ch", &ch)
				d.ScanArgs(t, "id", &id)
				acts = a.OnCancel(ch, checkpoint.ID(id))
			case "abort":
				d.ScanArgs(t, "id", &id)
				acts = a.Abort(checkpoint.ID(id))
			default:
				t.Fatalf("unknown command %q", d.Cmd)
			}
			var b strings.Builder
			for _, x := range acts {
				fmt.Fprintf(&b, "%v\n", x)
			}
			var blocked []int
			for c := range a.blocked {
				if a.Blocked(c) {
					blocked = append(blocked, c)
				}
			}
			fmt.Fprintf(&b, "blocked=%v aligning=%v", blocked, a.Aligning())
			if p := a.Persisting(); len(p) > 0 {
				fmt.Fprintf(&b, " persisting=%v", p)
			}
			b.WriteString("\n")
			return b.String()
		})
	})
}
