package storage

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"gocloud.dev/gcerrors"
)

// Prober is storage that several processes can share: one writes a probe
// file, another reads it back. A cluster's coordinator has every worker
// write one before it deploys anything, and refuses storage the workers do
// not share with it (a directory that is local to each machine).
//
// Their errors say what a restart cannot fix as the file system does:
// fs.ErrNotExist (a probe not there to read: the storage is not shared)
// and fs.ErrPermission (storage this process may not write or read, a
// read-only file system included); any other error (a full disk, an I/O
// error, an object store that timed out) may pass.
type Prober interface {
	WriteProbe(name string, data []byte) error
	ReadProbe(name string) ([]byte, error)
	RemoveProbe(name string) error
}

// ProbeDir is where probe files go, under the job's storage.
const ProbeDir = "_probe"

// checkProbeName refuses a probe name that is not a plain file name: the
// name comes from the network. (A loop, not a regular expression: every
// process compiled one at start, 1.5 ms and 1,400 allocations for the
// bounded repetition.)
func checkProbeName(name string) error {
	plain := len(name) >= 1 && len(name) <= 128
	for _, c := range []byte(name) {
		plain = plain && ('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-')
	}
	if !plain {
		return fmt.Errorf("probe name %q: want 1 to 128 letters, digits and dashes", name)
	}
	return nil
}

func (d *Dir) WriteProbe(name string, data []byte) error {
	if err := checkProbeName(name); err != nil {
		return err
	}
	dir := d.fs.PathJoin(d.jobDir, ProbeDir)
	if err := d.fs.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("probe %s: %w", dir, readOnlyAsPermission(err))
	}
	if _, err := d.writeFile(d.fs.PathJoin(dir, name), bytes.NewReader(data)); err != nil {
		return fmt.Errorf("probe %s: %w", dir, readOnlyAsPermission(err))
	}
	return nil
}

// readOnlyAsPermission adds fs.ErrPermission to a write's error that says
// the file system is read-only (EROFS): storage this process may not
// write to, which a restart does not fix (Prober). NB: EROFS is not
// fs.ErrPermission for errors.Is.
func readOnlyAsPermission(err error) error {
	if errors.Is(err, syscall.EROFS) && !errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("%w (%w)", err, fs.ErrPermission)
	}
	return err
}

func (d *Dir) ReadProbe(name string) ([]byte, error) {
	if err := checkProbeName(name); err != nil {
		return nil, err
	}
	return readFile(d.fs, d.fs.PathJoin(d.jobDir, ProbeDir, name), 1<<20)
}

func (d *Dir) RemoveProbe(name string) error {
	if err := checkProbeName(name); err != nil {
		return err
	}
	return d.fs.Remove(d.fs.PathJoin(d.jobDir, ProbeDir, name))
}

func (b *Blob) WriteProbe(name string, data []byte) error {
	if err := checkProbeName(name); err != nil {
		return err
	}
	if err := b.bucket.WriteAll(bg(), ProbeDir+"/"+name, data, nil); err != nil {
		return fmt.Errorf("probe %s/%s: %w", b.where, ProbeDir, asFileError(err))
	}
	return nil
}

func (b *Blob) ReadProbe(name string) ([]byte, error) {
	if err := checkProbeName(name); err != nil {
		return nil, err
	}
	data, err := b.bucket.ReadAll(bg(), ProbeDir+"/"+name)
	if err != nil {
		return nil, fmt.Errorf("probe %s/%s/%s: %w", b.where, ProbeDir, name, asFileError(err))
	}
	return data, nil
}

// asFileError adds to an object store's error the file system's for what
// it says: not found, or not allowed (Prober).
func asFileError(err error) error {
	if noBucket(err) {
		return fmt.Errorf("%w (%w)", err, ErrNoBucket)
	}
	switch gcerrors.Code(err) {
	case gcerrors.NotFound:
		return fmt.Errorf("%w (%w)", err, fs.ErrNotExist)
	case gcerrors.PermissionDenied:
		return fmt.Errorf("%w (%w)", err, fs.ErrPermission)
	}
	return err
}

func (b *Blob) RemoveProbe(name string) error {
	if err := checkProbeName(name); err != nil {
		return err
	}
	return b.bucket.Delete(bg(), ProbeDir+"/"+name)
}
