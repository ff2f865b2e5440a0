package storage

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/lockfile"
)

// MetadataFile is the name of a checkpoint's metadata file.
const MetadataFile = "_metadata"

// DefaultInlineBytes is the size up to which Dir keeps state inside the
// metadata instead of a file of its own (Flink's default threshold too).
const DefaultInlineBytes = 20 << 10

// LockFile is the name of the lock file in a job's checkpoint directory.
const LockFile = ".lock"

// JobDirEntries returns samples of the names Dir gives what it writes
// directly in a job's directory: files, and directories (which hold files
// of their own). Names with a checkpoint id come with the ids 0 to 99 and
// a few longer ones, so that a wildcard over the id matches some sample.
func JobDirEntries() (files, dirs []string) {
	files = []string{LockFile, LedFile, LedFile + ".tmp-0123456789abcdef"}
	dirs = []string{SharedDir, ProbeDir}
	ids := []checkpoint.ID{123, 1234, 12345, 123456}
	for id := range checkpoint.ID(100) {
		ids = append(ids, id)
	}
	for _, id := range ids {
		files = append(files, rollbackName(id), rollbackName(id)+".tmp")
		dirs = append(dirs, chkName(id))
	}
	return files, dirs
}

// Dir keeps checkpoints in a directory; see the package doc for the layout.
type Dir struct {
	fs          vfs.FS
	jobDir      string
	inlineBytes int

	gate   *writeGate
	shared *registry
}

func newDir(fs vfs.FS, jobDir string, inlineBytes int) *Dir {
	return &Dir{fs: fs, jobDir: jobDir, inlineBytes: inlineBytes, gate: newWriteGate(), shared: newRegistry()}
}

