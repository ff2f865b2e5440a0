package weir

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/graph"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/storage"
)

// Rewinder is implemented by a SourceReader that a verification rerun
// (Environment.Verify, weir verify) can read again: opened with
// operator.Context.Rewind, it reads its input from the start up to the
// position ctx.Restore records, at any parallelism, and then ends.
type Rewinder interface {
	// Rewindable says why the reader, as configured, cannot read its
	// input again (nil: it can).
	Rewindable() error
}

// VerifiedSink is implemented by a SinkWriter whose committed output a
// verification rerun can read back and compare with its own.
type VerifiedSink[T any] interface {
	// Records calls f with what v becomes in the sink's committed output,
	// record by record (a line of a file, a row), as Committed yields it.
	Records(v T, f func(rec []byte))
	// Committed calls f with every record the sink has committed up to
	// checkpoint ctx.Restore.Checkpoint, counting those of the
	// transactions that checkpoint records and that are still pending (a
	// restore commits them), and none after it. ctx is that of subtask 0
	// of 1: ctx.Restore holds the state every subtask of the sink wrote.
	// It must change nothing.
	Committed(ctx *operator.Context, f func(rec []byte)) error
}

// Verifiable is implemented by a SinkWriter that, as configured, may
// refuse verification: Verifiable says why, or nil.
type Verifiable interface {
	Verifiable() error
}

// KeyedRecords is implemented by a VerifiedSink whose records have keys
// (a Kafka record's): when VerifyConfig.Key is nil, Verify pairs a missing
// record with an unexpected one of the same key as a changed record.
type KeyedRecords interface {
	RecordKey(rec []byte) string
}

// NonDeterministic marks an operator whose output a rerun over the same
// input need not reproduce (it reads the clock, draws random numbers,
// calls a service): Verify refuses the job instead of reporting a false
// difference.
func NonDeterministic() Option { return func(n *node) { n.nondeterministic = true } }

// verifyPart is a source's or a sink's part in Verify.
type verifyPart struct {
	// check says why the node cannot be verified, nil if it can.
	check func() error
	// committed reads a sink's committed output (VerifiedSink.Committed).
	committed func(ctx *operator.Context, f func(rec []byte)) error
	// keyed is a sink's writer if its records have keys, else nil.
	keyed func() KeyedRecords
}

// VerifyConfig configures Environment.Verify.
type VerifyConfig struct {
	// Key, if set, is a committed record's key: a record the rerun made and
	// the sink lacks, and one the sink holds and the rerun did not make,
	// with the same key, are reported as one changed record. Unset, a
	// sink's own (KeyedRecords) serves.
	Key func(sink string, rec []byte) string
	// Progress, if set, is called about once a second during the rerun
	// with the records its sources have read so far.
	Progress func(read int64)
}

// VerifyReport is what Verify found, per sink.
type VerifyReport struct {
	// Checkpoint is the completed checkpoint whose consumed input was
	// rerun.
	Checkpoint checkpoint.ID
	// Read is the records the rerun's sources read.
	Read  int64
	Sinks []SinkVerdict
}

// SinkVerdict compares one sink's committed output with the rerun's, as
// multisets of records.
type SinkVerdict struct {
	Sink                string
	Rerun, Committed    int64 // records
	Missing, Duplicated []RecordCount
	Unexpected          []RecordCount
	Changed             []ChangedRecord
}

// RecordCount is a record and how many times it is missing (made by the
// rerun more often than committed), duplicated (committed more often than
// the rerun made it) or unexpected (committed, never made by the rerun).
type RecordCount struct {
	Record string
	Times  int64
}

// ChangedRecord is a committed record with no match in the rerun, paired
// by key with a rerun record that has none in the committed output.
type ChangedRecord struct {
	Key, Committed, Rerun string
}

// OK reports whether every sink's committed output equals the rerun's.
func (v SinkVerdict) OK() bool {
	return len(v.Missing)+len(v.Duplicated)+len(v.Unexpected)+len(v.Changed) == 0
}

