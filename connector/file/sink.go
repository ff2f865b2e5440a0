package file

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/storage"
)

// SinkConfig configures Sink.
type SinkConfig[T any] struct {
	FS  vfs.FS // default the real file system
	Dir string
	// Format appends one record's bytes (a line, with its newline) to dst.
	Format func(dst []byte, v T) []byte
}

// Sink writes records into files in cfg.Dir with two-phase commit:
//
//   - records go to an in-progress file, .part-<subtask>-<n>.inprogress;
//   - at checkpoint n's snapshot the file is synced and renamed to
//     .part-<subtask>-<n>.pending (pre-commit), and the snapshot records it;
//   - when checkpoint n (or a later one) completes, pending files are
//     renamed to part-<subtask>-<n> (commit);
//   - on restore, the pending files the checkpoint recorded are committed
//     (commit is idempotent) and every other file of this sink that begins
//     with "." is deleted.
//
// Committed files are those whose names do not begin with "."; their
// records appear exactly once, once per checkpoint. Without checkpoints
// (mode none) everything is committed when the input ends.
func Sink[T any](cfg SinkConfig[T]) (func() weir.SinkWriter[T], error) {
	if cfg.FS == nil {
		cfg.FS = vfs.Default
	}
	if cfg.Dir == "" || cfg.Format == nil {
		return nil, errors.New("file sink: a directory and a format are required")
	}
	if err := cfg.FS.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("output directory %s: %w", cfg.Dir, err)
	}
	return func() weir.SinkWriter[T] { return &fileSink[T]{cfg: cfg} }, nil
}

type fileSink[T any] struct {
	cfg     SinkConfig[T]
	ctx     *operator.Context
	f       vfs.File
	w       *bufio.Writer
	name    string // of the in-progress file
	seq     int
	buf     []byte
	pending []checkpoint.ID // pre-committed (or being so), not yet committed
	// detached are files taken out of writing at a snapshot whose
	// pre-commit (sync, rename to pending) may not have run yet.
	detached []*detachedFile
}

// detachedFile is an in-progress file handed to the asynchronous part of a
// snapshot. NB: when another operator's asynchronous part fails first, this
// one never runs; the next snapshot's then pre-commits the file, so a
// checkpoint completes only once every file its state lists is pending.
type detachedFile struct {
	mu       sync.Mutex
	f        vfs.File
	from, to string
	id       checkpoint.ID
	done     bool
	closed   bool // the sink closed it unsynced; it must not become pending
}

// preCommit syncs, closes and renames the file to its pending name, once.
func (d *detachedFile) preCommit(fs vfs.FS, dir string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		return nil
	}
	if d.closed {
		return fmt.Errorf("file sink: %s was closed before its pre-commit", d.from)
	}
	if d.f != nil {
		if err := d.f.Sync(); err != nil {
			return fmt.Errorf("file sink: sync %s: %w", d.from, err)
		}
		if err := d.f.Close(); err != nil {
			return fmt.Errorf("file sink: close %s: %w", d.from, err)
		}
		d.f = nil
	}
	if err := fs.Rename(d.from, d.to); err != nil {
		return fmt.Errorf("file sink: pre-commit %s: %w", d.to, err)
	}
	if err := storage.SyncDir(fs, dir); err != nil {
		return fmt.Errorf("file sink: %w", err)
	}
	d.done = true
	return nil
}

func (s *fileSink[T]) path(name string) string { return s.cfg.FS.PathJoin(s.cfg.Dir, name) }

func pendingName(sub int, id checkpoint.ID) string {
	return fmt.Sprintf(".part-%d-%d.pending", sub, id)
}

func committedName(sub int, id checkpoint.ID) string { return fmt.Sprintf("part-%d-%d", sub, id) }

// parsePart parses ".part-<sub>-<rest>" into sub and rest.
func parsePart(name string) (sub int, rest string, ok bool) {
	tail, ok := strings.CutPrefix(name, ".part-")
	if !ok {
		return 0, "", false
	}
	subStr, rest, ok := strings.Cut(tail, "-")
	sub, err := strconv.Atoi(subStr)
	return sub, rest, ok && err == nil
}

func (s *fileSink[T]) Open(ctx *operator.Context) error {
	s.ctx = ctx
	recorded := map[string]bool{}
	if ctx.Restore != nil {
		items, err := state.RestoreList(ctx.Restore.Handles, ctx.Restore.Read, state.Union, "pending", ctx.Subtask, ctx.Parallelism)
		if err != nil {
			return err
		}
		for _, it := range items {
			sub, id, err := decodePending(it)
			if err != nil {
				return fmt.Errorf("restore file sink: %w", err)
			}
			recorded[pendingName(sub, id)] = true
			if sub%ctx.Parallelism == ctx.Subtask {
				if err := s.commit(sub, id); err != nil {
					return err
				}
			}
		}
	}
	// Delete what a failed or killed attempt left: in-progress files and
	// pending files no completed checkpoint recorded.
	names, err := s.cfg.FS.List(s.cfg.Dir)
	if err != nil {
		return fmt.Errorf("output directory %s: %w", s.cfg.Dir, err)
	}
	for _, n := range names {
		sub, _, ok := parsePart(n)
		if !ok || sub%ctx.Parallelism != ctx.Subtask || recorded[n] {
			continue
		}
		if err := s.cfg.FS.Remove(s.path(n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("delete stray output file %s: %w", s.path(n), err)
		}
	}
	return s.syncDir()
}

func encodePending(sub int, id checkpoint.ID) []byte {
	return []byte(fmt.Sprintf("%d/%d", sub, id))
}

func decodePending(b []byte) (int, checkpoint.ID, error) {
	subStr, idStr, ok := strings.Cut(string(b), "/")
	sub, err1 := strconv.Atoi(subStr)
	id, err2 := strconv.ParseUint(idStr, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("bad pending-file record %q", b)
	}
	return sub, checkpoint.ID(id), nil
}

// commit renames a pending file to its committed name. It is idempotent: a
// file already committed is fine; one that is neither pending nor committed
// is lost output, and an error.
func (s *fileSink[T]) commit(sub int, id checkpoint.ID) error {
	from, to := s.path(pendingName(sub, id)), s.path(committedName(sub, id))
	err := s.cfg.FS.Rename(from, to)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		if err != nil {
			return fmt.Errorf("commit %s: %w", to, err)
		}
		return nil
	}
	if _, serr := s.cfg.FS.Stat(to); serr == nil {
		return nil
	}
	return fmt.Errorf("commit %s: pending file %s is missing: its records are lost (was the output directory changed by hand?)", to, from)
}

