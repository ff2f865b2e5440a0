// Package cluster runs Weir on many machines: a coordinator process and
// worker processes of the same job binary. This file and members.go are
// the membership: which workers are alive with how many slots; the
// coordinator's and workers' drivers run it over the control plane
// (Connect RPC on mutual TLS, see clusterpb).
package cluster

import (
	"fmt"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/runtime"
)

// Graph identifies the job graph a process built from its own code: every
// process of a cluster must build the same one, since operators are
// matched by UID and closures never cross the wire.
type Graph struct {
	Job string
	// Version is the build of the binary.
	Version   string
	Operators []checkpoint.Operator
}

// GraphOf is the graph of the job spec describes, built by this binary.
func GraphOf(spec runtime.Spec) Graph {
	return Graph{Job: spec.Name, Version: buildVersion(), Operators: spec.Plan.Graph.Operators()}
}

// buildVersion names this binary's build: its module version, and its VCS
// revision when it was built from a checkout.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v += " " + s.Value
		case "vcs.modified":
			if s.Value == "true" {
				v += " (modified)"
			}
		}
	}
	return v
}

// Diff says how other differs from g, one difference a line; nil when
// they are the same.
func (g Graph) Diff(other Graph) []string {
	var d []string
	if g.Job != other.Job {
		d = append(d, fmt.Sprintf("job %q, not %q", clip(other.Job), g.Job))
	}
	if g.Version != other.Version {
		d = append(d, fmt.Sprintf("version %q, not %q", clip(other.Version), g.Version))
	}
	mine := map[string]checkpoint.Operator{}
	for _, op := range g.Operators {
		mine[op.UID] = op
	}
	theirs := map[string]bool{}
	for _, op := range other.Operators {
		theirs[op.UID] = true
		m, ok := mine[op.UID]
		switch {
		case !ok:
			d = append(d, fmt.Sprintf("operator %q, which this job lacks", clip(op.UID)))
		case m.Kind != op.Kind:
			d = append(d, fmt.Sprintf("operator %q is a %s, not a %s", op.UID, clip(op.Kind), m.Kind))
		case m.MaxParallelism != op.MaxParallelism:
			d = append(d, fmt.Sprintf("operator %q has max parallelism %d, not %d", op.UID, op.MaxParallelism, m.MaxParallelism))
		}
	}
	for _, op := range g.Operators {
		if !theirs[op.UID] {
			d = append(d, fmt.Sprintf("no operator %q", op.UID))
		}
	}
	slices.Sort(d)
	return d
}

func (g Graph) String() string {
	return fmt.Sprintf("job %q version %q (%d operators)", g.Job, g.Version, len(g.Operators))
}

func diffError(name string, d []string) error {
	const maxDiffs = 8 // a peer's graph may be of any size
	more := ""
	if len(d) > maxDiffs {
		more = fmt.Sprintf("; and %d more differences", len(d)-maxDiffs)
		d = d[:maxDiffs]
	}
	return fmt.Errorf("%w: worker %q built another job graph: it has %s%s; run the same job binary, with the same arguments, everywhere",
		ErrOtherGraph, clip(name), strings.Join(d, "; "), more)
}

func graphToProto(g Graph) *clusterpb.Graph {
	p := &clusterpb.Graph{Job: g.Job, Version: g.Version}
	for _, op := range g.Operators {
		p.Operators = append(p.Operators, &clusterpb.Operator{Uid: op.UID, Kind: op.Kind, MaxParallelism: int32(op.MaxParallelism)})
	}
	return p
}

func graphFromProto(p *clusterpb.Graph) Graph {
	g := Graph{Job: p.GetJob(), Version: p.GetVersion()}
	for _, op := range p.GetOperators() {
		g.Operators = append(g.Operators, checkpoint.Operator{UID: op.GetUid(), Kind: op.GetKind(), MaxParallelism: int(op.GetMaxParallelism())})
	}
	return g
}
