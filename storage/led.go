package storage

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/ha"
)

// Led returns s as the storage of a job whose coordinator is highly
// available (issue 20): l is the coordinator's term of the job's
// leadership, and etcd, not s, says which checkpoints completed.
//
//   - Reserve records the checkpoint id in etcd (ha.Leadership.Reserve),
//     so that no two terms use one id: Scan's MaxID counts it.
//   - Commit writes the metadata to s, then records the checkpoint as
//     completed in etcd (ha.Leadership.Complete): only the current leader
//     can, so a deposed leader that wakes up can write files but never
//     make them the restore point. Its error then wraps ErrLeaseLost,
//     and the runtime fails the run for good.
//   - Scan lists as completed only the checkpoints etcd records; others
//     with metadata in s (committed by a deposed leader, or whose record
//     was forgotten after its outcome was unknown) are incomplete. A
//     record newer than the newest completed checkpoint s shows, whose
//     metadata s does not show, fails the scan, retryable
//     (ErrUnavailable): a listing may lag, or s may not be the job's
//     storage; restoring an older checkpoint would roll back committed
//     output, and deleting the record would lose it. An older one is
//     damaged, or, a savepoint, disposed of. A job whose checkpoint ids
//     etcd does not hold yet has not run with high availability: Scan
//     records its completed checkpoints in etcd, as they are.
//   - Discard forgets the checkpoint in etcd before it deletes its files;
//     once the term is lost, nothing is deleted (the next leader tidies).
//   - Lock is the leadership: storage locks (a directory's lock file, an
//     object store's lease) are not taken, since a paused leader would
//     hold them past its term. It marks the storage (LedFile), and runs
//     without high availability refuse it.
func Led(s Storage, l *ha.Leadership) Storage {
	if p, ok := s.(Prober); ok {
		return ledProber{&led{Storage: s, l: l}, p}
	}
	return &led{Storage: s, l: l}
}

type led struct {
	Storage
	l *ha.Leadership
}

// ledProber is a led storage whose storage a cluster's workers may share
// (Prober).
type ledProber struct {
	*led
	Prober
}

// ctx bounds a call to etcd: longer, and the term may have ended meanwhile.
func (s *led) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.l.TTL())
}

// fail marks err: a lost term fences the run (ErrLeaseLost); any other
// error of etcd's proves nothing (ErrUnavailable).
func (s *led) fail(err error) error {
	if errors.Is(err, ha.ErrDeposed) {
		return fmt.Errorf("%w (%w)", err, ErrLeaseLost)
	}
	return unavailable(err)
}

func (s *led) Reserve(id checkpoint.ID) error {
	if err := s.l.Err(); err != nil {
		return s.fail(err)
	}
	ctx, cancel := s.ctx()
	defer cancel()
	if err := s.l.Reserve(ctx, id); err != nil {
		return s.fail(err)
	}
	return s.Storage.Reserve(id)
}

// RecordRollback writes the record only while the term is not known to
// be lost: a deposed leader's record, whose range its last scan of etcd
// sized, could cover checkpoints its successor completed.
// NB: a paused leader that has not heard yet still writes it.
func (s *led) RecordRollback(r Rollback) error {
	if err := s.l.Err(); err != nil {
		return s.fail(err)
	}
	return s.Storage.RecordRollback(r)
}

func (s *led) Commit(m *checkpoint.Metadata) error {
	if err := s.l.Err(); err != nil {
		return s.fail(err)
	}
	freed := s.Storage.Commit(m)
	if freed != nil && !errors.Is(freed, ErrFreedFilesStay) {
		return freed
	}
	ctx, cancel := s.ctx()
	defer cancel()
	if err := s.l.Complete(ctx, s.pointer(m)); err != nil {
		return s.fail(err)
	}
	return freed
}

func (s *led) pointer(m *checkpoint.Metadata) ha.Pointer {
	return ha.Pointer{ID: m.ID, Where: fmt.Sprintf("%s/chk-%d", s.Describe(), m.ID), Savepoint: m.Savepoint}
}

