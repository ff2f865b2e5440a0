// Package writeahead turns any batch writer into a sink that writes at the
// barrier: for outputs with no transactions (standard output, an HTTP
// endpoint, a plain file, a store without transactions).
//
// Records are buffered in the sink's checkpointed state, so a checkpoint
// covers them. When checkpoint n completes, the batch of n (every record
// since the previous snapshot) is written in one go, and a marker records
// durably that n was written. A restore writes again only the batches that
// have no marker.
//
// What remains: a crash between a batch's write and its marker repeats that
// one batch after the restore. The writer can make that harmless by being
// idempotent per checkpoint: it receives the checkpoint id with the batch.
// A restore of a checkpoint older than the batches written writes the
// records after it again (the sink warns): what was written cannot be
// taken back. Without checkpoints, batches are written when the input ends.
//
// A marker names the job, the operator and the subtask, and holds the
// lineage of the runs it counts (operator.Context.Lineage) with the id: a
// run that started over numbers its checkpoints from 1 again, and the
// markers of an earlier lineage say nothing of its batches.
package writeahead

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/storage"
)

// Batch is what a writer gets: the records one subtask took in between two
// snapshots, and the checkpoint that covers them.
type Batch[T any] struct {
	// Checkpoint covers the records; with Subtask, it names the batch
	// uniquely (0 when written at the end of input without checkpoints).
	Checkpoint checkpoint.ID
	// Subtask is the subtask that took the records in.
	Subtask int
	Records []T
}

// Config configures Sink.
type Config[T any] struct {
	// Write writes one batch; an error fails the job, which restores and
	// writes the batch again. Required.
	Write func(ctx context.Context, b Batch[T]) error
	// MarkerDir holds the markers of written batches, one small file per
	// job, operator and subtask; it must survive the process (put it
	// beside the checkpoints). Required.
	MarkerDir string
	// FormerMarkerDirs are marker directories of the runs a restore
	// continues that are not MarkerDir (the markers beside a checkpoint
	// restored from another checkpoint directory): read, never written. A
	// batch a marker in any of them says was written is not written again.
	FormerMarkerDirs []string
	// FS is MarkerDir's file system; default the real one.
	FS vfs.FS
	// Codec encodes records in the checkpointed state. Default codec.For[T].
	Codec codec.Codec[T]
}

// Sink returns a write-ahead sink over cfg.Write. It fails now if the
// marker directory cannot be created.
func Sink[T any](cfg Config[T]) (func() weir.SinkWriter[T], error) {
	if cfg.Write == nil || cfg.MarkerDir == "" {
		return nil, errors.New("write-ahead sink: Write and MarkerDir are required")
	}
	if cfg.FS == nil {
		cfg.FS = vfs.Default
	}
	if cfg.Codec == nil {
		cfg.Codec = codec.For[T]()
	}
	if err := cfg.FS.MkdirAll(cfg.MarkerDir, 0o755); err != nil {
		return nil, fmt.Errorf("write-ahead sink: marker directory %s: %w", cfg.MarkerDir, err)
	}
	return func() weir.SinkWriter[T] { return &sink[T]{cfg: cfg} }, nil
}

// pending is a batch taken at a snapshot and not yet written.
type pending[T any] struct {
	sub     int
	id      checkpoint.ID
	records []T
}

type sink[T any] struct {
	cfg     Config[T]
	ctx     *operator.Context
	buf     []T
	pending []pending[T]
	// written holds, per subtask that took batches in, the newest
	// checkpoint whose batch was written: batches are written in order.
	written map[int]checkpoint.ID
}

