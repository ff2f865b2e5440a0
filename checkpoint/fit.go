package checkpoint

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrMismatch marks a checkpoint that does not fit the job restoring it;
// Fit's errors wrap it.
var ErrMismatch = errors.New("the checkpoint does not fit this job")

// Fit says how checkpoint m maps onto a job.
type Fit struct {
	// Fresh lists the job's operators that have no state in the
	// checkpoint: they start fresh.
	Fresh []string
	// Dropped lists the operators of the checkpoint with state that no
	// operator of the job claims; their state is left behind (only with
	// allowNonRestored).
	Dropped []string
}

// Fit checks, before anything is restored, that checkpoint m can be restored
// into the job named job with operators ops: the same job; every operator
// with state in m claimed by an operator of the job (matched by UID) of the
// same kind; keyed state under the same max parallelism. With
// allowNonRestored, state no operator claims is dropped instead of refused.
// The error names every difference and how to resolve it, and wraps
// ErrMismatch.
func (m *Metadata) Fit(job string, ops []Operator, allowNonRestored bool) (Fit, error) {
	var fit Fit
	if m.Job != job {
		return fit, fmt.Errorf("%w: checkpoint %d belongs to job %q, not %q: restore a checkpoint of this job", ErrMismatch, m.ID, m.Job, job)
	}
	withState := map[string]bool{}
	keyed := map[string]bool{}
	for _, t := range m.Tasks {
		for _, h := range t.Handles {
			withState[h.Operator] = true
			if h.Kind == KindKeyed {
				keyed[h.Operator] = true
			}
		}
	}
	old := make(map[string]Operator, len(m.Operators))
	for _, op := range m.Operators {
		old[op.UID] = op
	}
	var problems []string
	claimed := map[string]bool{}
	for _, op := range ops {
		was, ok := old[op.UID]
		if !ok || !withState[op.UID] {
			fit.Fresh = append(fit.Fresh, op.UID)
			continue
		}
		claimed[op.UID] = true
		if was.Kind != op.Kind {
			problems = append(problems, fmt.Sprintf("operator %q is a %s in the checkpoint but a %s in this job: its state cannot be read; give the new operator another UID (weir.UID)",
				op.UID, was.Kind, op.Kind))
			continue
		}
		if keyed[op.UID] && was.MaxParallelism != op.MaxParallelism {
			problems = append(problems, fmt.Sprintf("operator %q: the checkpoint's keyed state is split into max parallelism %d key groups, this job has max parallelism %d: set it back to %d",
				op.UID, was.MaxParallelism, op.MaxParallelism, was.MaxParallelism))
		}
	}
	for _, op := range m.Operators {
		if withState[op.UID] && !claimed[op.UID] && !slices.ContainsFunc(ops, func(o Operator) bool { return o.UID == op.UID }) {
			fit.Dropped = append(fit.Dropped, fmt.Sprintf("%q (%s)", op.UID, op.Kind))
		}
	}
	if len(fit.Dropped) > 0 && !allowNonRestored {
		problems = append(problems, fmt.Sprintf("no operator of this job claims the state of %s: operators are matched by UID (by default the name), so pin a renamed operator's old UID with weir.UID, or allow the restore to drop that state (--allow-non-restored-state, Config.AllowNonRestoredState)",
			strings.Join(fit.Dropped, ", ")))
	}
	if len(problems) > 0 {
		return fit, fmt.Errorf("%w: checkpoint %d of job %q: %s", ErrMismatch, m.ID, m.Job, strings.Join(problems, "; "))
	}
	return fit, nil
}
