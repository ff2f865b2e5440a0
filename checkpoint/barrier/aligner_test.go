package barrier

import (
	"fmt"
	"strings"
	"testing"

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
				m := map[string]Mode{"exactly-once": ExactlyOnce, "at-least-once": AtLeastOnce}[mode]
				a = New(m, n)
				return "ok\n"
			case "barrier":
				d.ScanArgs(t, "ch", &ch)
				d.ScanArgs(t, "id", &id)
				acts = a.OnBarrier(ch, checkpoint.ID(id))
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
			fmt.Fprintf(&b, "blocked=%v aligning=%v\n", blocked, a.Aligning())
			return b.String()
		})
	})
}