func (s *led) Scan() (Scan, error) {
	scan, err := s.Storage.Scan()
	if err != nil {
		return Scan{}, err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	last, known, err := s.l.LastCheckpointID(ctx)
	if err != nil {
		return Scan{}, unavailable(err)
	}
	if !known {
		// The job's first term: its completed checkpoints become its
		// record in etcd, before a first id makes etcd's record the
		// only one.
		for _, m := range scan.Completed {
			if err := s.l.Complete(ctx, s.pointer(m)); err != nil {
				return Scan{}, s.fail(err)
			}
		}
		return scan, nil
	}
	ps, err := s.l.Completed(ctx)
	if err != nil {
		return Scan{}, unavailable(err)
	}
	scan.MaxID = max(scan.MaxID, last)
	recorded := map[checkpoint.ID]ha.Pointer{}
	for _, p := range ps {
		recorded[p.ID] = p
	}
	completed := scan.Completed[:0]
	var unknown []checkpoint.ID
	for _, m := range scan.Completed {
		switch _, ok := recorded[m.ID]; {
		case ok:
			completed = append(completed, m)
			delete(recorded, m.ID)
		case m.ID > last:
			unknown = append(unknown, m.ID)
		default:
			scan.Incomplete = append(scan.Incomplete, m.ID)
		}
	}
	if unknown != nil {
		// Every term reserves its ids in etcd first: a run without
		// high availability wrote these, and its sinks committed output
		// up to them. Deleting them would write that output again.
		return Scan{}, fmt.Errorf("%s holds completed checkpoints %v of job %s with ids above the last etcd handed out (%d): a run without --ha wrote them beside the job's highly available coordinators. Nothing was restored or deleted; run the job with --ha only, and either move those checkpoints out of the way (their output stays committed) or start the job over (delete its keys in etcd and its checkpoints)",
			s.Describe(), unknown, s.l.Job(), last)
	}
	scan.Completed = completed
	// shown is the newest completed checkpoint storage shows; shownAny,
	// also counting the damaged ones etcd records (an unrecorded one is
	// no evidence: a deposed leader's, or another job's).
	var shown checkpoint.ID
	if n := len(completed); n > 0 {
		shown = completed[n-1].ID
	}
	shownAny := shown
	for _, d := range scan.Damaged {
		if _, ok := recorded[d.ID]; ok {
			shownAny = max(shownAny, d.ID)
		}
		delete(recorded, d.ID)
	}
	var missing []checkpoint.ID
	for _, id := range slices.Sorted(maps.Keys(recorded)) {
		switch p := recorded[id]; {
		case id > shown && !p.Savepoint, id > shownAny:
			missing = append(missing, id)
		case p.Savepoint:
			// Disposed of (weir savepoint dispose): Weir never deletes
			// a savepoint, and one older than what storage shows is no
			// restore point.
		default:
			scan.Damaged = append(scan.Damaged, Damaged{ID: p.ID, Path: p.Where,
				Err: fmt.Errorf("%w: etcd records checkpoint %d of job %s as completed (epoch %d), but %s holds no metadata for it", checkpoint.ErrCorrupt, p.ID, s.l.Job(), p.Epoch, s.Describe())})
		}
	}
	if missing != nil {
		// NB: not damage. The restore point is among them: a listing may
		// lag (a network file system on another host), or the storage may
		// not be the job's. Restoring an older checkpoint would roll back
		// output the sinks committed, and deleting this one would lose
		// etcd's record of it.
		newest := recorded[missing[len(missing)-1]]
		return Scan{}, unavailable(fmt.Errorf("etcd records checkpoints %v of job %s as completed, and %s does not show them (the newest was written at %s). If its listing lags, a later start finds them; else this is not the checkpoint storage the job's leaders wrote (--checkpoint-dir), or they were deleted or disposed of, and to restore the one before, delete their records in etcd (%s and after): nothing was restored or deleted",
			missing, s.l.Job(), s.Describe(), newest.Where, s.l.PointerKey(missing[0])))
	}
	slices.Sort(scan.Incomplete)
	slices.SortFunc(scan.Damaged, func(a, b Damaged) int { return cmp.Compare(a.ID, b.ID) })
	return scan, nil
}

func (s *led) Discard(id checkpoint.ID) error {
	if err := s.l.Err(); err != nil {
		return s.fail(err)
	}
	ctx, cancel := s.ctx()
	defer cancel()
	if err := s.l.Forget(ctx, id); err != nil {
		return s.fail(err)
	}
	return s.Storage.Discard(id)
}

func (s *led) DiscardState(hs []checkpoint.Handle) error {
	if err := s.l.Err(); err != nil {
		return s.fail(err)
	}
	return s.Storage.DiscardState(hs)
}

// RemoveOrphans asks whether the term lasts after it listed the shared
// files: what a new leader writes after this term ended is never listed.
func (s *led) RemoveOrphans() error {
	alive := func() error {
		if err := s.l.Err(); err != nil {
			return s.fail(err)
		}
		return nil
	}
	if err := alive(); err != nil {
		return err
	}
	if r, ok := s.Storage.(interface{ removeOrphans(func() error) error }); ok {
		return r.removeOrphans(alive)
	}
	return s.Storage.RemoveOrphans()
}

// Lock marks the storage as led (LedFile), naming the term's etcd
// namespace: a run without high availability refuses it from now on, and
// so does a term of another namespace (ErrLedElsewhere).
func (s *led) Lock() (io.Closer, error) {
	if err := s.l.Err(); err != nil {
		return nil, s.fail(err)
	}
	if m, ok := s.Storage.(ledStorage); ok {
		mark, _ := json.Marshal(ledMark{Job: s.l.Job(), Etcd: s.l.Namespace(), Note: "the job's coordinators lead it through etcd: a run without --ha refuses this storage"}) // plain data: cannot fail
		held, err := m.markLed(append(mark, '\n'))
		if err != nil {
			return nil, err
		}
		if held != nil {
			if err := checkLedMark(s.Describe(), held, s.l.Namespace()); err != nil {
				return nil, err
			}
		}
	}
	return held{s}, nil
}

// held is a led storage's lock: the term, which the caller of Led ends.
type held struct{ s *led }

func (held) Close() error { return nil }

// Held is nil while the term lasts (the runtime asks before it restarts).
// It asks etcd: a leader paused past its lease may not have learnt yet that
// its term ended, and a restart would restore the sinks (aborting what the
// next leader's attempt has open). etcd not answering proves nothing: the
// term's own clock ends it soon, and every commit is fenced.
func (h held) Held() error {
	ctx, cancel := h.s.ctx()
	defer cancel()
	_ = h.s.l.Verify(ctx) // ends the term if etcd proves it ended
	if err := h.s.l.Err(); err != nil {
		return h.s.fail(err)
	}
	return nil
}
