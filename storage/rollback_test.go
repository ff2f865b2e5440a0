package storage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/s3test"
)

// rollbackKinds are the storages of the rollback records' tests, with a
// way to damage a record.
func rollbackKinds(t *testing.T) map[string]func(job string) (Storage, func(through checkpoint.ID, data []byte)) {
	dir, mem := t.TempDir(), NewMemory(0) // memory outlives no process: one for the test
	blob := func(url string) func(job string) (Storage, func(checkpoint.ID, []byte)) {
		return func(job string) (Storage, func(checkpoint.ID, []byte)) {
			b, err := OpenBlob(context.Background(), url, job)
			if err != nil {
				t.Fatal(err)
			}
			return b, func(through checkpoint.ID, data []byte) {
				if err := b.bucket.WriteAll(context.Background(), rollbackName(through), data, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return map[string]func(job string) (Storage, func(checkpoint.ID, []byte)){
		"memory": func(string) (Storage, func(checkpoint.ID, []byte)) { return mem, nil },
		"dir": func(job string) (Storage, func(checkpoint.ID, []byte)) {
			d, err := NewDir(vfs.Default, dir, job, 0)
			if err != nil {
				t.Fatal(err)
			}
			return d, func(through checkpoint.ID, data []byte) {
				if err := os.WriteFile(filepath.Join(d.JobDir(), rollbackName(through)), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		},
		"mem": blob("mem://rollback"),
		"s3":  blob(s3test.Start(t).URL),
	}
}

func commitMeta(t *testing.T, s Storage, id checkpoint.ID, savepoint bool) {
	t.Helper()
	if err := s.Reserve(id); err != nil {
		t.Fatal(err)
	}
	m := &checkpoint.Metadata{Job: "j", ID: id, Savepoint: savepoint, Lineage: "L", Triggered: time.Unix(int64(id), 0)}
	if err := s.Commit(m); err != nil {
		t.Fatal(err)
	}
}

// After a rollback to 4 over savepoint 8, Latest is 4 until a checkpoint
// completes after 8, RolledBack names 8 and not 4 or 9, a rollback to 2
// with the same Through widens the record, and one from elsewhere is
// Elsewhere until a checkpoint completes past it.
func TestRollbackRecords(t *testing.T) {
	for name, open := range rollbackKinds(t) {
		t.Run(name, func(t *testing.T) {
			s, _ := open("j")
			for _, id := range []checkpoint.ID{2, 4, 8} {
				commitMeta(t, s, id, true)
			}
			at := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
			if err := s.RecordRollback(Rollback{Restored: 4, Lineage: "L", Through: 8, At: at}); err != nil {
				t.Fatal(err)
			}
			s, _ = open("j") // as the next process would
			scan, err := s.Scan()
			if err != nil {
				t.Fatal(err)
			}
			if m := scan.Latest(); m == nil || m.ID != 4 {
				t.Fatalf("Latest %v after the rollback to 4; want 4", m)
			}
			byID := map[checkpoint.ID]*checkpoint.Metadata{}
			for _, m := range scan.Completed {
				byID[m.ID] = m
			}
			if r, rolled := scan.RolledBack(byID[8]); !rolled || r.Restored != 4 || !r.At.Equal(at) {
				t.Fatalf("savepoint 8: rolled back %v by %+v; want by the start that restored 4", rolled, r)
			}
			other := *byID[8]
			other.Lineage = "M"
			for _, m := range []*checkpoint.Metadata{byID[2], byID[4], &other} {
				if _, rolled := scan.RolledBack(m); rolled {
					t.Fatalf("checkpoint %d of lineage %s is not rolled back", m.ID, m.Lineage)
				}
			}
			if _, ok := scan.Elsewhere(); ok {
				t.Fatal("a rollback to a checkpoint storage holds is not Elsewhere")
			}
			// Back to 2 before any checkpoint completed: one record, the
			// wider one, whichever order the two were written in.
			if err := s.RecordRollback(Rollback{Restored: 2, Lineage: "L", Through: 8, At: at.Add(time.Minute)}); err != nil {
				t.Fatal(err)
			}
			if err := s.RecordRollback(Rollback{Restored: 4, Lineage: "L", Through: 8, At: at.Add(2 * time.Minute)}); err != nil {
				t.Fatal(err)
			}
			if scan, err = s.Scan(); err != nil {
				t.Fatal(err)
			}
			if len(scan.Rollbacks) != 1 || scan.Rollbacks[0].Restored != 2 || scan.Latest().ID != 2 {
				t.Fatalf("rollbacks %+v, latest %d; want one, to 2", scan.Rollbacks, scan.Latest().ID)
			}
			// A checkpoint after the rollback is the latest.
			commitMeta(t, s, 9, false)
			if scan, err = s.Scan(); err != nil {
				t.Fatal(err)
			}
			if m := scan.Latest(); m.ID != 9 {
				t.Fatalf("Latest %d; want 9, completed after the rollback", m.ID)
			}
			// A rollback to a checkpoint from elsewhere.
			if err := s.RecordRollback(Rollback{Restored: 3, Lineage: "L", Through: 9, Elsewhere: "/backup/chk-3", At: at}); err != nil {
				t.Fatal(err)
			}
			if scan, err = s.Scan(); err != nil {
				t.Fatal(err)
			}
			if r, ok := scan.Elsewhere(); !ok || r.Elsewhere != "/backup/chk-3" {
				t.Fatalf("Elsewhere %+v, %v; want the restore of /backup/chk-3", r, ok)
			}
			commitMeta(t, s, 10, false)
			if scan, err = s.Scan(); err != nil {
				t.Fatal(err)
			}
			if _, ok := scan.Elsewhere(); ok || scan.Latest().ID != 10 {
				t.Fatalf("after checkpoint 10 completed: Elsewhere %v, latest %d; want none, 10", ok, scan.Latest().ID)
			}
			// New ids start above a record's range, though its checkpoints
			// are gone.
			if err := s.RecordRollback(Rollback{Restored: 10, Lineage: "L", Through: 20, At: at}); err != nil {
				t.Fatal(err)
			}
			if scan, err = s.Scan(); err != nil {
				t.Fatal(err)
			}
			if scan.MaxID != 20 || scan.Latest().ID != 10 {
				t.Fatalf("after a rollback to 10 through 20: MaxID %d, latest %d; want 20, 10", scan.MaxID, scan.Latest().ID)
			}
		})
	}
}

// A damaged record fails Scan, naming it: skipping it could restore a
// checkpoint whose output is gone.
func TestDamagedRollbackRecordFailsScan(t *testing.T) {
	for name, open := range rollbackKinds(t) {
		if name == "memory" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			s, damage := open("damaged")
			commitMeta(t, s, 1, false)
			for i, data := range []string{`{"restored":4,"lineage":"L","through":`, `{"restored":4,"through":7}`, `{"restored":0,"through":8}`, `{"restored":4,"through":8,"more":1}`} {
				damage(8, []byte(data))
				_, err := s.Scan()
				if !errors.Is(err, checkpoint.ErrCorrupt) || !ProvenDamage(err) || !contains(err, rollbackName(8)) {
					t.Fatalf("record %d (%s): Scan: %v; want it named, damaged", i, data, err)
				}
			}
		})
	}
}

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }
