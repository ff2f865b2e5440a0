package storage

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// LedFile, in a job's storage, says that highly available coordinators
// lead the job (Led writes it when a term takes the storage): a run
// without high availability refuses the storage, since nothing else would
// keep it from running beside their leader (the term replaces the
// storage's lock).
const LedFile = "_ha"

// ledMark is what LedFile holds.
type ledMark struct {
	Job string `json:"job"`
	// Etcd names the etcd keys the job's coordinators lead in
	// (ha.Leadership.Namespace).
	Etcd string `json:"etcd"`
	Note string `json:"note"`
}

// ErrLedElsewhere is the error (wrapped) of a led storage that the
// coordinators of another etcd, or of another prefix, lead.
var ErrLedElsewhere = errors.New("the checkpoint storage is led through another etcd namespace")

// ledStorage is storage that can carry LedFile.
type ledStorage interface {
	// markLed writes LedFile holding mark, unless the storage holds one
	// already: then it returns that one's bytes.
	markLed(mark []byte) (held []byte, err error)
}

// checkLedMark fails unless held, an LedFile's bytes, names namespace.
func checkLedMark(where string, held []byte, namespace string) error {
	var m ledMark
	if err := json.Unmarshal(held, &m); err != nil {
		return fmt.Errorf("checkpoint storage %s: its %s holds %q, which names no etcd namespace (a build before %s named one wrote it), so %w for all this coordinator can tell. If no other coordinators lead the job, delete %s",
			where, LedFile, bytes.TrimSpace(held), LedFile, ErrLedElsewhere, LedFile)
	}
	if m.Etcd != namespace {
		return fmt.Errorf("checkpoint storage %s: %w (its %s names %s; this coordinator leads in %s): the coordinators of each would elect a leader of the job, and both would run it. Give all of the job's coordinators the same --ha etcd and prefix; to move the job to another (or after etcd was rebuilt with a new cluster id), stop its coordinators and delete %s",
			where, ErrLedElsewhere, LedFile, m.Etcd, namespace, LedFile)
	}
	return nil
}

func errLedByHA(where string) error {
	return fmt.Errorf("checkpoint storage %s belongs to coordinators with high availability (--ha; it holds %s): a run without --ha would run beside their leader. Run the job with --ha; to take it back from high availability, stop its coordinators and delete %s",
		where, LedFile, LedFile)
}

func (d *Dir) markLed(mark []byte) ([]byte, error) {
	path := d.fs.PathJoin(d.jobDir, LedFile)
	held, err := d.readLed(path)
	if held != nil || err != nil {
		return held, err
	}
	// NB: a link is made only if its name is free: of two coordinators
	// that mark the storage at once, one finds the other's mark.
	tmp := fmt.Sprintf("%s.tmp-%016x", path, rand.Uint64())
	if _, err := d.writeFile(tmp, bytes.NewReader(mark)); err != nil {
		return nil, fmt.Errorf("mark %s as led by high availability: %w", d.jobDir, unavailable(err))
	}
	defer d.fs.Remove(tmp)
	err = d.fs.Link(tmp, path)
	switch {
	case errors.Is(err, os.ErrExist):
		return d.readLed(path)
	case err != nil:
		// NB: a file system without hard links (some FUSE and SMB
		// mounts): a rename, which another coordinator that marks the
		// storage in the same instant may overwrite.
		if held, rerr := d.readLed(path); held != nil || rerr != nil {
			return held, rerr
		}
		err = d.fs.Rename(tmp, path)
	}
	if err == nil {
		err = d.syncDir(d.jobDir)
	}
	if err != nil {
		return nil, fmt.Errorf("mark %s as led by high availability: %w", d.jobDir, unavailable(err))
	}
	return nil, nil
}

// readLed returns LedFile's bytes, or nil if there is none.
func (d *Dir) readLed(path string) ([]byte, error) {
	f, err := d.fs.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err == nil {
		defer f.Close()
		var held []byte
		if held, err = io.ReadAll(f); err == nil {
			return held, nil
		}
	}
	return nil, fmt.Errorf("read %s: %w", path, unavailable(err))
}

// refuseLed fails when LedFile is in the job's directory.
func (d *Dir) refuseLed() error {
	_, err := d.fs.Stat(d.fs.PathJoin(d.jobDir, LedFile))
	switch {
	case err == nil:
		return errLedByHA(d.jobDir)
	case errors.Is(err, os.ErrNotExist):
		return nil
	}
	return fmt.Errorf("checkpoint storage %s: %w", d.jobDir, unavailable(err))
}

func (b *Blob) markLed(mark []byte) ([]byte, error) {
	held, err := b.bucket.ReadAll(bg(), LedFile)
	if err == nil {
		return held, nil
	}
	if gcerrors.Code(err) == gcerrors.NotFound {
		// NB: of two coordinators that mark the storage at once, one
		// finds the other's mark (If-None-Match).
		err = b.bucket.WriteAll(bg(), LedFile, mark, &blob.WriterOptions{IfNotExist: true})
		if gcerrors.Code(err) == gcerrors.FailedPrecondition {
			return b.markLed(mark)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("mark %s as led by high availability: %w", b.where, unavailable(err))
	}
	return nil, nil
}

// refuseLed fails when LedFile is in the job's prefix.
func (b *Blob) refuseLed() error {
	ok, err := b.bucket.Exists(bg(), LedFile)
	switch {
	case err != nil:
		return fmt.Errorf("checkpoint storage %s: %w", b.where, unavailable(err))
	case ok:
		return errLedByHA(b.where)
	}
	return nil
}