// NewDir builds directory storage for job under root on fs (vfs.Default for
// the real file system). State of at most inlineBytes goes into the metadata
// (negative: never inline; 0: DefaultInlineBytes).
func NewDir(fs vfs.FS, root, job string, inlineBytes int) (*Dir, error) {
	if root == "" {
		return nil, errors.New("checkpoint directory: empty path")
	}
	if job == "" || strings.ContainsAny(job, `/\`) || job == "." || job == ".." {
		return nil, fmt.Errorf("checkpoint directory: job name %q cannot be a directory name", job)
	}
	if inlineBytes == 0 {
		inlineBytes = DefaultInlineBytes
	}
	root = fs.PathJoin(root) // cleaned: PathDir of "ck/" is "ck" itself
	d := newDir(fs, fs.PathJoin(root, job), inlineBytes)
	if err := fs.MkdirAll(d.jobDir, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint directory %s: %w", d.jobDir, err)
	}
	// NB: MkdirAll may have created root and the job directory; their
	// entries are durable only once their parents are synced.
	for _, dir := range []string{fs.PathDir(root), root, d.jobDir} {
		if err := d.syncDir(dir); err != nil {
			return nil, fmt.Errorf("checkpoint directory %s: %w", d.jobDir, err)
		}
	}
	return d, nil
}

// JobDir is the directory holding this job's checkpoints.
func (d *Dir) JobDir() string { return d.jobDir }

func (d *Dir) Describe() string { return d.jobDir }

// SamePlace reports whether storages a and b hold their checkpoints in one
// place: one directory once made absolute and its links resolved, or one
// bucket, prefix and job with the same query (it may pick the server: two
// endpoints are two places). Memory storage is no place.
func SamePlace(a, b Storage) bool {
	pa, pb := placeOf(a), placeOf(b)
	return pa != "" && pa == pb
}

func placeOf(s Storage) string {
	switch s := s.(type) {
	case *Dir:
		p := s.jobDir
		if abs, err := filepath.Abs(p); err == nil {
			p = abs
		}
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		return "file://" + p
	case *Blob:
		return s.place
	}
	return ""
}

// CheckpointDir is the directory of checkpoint id.
func (d *Dir) CheckpointDir(id checkpoint.ID) string {
	return d.fs.PathJoin(d.jobDir, chkName(id))
}

func chkName(id checkpoint.ID) string { return fmt.Sprintf("chk-%d", id) }

func (d *Dir) Reserve(id checkpoint.ID) error {
	dir := d.CheckpointDir(id)
	if err := d.fs.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("checkpoint %d: reserve %s: %w", id, dir, err)
	}
	if err := d.syncDir(d.jobDir); err != nil {
		return fmt.Errorf("checkpoint %d: reserve: %w", id, err)
	}
	d.shared.reserve(id)
	return nil
}

func (d *Dir) WriteState(id checkpoint.ID, h checkpoint.Handle, data []byte) (checkpoint.Handle, error) {
	h.SizeBytes = int64(len(data))
	if len(data) <= d.inlineBytes {
		h.Path = ""
		h.Inline = slices.Clone(data)
		if h.Inline == nil {
			h.Inline = []byte{}
		}
		return h, nil
	}
	name := fmt.Sprintf("%s.%d.%s", url.PathEscape(h.Operator), h.Subtask, url.PathEscape(h.Kind))
	if h.Kind == "keyed" {
		name += fmt.Sprintf(".kg%d-%d", h.KeyGroups.First, h.KeyGroups.Last)
	}
	if h.File != "" {
		name += "." + url.PathEscape(h.File)
	}
	rel := chkName(id) + "/" + name
	err := d.gate.write(id, func(context.Context) error {
		_, err := d.writeFile(d.fs.PathJoin(d.jobDir, rel), bytes.NewReader(data))
		return err
	})
	if err != nil {
		return h, fmt.Errorf("checkpoint %d: write %s: %w", id, handleName(h), err)
	}
	h.Inline = nil
	h.Path = rel
	return h, nil
}

// WriteShared writes a file under shared/, which no checkpoint's discard
// deletes while another completed one references it.
func (d *Dir) WriteShared(id checkpoint.ID, h checkpoint.Handle, r io.Reader) (checkpoint.Handle, error) {
	h.Inline, h.Path = nil, sharedName(id, h)
	err := d.gate.write(id, func(context.Context) error {
		dir := d.fs.PathDir(d.fs.PathJoin(d.jobDir, h.Path))
		if err := d.fs.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for _, p := range []string{d.jobDir, d.fs.PathJoin(d.jobDir, SharedDir)} {
			if err := d.syncDir(p); err != nil {
				return err
			}
		}
		d.shared.wrote(id, h.Path)
		n, err := d.writeFile(d.fs.PathJoin(d.jobDir, h.Path), r)
		h.SizeBytes = n
		if err != nil {
			return err
		}
		return d.syncDir(dir)
	})
	if err != nil {
		return h, fmt.Errorf("checkpoint %d: %w", id, sharedErr("write", h, err))
	}
	return h, nil
}

// OpenState streams the state a handle points at.
func (d *Dir) OpenState(h checkpoint.Handle) (io.ReadCloser, error) {
	if h.Path == "" {
		return io.NopCloser(bytes.NewReader(h.Inline)), nil
	}
	if err := checkpoint.ValidatePath(h.Path); err != nil {
		return nil, err
	}
	p := d.fs.PathJoin(d.jobDir, h.Path)
	f, err := d.fs.Open(p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", handleName(h), damaged(err))
	}
	st, err := f.Stat()
	if err == nil && st.Size() != h.SizeBytes {
		err = fmt.Errorf("%w: %s is %d bytes, the metadata says %d", checkpoint.ErrStateDamaged, p, st.Size(), h.SizeBytes)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("read %s: %w", handleName(h), err)
	}
	return f, nil
}

// RemoveOrphans deletes the shared files no completed checkpoint
// references (a crash during a discard, or during an upload, leaves
// such). Call it at start, after Scan, before any checkpoint.
func (d *Dir) RemoveOrphans() error { return d.removeOrphans(nil) }

// removeOrphans deletes the orphaned shared files if alive, asked after
// the listing, allows (Led: a term paused before the listing must not
// delete what a new leader wrote meanwhile).
func (d *Dir) removeOrphans(alive func() error) error {
	root := d.fs.PathJoin(d.jobDir, SharedDir)
	ops, err := d.fs.List(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list %s: %w", root, err)
	}
	var all []string
	for _, op := range ops {
		names, err := d.fs.List(d.fs.PathJoin(root, op))
		if err != nil {
			return fmt.Errorf("list %s: %w", d.fs.PathJoin(root, op), err)
		}
		for _, n := range names {
			all = append(all, SharedDir+"/"+op+"/"+n)
		}
	}
	if alive != nil {
		if err := alive(); err != nil {
			return err
		}
	}
	return d.removeShared(d.shared.orphans(all))
}

func (d *Dir) removeShared(paths []string) error {
	var errs []error
	for _, p := range paths {
		if err := d.fs.Remove(d.fs.PathJoin(d.jobDir, p)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (d *Dir) ReadState(h checkpoint.Handle) ([]byte, error) {
	if h.Path == "" {
		return h.Inline, nil
	}
	if err := checkpoint.ValidatePath(h.Path); err != nil {
		return nil, err
	}
	p := d.fs.PathJoin(d.jobDir, h.Path)
	data, err := readFile(d.fs, p, maxStateFileBytes)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", handleName(h), damaged(err))
	}
	if int64(len(data)) != h.SizeBytes {
		return nil, fmt.Errorf("read %s: %w: %s is %d bytes, the metadata says %d", handleName(h), checkpoint.ErrStateDamaged, p, len(data), h.SizeBytes)
	}
	return data, nil
}

// maxStateFileBytes bounds one state file read back.
const maxStateFileBytes = 1 << 40

// Commit writes the metadata to a temporary file, syncs it, renames it into
// place and syncs the directory. State files were synced when written; the
// directory sync before the rename makes their entries durable first.
func (d *Dir) Commit(m *checkpoint.Metadata) error {
	if err := d.shared.check(m); err != nil {
		return err
	}
	dir := d.CheckpointDir(m.ID)
	if err := d.fs.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("checkpoint %d: %w", m.ID, err)
	}
	if err := d.syncDir(dir); err != nil {
		return fmt.Errorf("checkpoint %d: %w", m.ID, err)
	}
	tmp := d.fs.PathJoin(dir, MetadataFile+".tmp")
	final := d.fs.PathJoin(dir, MetadataFile)
	data, err := checkpoint.Encode(m)
	if err != nil {
		return err
	}
	if _, err := d.writeFile(tmp, bytes.NewReader(data)); err != nil {
		return fmt.Errorf("checkpoint %d: write metadata: %w", m.ID, err)
	}
	if err := d.fs.Rename(tmp, final); err != nil {
		return fmt.Errorf("checkpoint %d: rename %s to %s: %w", m.ID, tmp, final, err)
	}
	if err := d.syncDir(dir); err != nil {
		return fmt.Errorf("checkpoint %d: %w", m.ID, err)
	}
	if err := d.removeShared(d.shared.committed(m)); err != nil {
		return fmt.Errorf("checkpoint %d completed, but %w: %w", m.ID, ErrFreedFilesStay, err)
	}
	return nil
}

// Scan lists chk-<id> directories. Metadata proven damaged (ProvenDamage)
// is reported in Damaged by path and otherwise ignored, so Latest falls
// back to the previous checkpoint; any other error reading a checkpoint
// fails Scan with ErrUnavailable, naming the file, since it proves
// nothing about the checkpoint.
func (d *Dir) Scan() (Scan, error) {
	var s Scan
	names, err := d.fs.List(d.jobDir)
	if err != nil {
		return Scan{}, fmt.Errorf("list checkpoint directory %s: %w", d.jobDir, unavailable(err))
	}
	for _, name := range names {
		id, ok := parseChk(name)
		if !ok {
			if err := d.scanRollback(&s, name); err != nil {
				return Scan{}, err
			}
			continue
		}
		dir := d.CheckpointDir(id)
		st, err := d.fs.Stat(dir)
		if errors.Is(err, os.ErrNotExist) || err == nil && !st.IsDir() {
			continue // not a checkpoint, whatever its name
		}
		if err != nil {
			return Scan{}, fmt.Errorf("scan checkpoints: %s: %w", dir, unavailable(err))
		}
		s.MaxID = max(s.MaxID, id)
		path := d.fs.PathJoin(dir, MetadataFile)
		if _, err := d.fs.Stat(path); errors.Is(err, os.ErrNotExist) {
			s.Incomplete = append(s.Incomplete, id)
			continue
		} else if err != nil {
			return Scan{}, fmt.Errorf("scan checkpoints: checkpoint metadata %s: %w", path, unavailable(err))
		}
		m, err := ReadMetadata(d.fs, path)
		if err == nil && (m.ID != id || m.Job != d.fs.PathBase(d.jobDir)) {
			err = fmt.Errorf("%s: %w: it describes checkpoint %d of job %q", path, checkpoint.ErrCorrupt, m.ID, m.Job)
		}
		switch {
		case err == nil:
			s.Completed = append(s.Completed, m)
		case ProvenDamage(err) || plantedDefect3.Load():
			s.Damaged = append(s.Damaged, Damaged{ID: id, Path: path, Err: err})
		default:
			// NB: an I/O error is not damage. Skipping the checkpoint
			// would restore an older one and delete this one, and sinks
			// whose commits cannot be taken back would write its
			// interval again.
			return Scan{}, fmt.Errorf("scan checkpoints: %w", unavailable(err))
		}
	}
	slices.SortFunc(s.Completed, byID)
	slices.Sort(s.Incomplete)
	slices.SortFunc(s.Damaged, func(a, b Damaged) int { return cmp.Compare(a.ID, b.ID) })
	settleRollbacks(&s)
	d.shared.reset(s.Completed)
	return s, nil
}

func byID(a, b *checkpoint.Metadata) int { return cmp.Compare(a.ID, b.ID) }

func parseChk(name string) (checkpoint.ID, bool) {
	rest, ok := strings.CutPrefix(name, "chk-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	if err != nil || n == 0 || strconv.FormatUint(n, 10) != rest {
		return 0, false
	}
	return checkpoint.ID(n), true
}

// ReadMetadata reads and decodes a metadata file; every error names it.
// A file too large to be metadata wraps checkpoint.ErrCorrupt.
func ReadMetadata(fs vfs.FS, path string) (*checkpoint.Metadata, error) {
	data, err := readFile(fs, path, checkpoint.MaxMetadataBytes+64)
	if errors.Is(err, errFileTooLarge) {
		err = fmt.Errorf("%w: %w", checkpoint.ErrCorrupt, err)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint metadata %s: %w", path, err)
	}
	m, err := checkpoint.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("checkpoint metadata %s: %w", path, err)
	}
	return m, nil
}

func (d *Dir) Discard(id checkpoint.ID) error {
	defer d.gate.discard(id)()
	dir := d.CheckpointDir(id)
	st, err := d.fs.Stat(dir)
	switch {
	case err == nil && !st.IsDir():
		return nil // a file named like a checkpoint: not Weir's to delete
	case errors.Is(err, os.ErrNotExist):
		// Nothing of its own was written: its state was inline or shared
		// (an incremental heap checkpoint's), and its commit failed
		// before it made the directory.
	default:
		// The metadata goes first, durably: from then on the checkpoint
		// is incomplete, and an incomplete checkpoint is deleted at the
		// next start.
		if err := d.fs.Remove(d.fs.PathJoin(dir, MetadataFile)); err == nil {
			if err := d.syncDir(dir); err != nil {
				return fmt.Errorf("discard checkpoint %d: %w", id, err)
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("discard checkpoint %d: %w", id, err)
		}
		if err := d.fs.RemoveAll(dir); err != nil {
			return fmt.Errorf("discard checkpoint %d: %w", id, err)
		}
	}
	// Shared files go last: a crash before leaves them unreferenced, and
	// the next start deletes them.
	if err := d.removeShared(d.shared.discarded(id)); err != nil {
		return fmt.Errorf("discard checkpoint %d: shared files: %w", id, err)
	}
	return nil
}

// Lock takes the job's checkpoint directory for this run.
func (d *Dir) Lock() (io.Closer, error) {
	if err := d.refuseLed(); err != nil {
		return nil, err
	}
	return lockfile.Lock(d.fs, d.fs.PathJoin(d.jobDir, LockFile), "checkpoint directory "+d.jobDir)
}

func (d *Dir) DiscardState(hs []checkpoint.Handle) error {
	errs := []error{d.removeShared(d.shared.unreferenced(hs))}
	for _, h := range hs {
		if h.Path == "" || IsShared(h) {
			continue
		}
		if err := checkpoint.ValidatePath(h.Path); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := d.fs.Remove(d.fs.PathJoin(d.jobDir, h.Path)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (d *Dir) writeFile(path string, r io.Reader) (n int64, err error) {
	f, err := d.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return 0, err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = d.fs.Remove(path) // best effort: leave no partial file behind
		}
	}()
	if n, err = io.Copy(f, r); err != nil {
		return n, err
	}
	return n, f.Sync()
}

func (d *Dir) syncDir(dir string) error { return SyncDir(d.fs, dir) }

// SyncDir makes the entries of directory dir durable (fsync).
func SyncDir(fs vfs.FS, dir string) error {
	f, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return f.Close()
}

func readFile(fs vfs.FS, path string, maxBytes int64) ([]byte, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > maxBytes {
		return nil, fmt.Errorf("%w of %d bytes", errFileTooLarge, maxBytes)
	}
	return data, nil
}

// errFileTooLarge is a file read back that exceeds its bound.
var errFileTooLarge = errors.New("larger than the limit")

// beside names the checkpoints in the directory path would be in, if it
// holds any (the newest few), for an error.
func beside(fs vfs.FS, path string) string {
	dir := fs.PathDir(fs.PathJoin(path, ".")) // cleaned: no trailing slash
	names, err := fs.List(dir)
	if err != nil {
		return ""
	}
	var ids []checkpoint.ID
	for _, n := range names {
		if id, ok := parseChk(n); ok {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return ""
	}
	slices.Sort(ids)
	var chks []string
	for _, id := range ids[max(0, len(ids)-5):] {
		chks = append(chks, fmt.Sprintf("chk-%d", id))
	}
	return fmt.Sprintf(" (%s holds %s)", dir, strings.Join(chks, ", "))
}

// OpenCheckpoint opens the completed checkpoint at path: a chk-<id>
// directory or its _metadata file, anywhere. It returns the metadata and
// storage to read its state (rooted at the checkpoint's job directory).
// Every error names the path and says what is wrong.
func OpenCheckpoint(fs vfs.FS, path string) (*checkpoint.Metadata, Storage, error) {
	st, err := fs.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist) && strings.EqualFold(path, "latest"):
		return nil, nil, fmt.Errorf("checkpoint %s: %w: to restore the latest checkpoint, write latest", path, err)
	case errors.Is(err, os.ErrNotExist):
		return nil, nil, fmt.Errorf("checkpoint %s: %w: give the chk-<id> directory of a completed checkpoint or savepoint%s, or latest", path, err, beside(fs, path))
	case err != nil:
		return nil, nil, fmt.Errorf("checkpoint %s: %w", path, unavailable(err))
	}
	// The directory as PathJoin cleans it: with a trailing slash (as shell
	// completion writes a directory), PathDir would be the checkpoint's
	// directory itself, not its job's.
	meta := fs.PathJoin(path, MetadataFile)
	if !st.IsDir() {
		meta = path
	}
	chkDir := fs.PathDir(meta)
	id, ok := parseChk(fs.PathBase(chkDir))
	if !ok {
		return nil, nil, fmt.Errorf("checkpoint %s: not a checkpoint: expected a chk-<id> directory or its %s file", path, MetadataFile)
	}
	if _, err := fs.Stat(meta); errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("checkpoint %s: no %s: the checkpoint never completed (%w)", path, MetadataFile, err)
	} else if err != nil {
		return nil, nil, fmt.Errorf("checkpoint %s: %w", meta, unavailable(err))
	}
	m, err := ReadMetadata(fs, meta)
	if err != nil && !ProvenDamage(err) {
		err = unavailable(err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if m.ID != id {
		return nil, nil, fmt.Errorf("checkpoint %s: %w: the metadata describes checkpoint %d", path, checkpoint.ErrCorrupt, m.ID)
	}
	return m, newDir(fs, fs.PathDir(chkDir), DefaultInlineBytes), nil
}