func (s *sink[T]) Open(ctx *operator.Context) error {
	s.ctx, s.written = ctx, map[int]checkpoint.ID{}
	// NB: made here too, not only in Sink: removed while the job ran, every
	// batch would be written again at every restart, its marker failing.
	if err := s.cfg.FS.MkdirAll(s.jobDir(), 0o755); err != nil {
		return fmt.Errorf("write-ahead sink %s: marker directory %s: %w", ctx.UID, s.jobDir(), err)
	}
	if ctx.Restore == nil {
		return nil
	}
	// Every subtask gets every batch and takes those of the old subtasks
	// it stands for now: a subtask's batches stay together, in order, as
	// its marker needs.
	items, err := state.RestoreList(ctx.Restore.Handles, ctx.Restore.Read, state.Union, "batches", ctx.Subtask, ctx.Parallelism)
	if err != nil {
		return err
	}
	for _, it := range items {
		p, err := s.decode(it)
		if err != nil {
			return operator.Permanent(fmt.Errorf("write-ahead sink: restore: %w", err))
		}
		if p.sub%ctx.Parallelism != ctx.Subtask {
			continue
		}
		if _, ok := s.written[p.sub]; !ok {
			if s.written[p.sub], err = s.marker(p.sub); err != nil {
				return err
			}
		}
		if p.id > s.written[p.sub] {
			s.pending = append(s.pending, p)
		}
	}
	for sub, id := range s.written {
		if id > ctx.Restore.Checkpoint {
			ctx.Logger.Warn("write-ahead sink: the restored checkpoint is older than batches already written, whose records are written again: a write-ahead sink cannot take back what it wrote",
				"sink", ctx.UID, "subtask", sub, "checkpoint", ctx.Restore.Checkpoint, "written-up-to", id)
		}
		if len(s.pending) > 0 {
			// Before a batch is written again: a marker that cannot be
			// recorded would write it again at every restart.
			if err := s.mark(sub, id); err != nil {
				return err
			}
		}
	}
	// Every batch the restored checkpoint holds is covered by it.
	return s.writeUpTo(ctx.Restore.Checkpoint)
}

func (s *sink[T]) Write(v T) error {
	s.buf = append(s.buf, v)
	return nil
}

// Snapshot takes the buffered records as the batch of checkpoint id; the
// state holds every batch not yet written.
func (s *sink[T]) Snapshot(id checkpoint.ID) (operator.Async, error) {
	if len(s.buf) > 0 {
		s.pending = append(s.pending, pending[T]{sub: s.ctx.Subtask, id: id, records: s.buf})
		s.buf = nil
	}
	batches := append([]pending[T](nil), s.pending...)
	c := s.ctx
	return func(w operator.Writer) ([]checkpoint.Handle, error) {
		items := make([][]byte, len(batches))
		for i, p := range batches {
			items[i] = s.encode(p)
		}
		return c.SnapshotList(state.Union, "batches", items)(w)
	}, nil
}

// NotifyComplete writes, in order, every batch up to checkpoint id.
func (s *sink[T]) NotifyComplete(id checkpoint.ID) error { return s.writeUpTo(id) }

func (s *sink[T]) writeUpTo(id checkpoint.ID) error {
	keep := s.pending[:0]
	for _, p := range s.pending {
		if p.id > id {
			keep = append(keep, p)
			continue
		}
		if err := s.cfg.Write(context.Background(), Batch[T]{Checkpoint: p.id, Subtask: p.sub, Records: p.records}); err != nil {
			return fmt.Errorf("write-ahead sink %s: write the batch of checkpoint %d: %w", s.ctx.UID, p.id, err)
		}
		// NB: a crash here repeats this batch after the restore.
		if err := s.mark(p.sub, p.id); err != nil {
			return err
		}
	}
	s.pending = keep
	return nil
}

// Finish writes what is buffered when there are no checkpoints; with them,
// the final checkpoint's completion writes it.
func (s *sink[T]) Finish() error {
	if s.ctx.CheckpointingEnabled || len(s.buf) == 0 {
		return nil
	}
	err := s.cfg.Write(context.Background(), Batch[T]{Subtask: s.ctx.Subtask, Records: s.buf})
	s.buf = nil
	return err
}

func (s *sink[T]) NotifyAborted(checkpoint.ID) {}
func (s *sink[T]) Close() error                { return nil }

// jobDir holds the markers of the job's sinks: jobs that share MarkerDir
// keep theirs apart.
func (s *sink[T]) jobDir() string {
	return s.cfg.FS.PathJoin(s.cfg.MarkerDir, url.PathEscape(s.ctx.Job))
}

// markerPath is the marker of the batches operator uid's subtask sub took.
func (s *sink[T]) markerPath(sub int) string {
	return s.cfg.FS.PathJoin(s.jobDir(), s.markerName(sub))
}

