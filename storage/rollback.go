package storage

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"gocloud.dev/gcerrors"

	"github.com/weirstream/weir/checkpoint"
)

// Rollback records a start that restored an older checkpoint than the
// newest its job's storage held (or one from elsewhere). The sinks of
// that start roll back the output committed after it, so the newer
// checkpoints it leaves in storage (savepoints are never deleted) describe
// output that is gone: restoring one would lose it, and --restore latest
// must not take one for the latest. The driver writes the record before
// any task starts, so a start killed before its first checkpoint leaves
// it too.
type Rollback struct {
	// Restored is the checkpoint the start restored, Lineage its lineage
	// (checkpoint.Metadata.Lineage).
	Restored checkpoint.ID `json:"restored"`
	Lineage  string        `json:"lineage"`
	// Through is the highest id the storage held at that start
	// (Scan.MaxID): the checkpoints of Lineage after Restored up to
	// Through are rolled back.
	Through checkpoint.ID `json:"through"`
	// Elsewhere is where the restored checkpoint is, as it was named,
	// when the job's storage does not hold it; "" when it does.
	Elsewhere string `json:"elsewhere,omitempty"`
	// At is when the start began.
	At time.Time `json:"at"`
}

// rollbackPrefix begins the name of a rollback record in a job's storage;
// its Through follows. A later start that rolls back to as far or further
// with the same Through writes over it (see RecordRollback).
const rollbackPrefix = "_rollback-"

// Name is the record's name in its job's storage.
func (r Rollback) Name() string { return rollbackName(r.Through) }

func rollbackName(through checkpoint.ID) string {
	return rollbackPrefix + strconv.FormatUint(uint64(through), 10)
}

