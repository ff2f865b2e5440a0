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

// Serving is the rules of the web UI's and high availability's flags,
// which every job command with them shares: web is --web's value, ha
// --ha's; coordinator, whether --advertise is a coordinator's (which only
// HA uses).
func Serving(web, ha string, coordinator bool) []Rule {
	rules := []Rule{
		{Flags: []string{"web-token", "web-linger"}, Used: web != "", Needs: "--web"},
		{Flags: []string{"ha-ttl", "ha-cacert", "ha-cert", "ha-key"}, Used: ha != "", Needs: "--ha"},
	}
	if coordinator {
		rules = append(rules, Rule{Flags: []string{"advertise"}, Used: ha != "",
			Needs: "--ha (workers reach a coordinator without HA at its --join address)"})
	}
	return rules
}