// OK reports whether every sink's committed output equals the rerun's.
func (r VerifyReport) OK() bool {
	for _, v := range r.Sinks {
		if !v.OK() {
			return false
		}
	}
	return true
}

// maxListed bounds the records of each kind String lists per sink.
const maxListed = 20

// String is the report for people: a summary per sink, and the first
// records of each kind of difference.
func (r VerifyReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "checkpoint %d: the rerun read %d records\n", r.Checkpoint, r.Read)
	for _, v := range r.Sinks {
		if v.OK() {
			fmt.Fprintf(&b, "sink %s: match: %d records committed, as the rerun made them\n", v.Sink, v.Committed)
			continue
		}
		fmt.Fprintf(&b, "sink %s: MISMATCH: %d records committed, the rerun made %d: %d changed, %d missing, %d duplicated, %d unexpected\n",
			v.Sink, v.Committed, v.Rerun, len(v.Changed), len(v.Missing), len(v.Duplicated), len(v.Unexpected))
		for i, c := range v.Changed[:min(maxListed, len(v.Changed))] {
			fmt.Fprintf(&b, "  changed, key %q: committed %q, the rerun made %q\n", c.Key, c.Committed, c.Rerun)
			if i == maxListed-1 && len(v.Changed) > maxListed {
				fmt.Fprintf(&b, "  … and %d more changed\n", len(v.Changed)-maxListed)
			}
		}
		list := func(what string, rs []RecordCount) {
			for i, rc := range rs[:min(maxListed, len(rs))] {
				fmt.Fprintf(&b, "  %s ×%d: %q\n", what, rc.Times, rc.Record)
				if i == maxListed-1 && len(rs) > maxListed {
					fmt.Fprintf(&b, "  … and %d more %s\n", len(rs)-maxListed, what)
				}
			}
		}
		list("missing", v.Missing)
		list("duplicated", v.Duplicated)
		list("unexpected", v.Unexpected)
	}
	return b.String()
}

// verifyRun is the state of a rerun: the checkpoint whose positions the
// sources stop at, and each sink's tally.
type verifyRun struct {
	point   *runtime.RestorePoint
	tallies map[string]*tally // by sink UID
}

// tally compares a sink's records, made by the rerun (side 0) and
// committed (side 1): by digest first, which costs little more than
// reading them, and, only when the digests differ, record by record in m
// (set then), to say which differ.
type tally struct {
	mu     sync.Mutex
	digest [2]digest
	// m counts each record on both sides; one map for both, so that the
	// rerun's records mostly find theirs in it, with no allocation.
	m map[string]*[2]int64
}

func (t *tally) add(rec []byte, side int) {
	t.digest[side].add(rec)
	if t.m == nil {
		return
	}
	c := t.m[string(rec)]
	if c == nil {
		c = new([2]int64)
		t.m[string(rec)] = c
	}
	c[side]++
}

// digest fingerprints a multiset of records: their number, and the sums of
// two seeded 64-bit hashes of them (an additive multiset hash, so order
// does not matter and subtasks' digests add up). Different multisets have
// equal digests with a probability of about 2^-126, the seeds being drawn
// anew by each process.
type digest struct {
	n    int64
	a, b uint64
}

var digestSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

func (d *digest) add(rec []byte) {
	d.n++
	d.a += maphash.Bytes(digestSeeds[0], rec)
	d.b += maphash.Bytes(digestSeeds[1], rec)
}

func (d *digest) merge(o digest) { d.n, d.a, d.b = d.n+o.n, d.a+o.a, d.b+o.b }

// restoreOf is the state operator uid wrote in checkpoint p, nil if none.
func restoreOf(p *runtime.RestorePoint, uid string) *operator.Restore {
	r := &operator.Restore{Checkpoint: p.Metadata.ID, Read: p.Read, Open: p.Open}
	for _, ts := range p.Metadata.Tasks {
		for _, h := range ts.Handles {
			if h.Operator == uid && h.Kind != runtime.KindChannelState {
				r.Handles = append(r.Handles, h)
			}
		}
	}
	if len(r.Handles) == 0 {
		return nil
	}
	return r
}