// parseRollbackName is the Through a record's name carries.
func parseRollbackName(name string) (checkpoint.ID, bool) {
	rest, ok := strings.CutPrefix(name, rollbackPrefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	if err != nil || strconv.FormatUint(n, 10) != rest {
		return 0, false
	}
	return checkpoint.ID(n), true
}

func encodeRollback(r Rollback) ([]byte, error) { return json.Marshal(r) }

// decodeRollback decodes the record at path, whose name says through.
func decodeRollback(path string, through checkpoint.ID, data []byte) (Rollback, error) {
	var r Rollback
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(&r); err != nil || r.Through != through || r.Restored == 0 {
		return Rollback{}, fmt.Errorf("rollback record %s is damaged (%q): it says which checkpoints a restore of an older one rolled back, and without it one of those could be restored with its output gone. If no restore of an older checkpoint happened before checkpoint %d, delete it: %w",
			path, trim(data), through, checkpoint.ErrCorrupt)
	}
	return r, nil
}

func trim(data []byte) []byte { return data[:min(len(data), 120)] }

// merged is the record a start that rolled back to r writes over held,
// the record of an earlier start with the same Through: the furthest
// rollback of the two. A start restores no checkpoint held rolled back
// (the driver refuses it), so r.Restored is never inside held's range.
func merged(held, r Rollback) Rollback {
	if held.Restored < r.Restored && held.Lineage == r.Lineage {
		r.Restored, r.Elsewhere = held.Restored, held.Elsewhere
	}
	return r
}

// settleRollbacks sorts s's records and raises MaxID to their Through: a
// record's range is ids reserved before its start, so new ids must come
// after it even when the checkpoints that had them are deleted (the
// rollback deletes the newer ones that are not savepoints). Otherwise a
// checkpoint completed after the rollback could take such an id and be
// taken for rolled back.
func settleRollbacks(s *Scan) {
	slices.SortFunc(s.Rollbacks, func(a, b Rollback) int { return cmp.Compare(a.Through, b.Through) })
	for _, r := range s.Rollbacks {
		s.MaxID = max(s.MaxID, r.Through)
	}
}

// Holds reports whether m, a checkpoint read from wherever it was named,
// is one of the completed checkpoints storage holds: the same id, lineage
// and trigger time.
func (s Scan) Holds(m *checkpoint.Metadata) bool {
	return slices.ContainsFunc(s.Completed, func(c *checkpoint.Metadata) bool {
		return c.ID == m.ID && c.Lineage == m.Lineage && c.Triggered.Equal(m.Triggered)
	})
}

// RolledBack is the record of the start that rolled m back, if one did.
func (s Scan) RolledBack(m *checkpoint.Metadata) (Rollback, bool) {
	for _, r := range s.Rollbacks {
		if m.Lineage == r.Lineage && r.Restored < m.ID && m.ID <= r.Through {
			return r, true
		}
	}
	return Rollback{}, false
}

// Elsewhere is the record of the newest rollback when it restored a
// checkpoint storage does not hold and no checkpoint completed since:
// --restore latest would restore an older one of this storage then, not
// the one that start ran from.
func (s Scan) Elsewhere() (Rollback, bool) {
	n := len(s.Rollbacks)
	if n == 0 || s.Rollbacks[n-1].Elsewhere == "" {
		return Rollback{}, false
	}
	r := s.Rollbacks[n-1]
	for _, m := range s.Completed {
		if m.ID > r.Through {
			return Rollback{}, false
		}
	}
	return r, true
}

// RecordRollback writes r, over the record of an earlier start with the
// same Through (merged), to a temporary file renamed into place.
func (d *Dir) RecordRollback(r Rollback) error {
	path := d.fs.PathJoin(d.jobDir, rollbackName(r.Through))
	if data, err := readFile(d.fs, path, 1<<16); err == nil {
		if held, err := decodeRollback(path, r.Through, data); err == nil {
			r = merged(held, r)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("record the rollback: %s: %w", path, unavailable(err))
	}
	data, err := encodeRollback(r)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if _, err := d.writeFile(tmp, bytes.NewReader(data)); err != nil {
		return fmt.Errorf("record the rollback: write %s: %w", tmp, err)
	}
	if err := d.fs.Rename(tmp, path); err != nil {
		return fmt.Errorf("record the rollback: rename %s to %s: %w", tmp, path, err)
	}
	if err := d.syncDir(d.jobDir); err != nil {
		return fmt.Errorf("record the rollback: %w", err)
	}
	return nil
}

// scanRollback reads the record named name in the job's directory, if it
// is one.
func (d *Dir) scanRollback(s *Scan, name string) error {
	through, ok := parseRollbackName(name)
	if !ok {
		return nil
	}
	path := d.fs.PathJoin(d.jobDir, name)
	data, err := readFile(d.fs, path, 1<<16)
	if err != nil {
		return fmt.Errorf("scan checkpoints: %s: %w", path, unavailable(err))
	}
	r, err := decodeRollback(path, through, data)
	if err != nil {
		return err
	}
	s.Rollbacks = append(s.Rollbacks, r)
	return nil
}

// RecordRollback writes r, over the record of an earlier start with the
// same Through (merged): one PUT.
func (b *Blob) RecordRollback(r Rollback) error {
	if err := b.fence(); err != nil {
		return fmt.Errorf("record the rollback: %w", err)
	}
	key := rollbackName(r.Through)
	if data, err := b.bucket.ReadAll(bg(), key); err == nil {
		if held, err := decodeRollback(b.where+"/"+key, r.Through, data); err == nil {
			r = merged(held, r)
		}
	} else if gcerrors.Code(err) != gcerrors.NotFound {
		return fmt.Errorf("record the rollback: %s/%s: %w", b.where, key, unavailable(err))
	}
	data, err := encodeRollback(r)
	if err != nil {
		return err
	}
	if err := b.bucket.WriteAll(bg(), key, data, nil); err != nil {
		return fmt.Errorf("record the rollback: write %s/%s: %w", b.where, key, err)
	}
	return nil
}

// scanRollback reads the record at key, if it is one.
func (b *Blob) scanRollback(s *Scan, key string) error {
	through, ok := parseRollbackName(key)
	if !ok {
		return nil
	}
	data, err := b.bucket.ReadAll(bg(), key)
	if err != nil {
		return fmt.Errorf("scan checkpoints: %s/%s: %w", b.where, key, unavailable(err))
	}
	r, err := decodeRollback(b.where+"/"+key, through, data)
	if err != nil {
		return err
	}
	s.Rollbacks = append(s.Rollbacks, r)
	return nil
}

// RecordRollback keeps r, over the record of an earlier start with the
// same Through (merged).
func (m *Memory) RecordRollback(r Rollback) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if held, ok := m.rollbacks[r.Through]; ok {
		r = merged(held, r)
	}
	m.rollbacks[r.Through] = r
	return nil
}
