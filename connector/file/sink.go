package file

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/lockfile"
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

// ErrEarlierOutput is a sink's refusal of a directory that holds the output
// of an earlier run, when the job neither restores a checkpoint nor starts
// over.
var ErrEarlierOutput = errors.New("output of an earlier run")

// LockFile is the name of the lock file a running sink holds in its
// output directory.
const LockFile = ".weir.lock"

// MatchesSinkFiles returns a file that the sink of operator uid writing
// into dir writes and that pattern (LinesConfig.Pattern) matches, if any: a
// job that reads pattern and writes into dir would read its own output,
// committed and not, at a restore. Both are taken relative to the working
// directory and with symbolic links resolved where they exist: the
// pattern's directories up to its first wildcard, and dir.
func MatchesSinkFiles(pattern, dir, uid string) (string, bool) {
	// Element by element, as a glob matches (and MatchesUnder): the sink's
	// files are an element below dir, so only a pattern of one element
	// more whose others match dir's can match one, and only then are the
	// sink's names (tens of thousands of samples) tried.
	pe := strings.Split(resolvePattern(pattern), "/")
	dir = filepath.ToSlash(realPath(dir))
	de := strings.Split(strings.TrimSuffix(dir, "/"), "/") // "/": one element
	if len(pe) != len(de)+1 || !elementsMatch(pe[:len(de)], de) {
		return "", false
	}
	for _, name := range sinkFileSamples(uid) {
		if ok, _ := path.Match(pe[len(de)], name); ok {
			return filepath.Join(filepath.FromSlash(dir), name), true
		}
	}
	return "", false
}

// sinkFileSamples returns samples of the names the sink of operator uid
// writes: its subtask numbers and checkpoint ids each 0 to 99 and a few
// longer, so that a wildcard over either (part-*-2) matches some sample.
func sinkFileSamples(uid string) []string {
	s := fileSink[struct{}]{uid: escapeUID(uid)}
	var subs, ids []int // ids from 1, as checkpoints' are
	for n := range 100 {
		subs, ids = append(subs, n), append(ids, n+1)
	}
	subs, ids = append(subs, 123, 1234, 12345, 123456), append(ids, 123, 1234, 12345, 123456)
	var names []string
	for _, sub := range subs {
		for _, id := range ids {
			names = append(names, s.committedName(sub, checkpoint.ID(id)), s.pendingName(sub, checkpoint.ID(id)))
		}
		names = append(names, s.inProgressName(sub, 1765432109876543210, 0), s.inProgressName(sub, 1765432109876543210, 12))
	}
	return append(names, ".lineage-"+s.uid, LockFile)
}

// MatchesUnder reports whether pattern (LinesConfig.Pattern) can match a
// file that directory dir holds: one named as files are, directly in it,
// or any file inside a directory named as dirs are (file and directory
// names may hold wildcards: samples of the names a writer uses). A job
// whose input can match its own checkpoint directory would read its lock
// file and checkpoints as input at a restore. The pattern is taken as
// MatchesSinkFiles takes it; dir both absolute as given and with its
// symbolic links resolved, as a glob may reach it either way.
func MatchesUnder(pattern, dir string, files, dirs []string) bool {
	pe := strings.Split(resolvePattern(pattern), "/")
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	for _, d := range []string{abs, realPath(dir)} {
		de := strings.Split(filepath.ToSlash(d), "/")
		if len(pe) <= len(de) || !elementsMatch(pe[:len(de)], de) {
			continue
		}
		names := dirs
		if len(pe) == len(de)+1 {
			names = files // the pattern's last element names files
		}
		for _, n := range names {
			if ok, _ := path.Match(pe[len(de)], n); ok {
				return true
			}
		}
	}
	return false
}

// elementsMatch reports whether each pattern element matches the name at
// its place.
func elementsMatch(patterns, names []string) bool {
	for i, n := range names {
		if ok, _ := path.Match(patterns[i], n); !ok {
			return false
		}
	}
	return true
}

// resolvePattern is pattern absolute, with the symbolic links of its
// directories up to its first wildcard resolved (where they exist), and
// that literal prefix escaped to match only itself; in slash form.
func resolvePattern(pattern string) string {
	elems := strings.Split(filepath.ToSlash(pattern), "/")
	lit := 0 // elements before the first that holds a wildcard
	for lit < len(elems)-1 && !hasMeta(elems[lit]) {
		lit++
	}
	prefix := strings.Join(elems[:lit], "/")
	if prefix == "" && strings.HasPrefix(pattern, "/") {
		prefix = "/"
	}
	return path.Join(escapeMeta(filepath.ToSlash(realPath(prefix))), path.Join(elems[lit:]...))
}

