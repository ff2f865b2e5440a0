// Package flagcheck refuses command-line flags that the other settings
// make do nothing: a forgotten or mistyped setting an operator would
// otherwise believe in ("invalid configuration fails at start").
package flagcheck

import (
	"fmt"

	"github.com/spf13/pflag"
)

// Rule says that Flags do something only when Used, and what they need
// for that (Needs, for the error).
type Rule struct {
	Flags []string // names, without the dashes
	Used  bool
	Needs string
}

// Idle returns an error naming the first flag given on the command line
// (fs's Changed: not a default, nor an environment variable's) whose rule
// is not Used.
func Idle(fs *pflag.FlagSet, rules ...Rule) error {
	for _, r := range rules {
		for _, name := range r.Flags {
			if !r.Used && fs.Changed(name) {
				return fmt.Errorf("--%s does nothing without %s: drop it, or add what it needs", name, r.Needs)
			}
		}
	}
	return nil
}