// rewound opens a source reader at the start of its input, to stop where
// the checkpoint recorded it.
type rewound[T any] struct {
	SourceReader[T]
	restore *operator.Restore
}

func (r *rewound[T]) Open(ctx *operator.Context) error {
	ctx.Restore, ctx.Rewind = r.restore, true
	return r.SourceReader.Open(ctx)
}

// rerunSink tallies what a sink subtask would write, as the sink's
// records: into its own digest, added to the sink's at the end, or record
// by record.
type rerunSink[T any] struct {
	operator.Base
	vs     VerifiedSink[T]
	t      *tally
	digest digest
}

func (s *rerunSink[T]) Write(v T) error {
	if s.t.m == nil {
		s.vs.Records(v, s.digest.add)
		return nil
	}
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	s.vs.Records(v, func(rec []byte) { s.t.add(rec, 0) })
	return nil
}

func (s *rerunSink[T]) Finish() error {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	s.t.digest[0].merge(s.digest)
	s.digest = digest{}
	return nil
}

// Verify answers whether the job's committed output is what a run
// without failures makes: it reads the latest completed checkpoint in the
// job's checkpoint storage (Config.Checkpoint.Dir), reruns the job in this
// process over exactly the input that checkpoint consumed (its sources
// rewound, no checkpoints, no faults, nothing written), and compares what
// each sink would have written with what it committed up to that
// checkpoint, as multisets of records.
//
// It refuses, with an error, a job it cannot verify so: an operator marked
// NonDeterministic, a source that cannot read its input again (Rewinder),
// a sink that cannot read back its output (VerifiedSink), and, during the
// rerun, processing-time timers (processing-time windows, a join's TTL):
// their output depends on the clock. The job must be deterministic in
// event time, too: records that arrive late by chance are dropped by
// chance.
func (e *Environment) Verify(ctx context.Context, vc VerifyConfig) (VerifyReport, error) {
	plan, err := e.Plan()
	if err != nil {
		return VerifyReport{}, fmt.Errorf("job %s: %w", e.cfg.Job, err)
	}
	var refusals []string
	var sinks []*node
	for _, n := range e.nodes {
		if n.nondeterministic {
			refusals = append(refusals, fmt.Sprintf("operator %q is marked non-deterministic", n.UID))
		}
		if n.idleTimeout > 0 {
			refusals = append(refusals, fmt.Sprintf("operator %q marks splits idle after %v without records, by the clock: which records a rerun finds late would differ", n.UID, n.idleTimeout))
		}
		if n.verify == nil {
			continue
		}
		if err := n.verify.check(); err != nil {
			refusals = append(refusals, fmt.Sprintf("%s %q: %v", n.Kind, n.UID, err))
		}
		if n.verify.committed != nil {
			sinks = append(sinks, n)
		}
	}
	if len(sinks) == 0 {
		refusals = append(refusals, "the job has no sink to verify")
	}
	if len(refusals) > 0 {
		return VerifyReport{}, fmt.Errorf("job %s cannot be verified by a rerun: %s", e.cfg.Job, strings.Join(refusals, "; "))
	}
	cc := e.cfg.Checkpoint
	if cc.Dir == "" {
		return VerifyReport{}, fmt.Errorf("job %s: verify reads the job's checkpoints: give its checkpoint directory (--checkpoint-dir, Config.Checkpoint.Dir)", e.cfg.Job)
	}
	if !storage.IsURL(cc.Dir) {
		// NB: opening a directory's storage creates the job's directory:
		// verify only reads.
		jobDir := cc.FS.PathJoin(strings.TrimPrefix(cc.Dir, "file://"), e.cfg.Job)
		if _, err := cc.FS.Stat(jobDir); err != nil {
			return VerifyReport{}, fmt.Errorf("job %s: no checkpoints to verify in %s (%w): give the job's checkpoint directory and name", e.cfg.Job, jobDir, err)
		}
	}
	st, err := openStorage(cc, e.cfg.Job, e.cfg.Logger)
	if err != nil {
		return VerifyReport{}, err
	}
	scan, err := st.Scan()
	if err != nil {
		return VerifyReport{}, err
	}
	if r, ok := scan.Elsewhere(); ok {
		return VerifyReport{}, fmt.Errorf("job %s: the start at %s restored checkpoint %d from %s and no checkpoint has completed since: the output is that one's, which verify does not read; verify once the job has completed a checkpoint", e.cfg.Job, r.At.Format(time.RFC3339), r.Restored, r.Elsewhere)
	}
	m := scan.Latest()
	if m == nil {
		return VerifyReport{}, fmt.Errorf("job %s: %s holds no completed checkpoint to verify", e.cfg.Job, st.Describe())
	}
	// NB: strictly, whatever Config.AllowNonRestoredState says: a source
	// whose positions no operator claims would rewind to nothing.
	if _, err := m.Fit(e.cfg.Job, plan.Graph.Operators(), false); err != nil {
		return VerifyReport{}, fmt.Errorf("job %s: checkpoint %d in %s does not fit the job, so a rerun cannot be compared with it: %w", e.cfg.Job, m.ID, st.Describe(), err)
	}
	if m.AtLeastOnce {
		return VerifyReport{}, fmt.Errorf("job %s: checkpoint %d was taken in at-least-once mode: after a restore its committed output may hold records twice, as the mode allows, which a comparison would report; verify jobs that run exactly-once", e.cfg.Job, m.ID)
	}
	for _, ts := range m.Tasks {
		for _, h := range ts.Handles {
			if h.Kind == runtime.KindChannelState {
				// NB: the records in flight were read by the sources
				// before the checkpoint, and their effects on the output
				// come after it: a rerun would show them as missing.
				return VerifyReport{}, fmt.Errorf("job %s: checkpoint %d is unaligned and holds records in flight (task %s): it cannot be compared with a rerun; verify once the job has finished, or at an aligned checkpoint",
					e.cfg.Job, m.ID, ts.Task)
			}
		}
	}
	point := &runtime.RestorePoint{Metadata: m, Read: st.ReadState, Open: st.OpenState, Where: st.Describe()}
	report := VerifyReport{Checkpoint: m.ID}

	v := &verifyRun{point: point, tallies: map[string]*tally{}}
	for _, n := range sinks {
		v.tallies[n.UID] = &tally{}
	}
	// The digests first; then, for the sinks whose digests differ, record
	// by record, which takes a second rerun.
	first := map[string][2]digest{} // pass 0's digests of the sinks compared again
	for pass := range 2 {
		for _, n := range sinks {
			t := v.tallies[n.UID]
			if pass == 1 && t.digest[0] == t.digest[1] {
				continue
			}
			if pass == 1 {
				first[n.UID], t.digest, t.m = t.digest, [2]digest{}, map[string]*[2]int64{}
			}
			oc := &operator.Context{Job: e.cfg.Job, UID: n.UID, Parallelism: 1, MaxParallelism: n.MaxParallelism,
				Restore: restoreOf(point, n.UID), Resumed: m.ID, Lineage: m.Lineage, Logger: e.cfg.Logger, Now: time.Now}
			if oc.Restore == nil {
				oc.Restore = &operator.Restore{Checkpoint: m.ID, Read: point.Read, Open: point.Open}
			}
			if err := n.verify.committed(oc, func(rec []byte) { t.add(rec, 1) }); err != nil {
				return report, fmt.Errorf("sink %q: read its committed output: %w", n.UID, err)
			}
		}
		if report.Read, err = e.rerun(ctx, plan, v, vc.Progress); err != nil {
			return report, fmt.Errorf("job %s: the rerun over checkpoint %d's input: %w", e.cfg.Job, m.ID, err)
		}
		if pass == 1 {
			break
		}
		for _, n := range sinks {
			if t := v.tallies[n.UID]; t.digest[0] == t.digest[1] {
				report.Sinks = append(report.Sinks, SinkVerdict{Sink: n.UID, Rerun: t.digest[0].n, Committed: t.digest[1].n})
			}
		}
		if len(report.Sinks) == len(sinks) {
			return report, nil
		}
	}
	for _, n := range sinks {
		t := v.tallies[n.UID]
		if t.m == nil {
			continue
		}
		if t.digest != first[n.UID] {
			// NB: else a second rerun that happens to match would hide the
			// first one's mismatch.
			return report, fmt.Errorf("job %s: sink %q: two reruns over checkpoint %d's input made different output (%d and %d records), or its committed output changed meanwhile (%d and %d): the job is not deterministic (records late by chance? a source's idleness?), or it is running and committing; it cannot be verified by a rerun",
				e.cfg.Job, n.UID, m.ID, first[n.UID][0].n, t.digest[0].n, first[n.UID][1].n, t.digest[1].n)
		}
		key := vc.Key
		if k := n.verify.keyed(); key == nil && k != nil {
			key = func(_ string, rec []byte) string { return k.RecordKey(rec) }
		}
		report.Sinks = append(report.Sinks, compare(n.UID, t.m, key))
	}
	slices.SortFunc(report.Sinks, func(a, b SinkVerdict) int { return strings.Compare(a.Sink, b.Sink) })
	// A running job that completed a checkpoint meanwhile may have
	// committed output a sink read back with checkpoint m's (a Kafka
	// sink's producer ids new since m): not a mismatch to report.
	if now, err := st.Scan(); !report.OK() && err == nil && now.Latest() != nil && now.Latest().ID != m.ID {
		return report, fmt.Errorf("job %s: the job completed checkpoint %d while verify compared its output with checkpoint %d's, and what it committed meanwhile may be among the output read: verify again, or once the job has stopped\n%s",
			e.cfg.Job, now.Latest().ID, m.ID, report)
	}
	return report, nil
}