// realPath is p absolute, with the symbolic links of its longest part that
// exists resolved: a directory a job has yet to create under a link is
// named as it will be.
func realPath(p string) string {
	if p == "" {
		p = "."
	}
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	for dir, rest := p, ""; ; dir = filepath.Dir(dir) {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(real, rest)
		}
		if filepath.Dir(dir) == dir {
			return p
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

// escapeMeta makes p a pattern (path.Match) that matches p alone.
func escapeMeta(p string) string {
	var b strings.Builder
	for _, c := range p {
		if strings.ContainsRune(`*?[\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Sink writes records into files in cfg.Dir with two-phase commit. File
// names carry the sink's UID (escaped: letters, digits and _ stay, other
// bytes become %XX), its subtask and a checkpoint id, so sinks can share a
// directory:
//
//   - records go to an in-progress file, .part-<uid>-<subtask>-….inprogress;
//   - at checkpoint n's snapshot the file is synced and renamed to
//     .part-<uid>-<subtask>-<n>.pending (pre-commit), and the snapshot
//     records it;
//   - when checkpoint n (or a later one) completes, pending files are
//     renamed to part-<uid>-<subtask>-<n> (commit);
//   - on restore of checkpoint k, the pending files it recorded are
//     committed (commit is idempotent), committed files of checkpoints
//     after k are removed (their records will be produced again), and
//     every other file of this sink that begins with "." is deleted.
//
// Committed files are those whose names do not begin with "."; their
// records appear exactly once, once per checkpoint. Without checkpoints
// (mode none) everything is committed when the input ends, as
// part-<uid>-<subtask>-end.
//
// A running sink holds a lock in the directory (LockFile): a second run
// writing there fails at start. A sink that starts from nothing refuses a
// directory holding its committed files from an earlier run, unless the
// run starts over (operator.Context.StartOver). It then records the run's
// lineage (operator.Context.Lineage) in .lineage-<uid>, before it deletes
// anything; a run that resumes a checkpoint of another lineage is refused
// (operator.ErrStartedOver).
//
// Sink fails now if the directory cannot be created or written.
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
	if err := writable(cfg.FS, cfg.Dir); err != nil {
		return nil, err
	}
	return func() weir.SinkWriter[T] { return &fileSink[T]{cfg: cfg} }, nil
}

// writable fails unless dir can be written. On the real file system it
// asks the kernel (access(2)), writing nothing: a job built only to verify
// its output (weir verify) must leave the directory as it is. Elsewhere it
// creates and removes a probe file.
func writable(fs vfs.FS, dir string) error {
	if vfs.Root(fs) == vfs.Default {
		if err := syscall.Access(dir, 2 /* W_OK */); err != nil {
			return fmt.Errorf("output directory %s is not writable: %w", dir, err)
		}
		return nil
	}
	probe := fs.PathJoin(dir, fmt.Sprintf(".weir-probe-%d-%d", os.Getpid(), probes.Add(1)))
	f, err := fs.Create(probe, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("output directory %s is not writable: %w", dir, err)
	}
	f.Close()
	if err := fs.Remove(probe); err != nil {
		return fmt.Errorf("output directory %s: %w", dir, err)
	}
	return nil
}

// probes numbers the writability probes of this process.
var probes atomic.Int64

type fileSink[T any] struct {
	cfg  SinkConfig[T]
	ctx  *operator.Context
	uid  string   // escaped for file names
	f    vfs.File // the in-progress file, nil between files
	name string   // of the in-progress file
	seq  int
	// buf holds what is formatted and not yet written to f: records are
	// formatted straight into it (no copy through a bufio.Writer).
	buf     []byte
	pending []checkpoint.ID // pre-committed (or being so), not yet committed
	// detached are files taken out of writing at a snapshot whose
	// pre-commit (sync, rename to pending) may not have run yet.
	detached []*detachedFile
	// unsynced is set by a pre-commit whose sync failed: the task fails,
	// and its restore writes the file's records again into a new file.
	unsynced atomic.Pointer[error]
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
	// unsynced is the sink's (fileSink.unsynced). NB: after a failed
	// fsync the kernel may have dropped the file's dirty pages and cleared
	// the error, and a second fsync succeeds with the data lost (as
	// PostgreSQL found in 2018): a file whose sync failed never becomes
	// pending.
	unsynced *atomic.Pointer[error]
}

// preCommit syncs, closes and renames the file to its pending name, once.
// It is idempotent: when an earlier attempt renamed the file but failed to
// sync the directory, the retry finds the file renamed and syncs again.
func (d *detachedFile) preCommit(fs vfs.FS, dir string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		return nil
	}
	if d.closed {
		return fmt.Errorf("file sink: %s was closed before its pre-commit", d.from)
	}
	if p := d.unsynced.Load(); p != nil {
		return *p
	}
	if d.f != nil {
		if err := d.f.Sync(); err != nil {
			err = fmt.Errorf("file sink: sync %s: %w (a sync again would not say whether its data is on disk: the job restores, and writes the file's records again)", d.from, err)
			d.unsynced.Store(&err)
			return err
		}
		if err := d.f.Close(); err != nil {
			return fmt.Errorf("file sink: close %s: %w", d.from, err)
		}
		d.f = nil
	}
	if err := renameOnce(fs, d.from, d.to); err != nil {
		return fmt.Errorf("file sink: pre-commit %s: %w", d.to, err)
	}
	if err := storage.SyncDir(fs, dir); err != nil {
		return fmt.Errorf("file sink: %w", err)
	}
	d.done = true
	return nil
}

// renameOnce renames from to to; a missing from with an existing to means
// an earlier attempt did it.
func renameOnce(fs vfs.FS, from, to string) error {
	err := fs.Rename(from, to)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if _, serr := fs.Stat(to); serr == nil {
		return nil
	}
	return err
}

func (s *fileSink[T]) path(name string) string { return s.cfg.FS.PathJoin(s.cfg.Dir, name) }

// escapeUID makes a UID safe and unambiguous in a file name: letters,
// digits and _ stay, every other byte becomes %XX (so "-" never appears).
func escapeUID(uid string) string {
	var b strings.Builder
	for i := range len(uid) {
		c := uid[i]
		if c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func (s *fileSink[T]) pendingName(sub int, id checkpoint.ID) string {
	return fmt.Sprintf(".part-%s-%d-%d.pending", s.uid, sub, id)
}

func (s *fileSink[T]) inProgressName(sub int, nanos int64, seq int) string {
	return fmt.Sprintf(".part-%s-%d-%d-%d.inprogress", s.uid, sub, nanos, seq)
}

func (s *fileSink[T]) committedName(sub int, id checkpoint.ID) string {
	return fmt.Sprintf("part-%s-%d-%d", s.uid, sub, id)
}

// parse parses a file name of this sink: "[.]part-<uid>-<sub>-<rest>".
func (s *fileSink[T]) parse(name string) (sub int, rest string, dot, ok bool) {
	name, dot = strings.CutPrefix(name, ".")
	tail, ok := strings.CutPrefix(name, "part-"+s.uid+"-")
	if !ok {
		return 0, "", false, false
	}
	subStr, rest, ok := strings.Cut(tail, "-")
	sub, err := strconv.Atoi(subStr)
	return sub, rest, dot, ok && err == nil
}

func (s *fileSink[T]) Open(ctx *operator.Context) error {
	s.ctx = ctx
	s.uid = escapeUID(ctx.UID)
	// NB: keyed by the directory, not by how it is written ("out",
	// "out/", "./out"): the sinks of a run that write one directory share
	// its lock, which a second descriptor of the process could not take.
	if err := ctx.Acquire("file-sink-lock:"+fileID(s.cfg.FS, s.cfg.Dir), func() (io.Closer, error) {
		return lockfile.Lock(s.cfg.FS, s.path(LockFile), "output directory "+s.cfg.Dir)
	}); err != nil {
		return operator.Permanent(err)
	}
	if ctx.Resumed != 0 {
		// NB: before the restore commits anything: a refused one leaves the
		// directory as it is.
		if err := s.checkLineage(); err != nil {
			return err
		}
	}
	recorded := map[string]bool{}
	if ctx.Restore != nil {
		items, err := state.RestoreList(ctx.Restore.Handles, ctx.Restore.Read, state.Union, "pending", ctx.Subtask, ctx.Parallelism)
		if err != nil {
			return err
		}
		for _, it := range items {
			sub, id, err := decodePending(it)
			if err != nil {
				return operator.Permanent(fmt.Errorf("restore file sink: %w", err))
			}
			recorded[s.pendingName(sub, id)] = true
			if sub%ctx.Parallelism == ctx.Subtask {
				if err := s.commit(sub, id); err != nil {
					return err
				}
			}
		}
	}
	names, err := s.cfg.FS.List(s.cfg.Dir)
	if err != nil {
		return fmt.Errorf("output directory %s: %w", s.cfg.Dir, err)
	}
	var stray, earlier, rolledBack []string
	for _, n := range names {
		sub, rest, dot, ok := s.parse(n)
		if !ok || sub%ctx.Parallelism != ctx.Subtask {
			continue
		}
		switch {
		case dot && !recorded[n]:
			// In-progress files and pending files no completed checkpoint
			// recorded: what a failed or killed attempt left.
			stray = append(stray, n)
		case dot:
		case ctx.Restore == nil:
			earlier = append(earlier, n)
		default:
			// Committed at a checkpoint after the restored one, or at the
			// end of the input by a run without checkpoints (part-…-end:
			// one that resumed this checkpoint or an older one, in mode
			// none): its records are produced again from the restored
			// state.
			if id, err := strconv.ParseUint(rest, 10, 64); rest == "end" || err == nil && checkpoint.ID(id) > ctx.Restore.Checkpoint {
				rolledBack = append(rolledBack, n)
			}
		}
	}
	if len(earlier) > 0 && !ctx.StartOver {
		slices.Sort(earlier)
		names := strings.Join(earlier[:min(3, len(earlier))], ", ")
		if len(earlier) > 3 {
			names += ", …"
		}
		return operator.Permanent(fmt.Errorf("%w: output directory %s holds %d files sink %q committed in an earlier run (%s): resume that run with --restore latest (Config.Restore \"latest\"), or start over with --fresh (Config.Fresh), which deletes them",
			ErrEarlierOutput, s.cfg.Dir, len(earlier), ctx.UID, names))
	}
	if ctx.Restore == nil {
		// NB: before the deletions: a start killed between the two leaves
		// output a restore of an earlier lineage refuses, not one with
		// files missing.
		if err := s.writeLineage(); err != nil {
			return err
		}
	}
	if len(earlier) > 0 {
		ctx.Logger.Warn("starting over: deleting the output of earlier runs", "dir", s.cfg.Dir, "files", len(earlier))
	}
	if len(rolledBack) > 0 {
		slices.Sort(rolledBack)
		ctx.Logger.Warn("rolling back output committed after the restored checkpoint", "dir", s.cfg.Dir, "checkpoint", ctx.Restore.Checkpoint, "files", rolledBack)
	}
	for _, n := range slices.Concat(stray, earlier, rolledBack) {
		if err := s.cfg.FS.Remove(s.path(n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("file sink: delete %s: %w", s.path(n), err)
		}
	}
	return s.syncDir()
}

// lineagePath is the file that names the lineage (operator.Context.Lineage)
// of the sink's output in the directory: written by every start that
// restores no state, before it deletes or writes anything.
func (s *fileSink[T]) lineagePath() string { return s.path(".lineage-" + s.uid) }

// writeLineage records the run's lineage as the directory's, if it is not
// already.
func (s *fileSink[T]) writeLineage() error {
	if s.ctx.Lineage == "" {
		return nil
	}
	if got, _ := s.readLineage(); got == s.ctx.Lineage {
		return nil
	}
	// NB: each subtask through a file of its own, renamed into place: they
	// write the same lineage.
	tmp := s.path(fmt.Sprintf(".lineage-%s-%d.tmp", s.uid, s.ctx.Subtask))
	f, err := s.cfg.FS.Create(tmp, vfs.WriteCategoryUnspecified)
	if err == nil {
		_, err = f.Write([]byte(s.ctx.Lineage))
		err = errors.Join(err, f.Sync(), f.Close())
	}
	if err == nil {
		err = s.cfg.FS.Rename(tmp, s.lineagePath())
	}
	if err != nil {
		s.cfg.FS.Remove(tmp) // best effort: a start at another parallelism would not reuse its name
		return fmt.Errorf("file sink: record the output's lineage in %s: %w", s.lineagePath(), err)
	}
	return s.syncDir()
}

// readLineage reads the directory's lineage: "" if none is recorded.
func (s *fileSink[T]) readLineage() (string, error) {
	f, err := s.cfg.FS.Open(s.lineagePath())
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<10))
	return string(b), err
}

// checkLineage refuses a restore into output a run of another lineage has
// written since the checkpoint: --fresh deleted the files it counts on, or
// a first run added its own beside them. Output without a recorded lineage
// (written before lineages) and checkpoints without one are taken as they
// are, unless a lineage was recorded since.
func (s *fileSink[T]) checkLineage() error {
	got, err := s.readLineage()
	if err != nil {
		return fmt.Errorf("file sink: read the output's lineage: %w", err)
	}
	if got == "" && s.ctx.Lineage != "" && s.ctx.Restore != nil {
		// Every run that starts a lineage records it here before anything
		// else: a directory with no lineage and no file of this sink is
		// not the one the checkpoint's runs wrote (a mistyped --output).
		names, err := s.cfg.FS.List(s.cfg.Dir)
		if err != nil {
			return fmt.Errorf("output directory %s: %w", s.cfg.Dir, err)
		}
		if !slices.ContainsFunc(names, func(n string) bool { _, _, _, ok := s.parse(n); return ok }) {
			return operator.Permanent(fmt.Errorf("output directory %s holds no output of sink %q, and checkpoint %d continues runs that wrote its output elsewhere: give the output directory those runs wrote (--output, SinkConfig.Dir), or start over with --fresh",
				s.cfg.Dir, s.ctx.UID, s.ctx.Resumed))
		}
	}
	if got == "" || got == s.ctx.Lineage {
		return nil
	}
	return operator.Permanent(fmt.Errorf("output directory %s: sink %q: %w: checkpoint %d continues the runs of lineage %s, but a run that started without a restore since (lineage %s: --fresh, which deleted this sink's earlier files, or a first run) writes the directory now: restoring it would lose or mix output. Restore a checkpoint or savepoint that run took, if it took one, or start over with --fresh",
		s.cfg.Dir, s.ctx.UID, operator.ErrStartedOver, s.ctx.Resumed, orUnknown(s.ctx.Lineage), got))
}

// orUnknown names an empty lineage.
func orUnknown(lineage string) string {
	if lineage == "" {
		return "(none recorded: an older version of Weir)"
	}
	return lineage
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
	from, to := s.path(s.pendingName(sub, id)), s.path(s.committedName(sub, id))
	err := renameOnce(s.cfg.FS, from, to)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return operator.Permanent(fmt.Errorf("commit %s: pending file %s is missing: its records are lost (was the output directory changed by hand?)", to, from))
	case err != nil:
		return fmt.Errorf("commit %s: %w", to, err)
	}
	return nil
}

// writeBytes is the size of the writes to the in-progress file.
const writeBytes = 256 << 10

func (s *fileSink[T]) Write(v T) error {
	if s.f == nil {
		if p := s.unsynced.Load(); p != nil {
			return *p
		}
		s.seq++
		s.name = s.inProgressName(s.ctx.Subtask, s.ctx.Now().UnixNano(), s.seq)
		f, err := s.cfg.FS.Create(s.path(s.name), vfs.WriteCategoryUnspecified)
		if err != nil {
			return fmt.Errorf("file sink: %w", err)
		}
		s.f = f
		if s.buf == nil {
			s.buf = make([]byte, 0, writeBytes+writeBytes/4)
		}
	}
	s.buf = s.cfg.Format(s.buf, v)
	if len(s.buf) >= writeBytes {
		return s.flush()
	}
	return nil
}

// flush writes what buf holds to the in-progress file.
func (s *fileSink[T]) flush() error {
	if p := s.unsynced.Load(); p != nil {
		return *p
	}
	if len(s.buf) == 0 {
		return nil
	}
	_, err := s.f.Write(s.buf)
	s.buf = s.buf[:0]
	if err != nil {
		return fmt.Errorf("file sink: write %s: %w", s.path(s.name), err)
	}
	return nil
}

// Snapshot pre-commits: the in-progress file is flushed here, and synced
// and renamed to its pending name in the asynchronous part, before the task
// acknowledges the checkpoint.
func (s *fileSink[T]) Snapshot(id checkpoint.ID) (operator.Async, error) {
	if s.f != nil {
		if err := s.flush(); err != nil {
			return nil, err
		}
		s.detached = append(s.detached, &detachedFile{f: s.f, from: s.path(s.name), to: s.path(s.pendingName(s.ctx.Subtask, id)), id: id, unsynced: &s.unsynced})
		s.f = nil
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

// Finish does nothing with checkpoints: the final checkpoint pre-commits
// the open file and its completion commits it. Without checkpoints it
// commits the open file as part-<uid>-<subtask>-end.
func (s *fileSink[T]) Finish() error {
	if s.ctx.CheckpointingEnabled || s.f == nil {
		return nil
	}
	if err := s.flush(); err != nil {
		return err
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("file sink: sync %s: %w", s.path(s.name), err)
	}
	if err := s.f.Close(); err != nil {
		return err
	}
	s.f = nil
	final := s.path(fmt.Sprintf("part-%s-%d-end", s.uid, s.ctx.Subtask))
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
		s.f, s.buf = nil, s.buf[:0]
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

// Records calls f with each line v is formatted into: the records a
// verification rerun compares with the committed files' lines.
func (s *fileSink[T]) Records(v T, f func(rec []byte)) {
	s.buf = s.cfg.Format(s.buf[:0], v)
	eachLine(s.buf, f)
}

// Committed calls f with each line of the sink's committed files up to
// checkpoint ctx.Restore.Checkpoint, and of the pending files that
// checkpoint recorded and a restore would commit. It only reads.
func (s *fileSink[T]) Committed(ctx *operator.Context, f func(rec []byte)) error {
	s.ctx, s.uid = ctx, escapeUID(ctx.UID)
	upTo := ctx.Restore.Checkpoint
	if got, err := s.readLineage(); err != nil {
		return err
	} else if got != "" && ctx.Lineage != "" && got != ctx.Lineage {
		return fmt.Errorf("output directory %s holds the output of another run (lineage %s) than checkpoint %d's (%s): a run started over (--fresh) since, with other checkpoints; verify with that run's checkpoint directory", s.cfg.Dir, got, upTo, ctx.Lineage)
	}
	pending := map[string]string{} // the pending files recorded, by their committed names
	if len(ctx.Restore.Handles) > 0 {
		items, err := state.RestoreList(ctx.Restore.Handles, ctx.Restore.Read, state.Union, "pending", 0, 1)
		if err != nil {
			return err
		}
		for _, it := range items {
			sub, id, err := decodePending(it)
			if err != nil {
				return err
			}
			pending[s.committedName(sub, id)] = s.pendingName(sub, id)
		}
	}
	names, err := s.cfg.FS.List(s.cfg.Dir)
	if err != nil {
		return fmt.Errorf("output directory %s: %w", s.cfg.Dir, err)
	}
	var read []string
	for _, n := range names {
		_, rest, dot, ok := s.parse(n)
		if !ok || dot {
			continue
		}
		if id, err := strconv.ParseUint(rest, 10, 64); err == nil && checkpoint.ID(id) <= upTo {
			read = append(read, n)
			delete(pending, n)
		}
	}
	slices.Sort(read)
	for _, n := range read {
		b, err := readFile(s.cfg.FS, s.path(n))
		if err != nil {
			return fmt.Errorf("output %s: %w", s.path(n), err)
		}
		eachLine(b, f)
	}
	// The recorded transactions not committed when the directory was
	// listed: the restore of the checkpoint commits them, so their records
	// count, pending or committed since (by the job, running). Neither,
	// their records are lost: the comparison shows them missing.
	for _, n := range slices.Sorted(maps.Keys(pending)) {
		b, err := readFile(s.cfg.FS, s.path(pending[n]))
		if errors.Is(err, os.ErrNotExist) {
			b, err = readFile(s.cfg.FS, s.path(n))
		}
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			return fmt.Errorf("output %s: %w", s.path(n), err)
		}
		eachLine(b, f)
	}
	return nil
}

// readFile reads the whole of file name.
func readFile(fs vfs.FS, name string) ([]byte, error) {
	f, err := fs.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// eachLine calls f with each line of b, with its newline; a last line
// without one too.
func eachLine(b []byte, f func([]byte)) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			f(b)
			return
		}
		f(b[:i+1])
		b = b[i+1:]
	}
}
