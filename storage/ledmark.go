package storage

import (
	"bytes"
	"errors"
	"fmt"
	"os"
)

// LedFile, in a job's storage, says that highly available coordinators
// lead the job (Led writes it when a term takes the storage): a run
// without high availability refuses the storage, since nothing else would
// keep it from running beside their leader (the term replaces the
// storage's lock).
const LedFile = "_ha"

// ledStorage is storage that can carry LedFile.
type ledStorage interface {
	markLed(note []byte) error
}

func errLedByHA(where string) error {
	return fmt.Errorf("checkpoint storage %s belongs to coordinators with high availability (--ha; it holds %s): a run without --ha would run beside their leader. Run the job with --ha; to take it back from high availability, stop its coordinators and delete %s",
		where, LedFile, LedFile)
}

func (d *Dir) markLed(note []byte) error {
	if _, err := d.writeFile(d.fs.PathJoin(d.jobDir, LedFile), bytes.NewReader(note)); err != nil {
		return fmt.Errorf("mark %s as led by high availability: %w", d.jobDir, unavailable(err))
	}
	return nil
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

func (b *Blob) markLed(note []byte) error {
	if err := b.bucket.WriteAll(bg(), LedFile, note, nil); err != nil {
		return fmt.Errorf("mark %s as led by high availability: %w", b.where, unavailable(err))
	}
	return nil
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