// rerun runs the job in this process with v set: sources rewound to the
// checkpoint's positions, sinks collecting into v, no checkpoints. It
// returns the records the sources read.
func (e *Environment) rerun(ctx context.Context, plan *graph.Plan, v *verifyRun, progress func(int64)) (int64, error) {
	saved := e.cfg
	defer func() { e.cfg, e.verify = saved, nil }()
	e.cfg.Checkpoint = CheckpointConfig{Mode: NoCheckpoints, FS: saved.Checkpoint.FS}
	e.cfg.Restore, e.cfg.Fresh, e.cfg.Web, e.cfg.OnEvent = "", false, "", nil
	e.cfg.LocalRecovery, e.cfg.LocalRecoveryDir = false, ""
	e.cfg.Cluster = ClusterConfig{}
	e.cfg.Restart = NoRestart{}
	if e.cfg.StateBackend.Kind == PebbleState {
		// NB: never the job's own directory, which a running job holds.
		dir, err := os.MkdirTemp("", "weir-verify-")
		if err != nil {
			return 0, err
		}
		defer os.RemoveAll(dir)
		e.cfg.StateBackend.Dir = dir
	}
	e.verify = v
	spec, err := e.spec(plan)
	if err != nil {
		return 0, err
	}
	read := func() int64 {
		var n int64
		for _, nd := range e.nodes {
			if nd.Kind == kindSource {
				n += nd.records.Load()
			}
		}
		return n
	}
	start := read()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if progress != nil {
		wg.Go(func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					progress(read() - start)
				}
			}
		})
	}
	_, err = runtime.Run(ctx, spec)
	close(stop)
	wg.Wait()
	return read() - start, err
}