func (s *fileSink[T]) Write(v T) error {
	if s.w == nil {
		s.seq++
		s.name = fmt.Sprintf(".part-%d-%d-%d.inprogress", s.ctx.Subtask, s.ctx.Now().UnixNano(), s.seq)
		f, err := s.cfg.FS.Create(s.path(s.name), vfs.WriteCategoryUnspecified)
		if err != nil {
			return fmt.Errorf("file sink: %w", err)
		}
		s.f, s.w = f, bufio.NewWriterSize(f, 256<<10)
	}
	s.buf = s.cfg.Format(s.buf[:0], v)
	if _, err := s.w.Write(s.buf); err != nil {
		return fmt.Errorf("file sink: write %s: %w", s.path(s.name), err)
	}
	return nil
}

// Snapshot pre-commits: the in-progress file is flushed here, and synced
// and renamed to its pending name in the asynchronous part, before the task
// acknowledges the checkpoint.
func (s *fileSink[T]) Snapshot(id checkpoint.ID) (operator.Async, error) {
	if s.w != nil {
		if err := s.w.Flush(); err != nil {
			return nil, fmt.Errorf("file sink: flush %s: %w", s.path(s.name), err)
		}
		s.detached = append(s.detached, &detachedFile{f: s.f, from: s.path(s.name), to: s.path(pendingName(s.ctx.Subtask, id)), id: id})
		s.f, s.w = nil, nil
		s.pending = append(s.pending, id)
	}
	items := make([][]byte, len(s.pending))
	for i, p := range s.pending {
		items[i] = encodePending(s.ctx.Subtask, p)
	}
	write := s.ctx.SnapshotList(state.Union, "pending", items)
	todo := slices.Clone(s.detached)
	return func(w operator.Writer) ([]checkpoint.Handle, error) {
		for _, d := range todo {
			if err := d.preCommit(s.cfg.FS, s.cfg.Dir); err != nil {
				return nil, err
			}
		}
		return write(w)
	}, nil
}

// NotifyComplete commits every pending file up to checkpoint id. Files of
// an aborted checkpoint stay pending and are committed by the next one.
func (s *fileSink[T]) NotifyComplete(id checkpoint.ID) error {
	keep := s.pending[:0]
	committed := false
	for _, p := range s.pending {
		if p > id {
			keep = append(keep, p)
			continue
		}
		if err := s.commit(s.ctx.Subtask, p); err != nil {
			return err
		}
		committed = true
	}
	s.pending = keep
	// A completed checkpoint ran the pre-commit of every file up to it.
	s.detached = slices.DeleteFunc(s.detached, func(d *detachedFile) bool { return d.id <= id })
	if committed {
		return s.syncDir()
	}
	return nil
}

// Finish commits everything: the input has ended and, with checkpoints,
// the final checkpoint has completed.
func (s *fileSink[T]) Finish() error {
	for _, d := range s.detached {
		if err := d.preCommit(s.cfg.FS, s.cfg.Dir); err != nil {
			return err
		}
	}
	if err := s.NotifyComplete(^checkpoint.ID(0)); err != nil {
		return err
	}
	if s.w == nil {
		return nil
	}
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("file sink: flush %s: %w", s.path(s.name), err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("file sink: sync %s: %w", s.path(s.name), err)
	}
	if err := s.f.Close(); err != nil {
		return err
	}
	s.f, s.w = nil, nil
	final := s.path(fmt.Sprintf("part-%d-end-%d", s.ctx.Subtask, s.ctx.Now().UnixNano()))
	if err := s.cfg.FS.Rename(s.path(s.name), final); err != nil {
		return fmt.Errorf("file sink: commit %s: %w", final, err)
	}
	return s.syncDir()
}

func (s *fileSink[T]) NotifyAborted(checkpoint.ID) {}

func (s *fileSink[T]) Close() error {
	for _, d := range s.detached {
		d.mu.Lock()
		if d.f != nil {
			d.f.Close()
			d.f, d.closed = nil, true
		}
		d.mu.Unlock()
	}
	if s.f != nil {
		err := s.f.Close()
		s.f, s.w = nil, nil
		return err
	}
	return nil
}

func (s *fileSink[T]) syncDir() error {
	if err := storage.SyncDir(s.cfg.FS, s.cfg.Dir); err != nil {
		return fmt.Errorf("file sink: %w", err)
	}
	return nil
}