func (s *sink[T]) markerName(sub int) string {
	return url.PathEscape(s.ctx.UID) + "-" + strconv.Itoa(sub)
}

// marker reads the newest checkpoint of the run's lineage whose batch of
// subtask sub was written (0: none), by the markers in MarkerDir and in
// FormerMarkerDirs.
func (s *sink[T]) marker(sub int) (checkpoint.ID, error) {
	var newest checkpoint.ID
	for _, dir := range append([]string{s.cfg.MarkerDir}, s.cfg.FormerMarkerDirs...) {
		id, err := s.markerIn(dir, sub)
		if err != nil {
			return 0, err
		}
		newest = max(newest, id)
	}
	return newest, nil
}

// markerIn reads the marker of subtask sub in marker directory dir. A
// marker of Weir before job directories and lineages (dir/<uid>-<sub>, the
// id alone) counts.
func (s *sink[T]) markerIn(dir string, sub int) (checkpoint.ID, error) {
	path := s.cfg.FS.PathJoin(dir, url.PathEscape(s.ctx.Job), s.markerName(sub))
	f, err := s.cfg.FS.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		path = s.cfg.FS.PathJoin(dir, s.markerName(sub))
		f, err = s.cfg.FS.Open(path)
	}
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, fmt.Errorf("write-ahead sink: read marker: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 512))
	if err != nil {
		return 0, fmt.Errorf("write-ahead sink: read marker %s: %w", path, err)
	}
	text := strings.TrimSpace(string(b))
	lineage, idText, ok := strings.Cut(text, " ")
	switch {
	case !ok: // the id alone, of Weir before lineages
		lineage, idText = "", text
	case lineage == "-": // written by a run of no known lineage
		lineage = ""
	}
	id, err := strconv.ParseUint(idText, 10, 64)
	if err != nil {
		return 0, operator.Permanent(fmt.Errorf("write-ahead sink: marker %s is damaged (%q): %w", path, b, err))
	}
	if lineage != "" && s.ctx.Lineage != "" && lineage != s.ctx.Lineage {
		return 0, nil // an earlier run's, which this one did not resume
	}
	return checkpoint.ID(id), nil
}

// mark records durably that the batch of checkpoint id of subtask sub was
// written: a new file, synced, renamed over the old one.
func (s *sink[T]) mark(sub int, id checkpoint.ID) error {
	path := s.markerPath(sub)
	tmp := path + ".tmp"
	f, err := s.cfg.FS.Create(tmp, vfs.WriteCategoryUnspecified)
	if err == nil {
		if _, err = fmt.Fprintf(f, "%s %d\n", cmp.Or(s.ctx.Lineage, "-"), id); err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = s.cfg.FS.Rename(tmp, path)
	}
	if err == nil {
		err = storage.SyncDir(s.cfg.FS, s.jobDir())
	}
	if err != nil {
		return fmt.Errorf("write-ahead sink %s: record in marker directory %s that the batch of checkpoint %d was written: %w; make the directory writable (until then each restart fails before it writes a batch again)", s.ctx.UID, s.jobDir(), id, err)
	}
	s.written[sub] = id
	return nil
}

func (s *sink[T]) encode(p pending[T]) []byte {
	b := codec.AppendLen(nil, p.sub)
	b = codec.AppendLen(b, int(p.id))
	b = codec.AppendLen(b, len(p.records))
	for _, r := range p.records {
		b = s.cfg.Codec.Append(b, r)
	}
	return b
}

func (s *sink[T]) decode(b []byte) (pending[T], error) {
	var p pending[T]
	var nums [3]int
	for i := range nums {
		n, k, err := codec.ReadLen(b)
		if err != nil {
			return p, err
		}
		nums[i], b = n, b[k:]
	}
	p.sub, p.id = nums[0], checkpoint.ID(nums[1])
	p.records = make([]T, 0, min(nums[2], len(b)))
	for range nums[2] {
		v, k, err := s.cfg.Codec.Decode(b)
		if err != nil {
			return p, err
		}
		p.records, b = append(p.records, v), b[k:]
	}
	if len(b) != 0 {
		return p, fmt.Errorf("%d bytes after the last record", len(b))
	}
	return p, nil
}