// compare reads a sink's tally: made by the rerun ([0]), committed ([1]).
func compare(sink string, t map[string]*[2]int64, key func(string, []byte) string) SinkVerdict {
	v := SinkVerdict{Sink: sink}
	var missing, unexpected []string // records with no match at all
	for rec, c := range t {
		made, committed := c[0], c[1]
		v.Rerun += made
		v.Committed += committed
		switch {
		case committed == 0:
			missing = append(missing, rec)
		case made == 0:
			unexpected = append(unexpected, rec)
		case committed < made:
			v.Missing = append(v.Missing, RecordCount{rec, made - committed})
		case committed > made:
			v.Duplicated = append(v.Duplicated, RecordCount{rec, committed - made})
		}
	}
	slices.Sort(missing)
	slices.Sort(unexpected)
	if key != nil {
		// Pair a record made once and never committed with one committed
		// once and never made, of the same key; each at most once.
		byKey := map[string][]string{}
		var left []string
		for _, rec := range missing {
			if t[rec][0] != 1 {
				left = append(left, rec)
				continue
			}
			k := key(sink, []byte(rec))
			byKey[k] = append(byKey[k], rec)
		}
		var extra []string
		for _, rec := range unexpected {
			k := key(sink, []byte(rec))
			if recs := byKey[k]; len(recs) > 0 && t[rec][1] == 1 {
				v.Changed = append(v.Changed, ChangedRecord{Key: k, Committed: rec, Rerun: recs[0]})
				byKey[k] = recs[1:]
				continue
			}
			extra = append(extra, rec)
		}
		for _, recs := range byKey {
			left = append(left, recs...)
		}
		missing, unexpected = left, extra
	}
	for _, rec := range missing {
		v.Missing = append(v.Missing, RecordCount{rec, t[rec][0]})
	}
	for _, rec := range unexpected {
		v.Unexpected = append(v.Unexpected, RecordCount{rec, t[rec][1]})
	}
	byRecord := func(a, b RecordCount) int { return strings.Compare(a.Record, b.Record) }
	slices.SortFunc(v.Missing, byRecord)
	slices.SortFunc(v.Duplicated, byRecord)
	slices.SortFunc(v.Unexpected, byRecord)
	slices.SortFunc(v.Changed, func(a, b ChangedRecord) int { return strings.Compare(a.Key, b.Key) })
	return v
}

// errClockTimer is what a verification rerun fails with when an operator
// registers a processing-time timer.
var errClockTimer = errors.New("it registered a processing-time timer: its output depends on the machine's clock, which a rerun cannot reproduce, so the job cannot be verified by a rerun")

// clockAllowed reports whether operator uid may register a
// processing-time timer: not in a verification rerun, which it fails.
func (c *chain) clockAllowed(uid string) bool {
	if c.verify != nil {
		c.fail(operator.Permanent(fmt.Errorf("operator %q: %w", uid, errClockTimer)))
	}
	return c.verify == nil
}

// watermarkCap is how far event time may go in operator oc of a
// verification rerun: the watermark the operator had at the checkpoint
// (its subtask's at the same parallelism, else the least of all), so that
// the rerun fires the windows and timers the job had fired, and none it
// had not. MaxTime outside a rerun, and at a checkpoint taken after the
// input ended.
func (c *chain) watermarkCap(oc *operator.Context) (int64, error) {
	if c.verify == nil {
		return operator.MaxTime, nil
	}
	rs := restoreOf(c.verify.point, oc.UID)
	if rs == nil {
		return operator.MinTime, nil
	}
	w, err := readWatermarks(rs, oc)
	if err == nil && w.at.fired == operator.MaxTime && w.at.wm != operator.MaxTime {
		// Resumed after its input had ended: the windows it fired at that
		// end were fired under MaxTime, and its watermark went back after.
		return 0, operator.Permanent(fmt.Errorf("%s: checkpoint %d was taken by a run that resumed the job after its input had ended, with more input: a rerun fires each window once, and cannot fire what the job fired at that end and then go on from the watermark it had before it; verify the checkpoint taken at the end instead, or one before it",
			oc.UID, c.verify.point.Metadata.ID))
	}
	return w.at.wm, err
}
