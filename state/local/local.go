// Package local keeps task-local copies of snapshots, for local recovery
// (Flink's task-local recovery): every piece of state a subtask writes to
// checkpoint storage is written to a directory on this machine too, and a
// restore on this machine reads a piece from there instead of from
// checkpoint storage when the local file is exactly what the restored
// checkpoint's metadata describes.
//
// It works below every state backend: it wraps the state.Writer a snapshot
// writes with and the reads of a restore, and so keeps whatever a backend
// writes (Write and WriteShared alike).
//
// Rules (design note 87):
//   - Layout: <dir>/<job>/<vertex>-<subtask>/<path of the piece in
//     checkpoint storage>. A task's directory holds only its pieces.
//   - Trust: the checkpoint's metadata decides. A local file is read only
//     if the handle restored names a path and a CRC-32C, and the file has
//     the handle's size and checksum; else the piece is read from
//     checkpoint storage. Writes through a Task's writer give every handle
//     a CRC-32C.
//   - Retention: when checkpoint N completes, a task keeps the pieces N
//     references and those of checkpoints taken since, not yet settled;
//     every other file in its directory goes (an abort sweeps too). Until
//     then it keeps what its restore read, from the local copy or from
//     checkpoint storage (the checkpoints after it reuse those files).
//   - Sharing: a file is never written once in place (renamed in, or
//     removed), so a backend may hard-link it (state.VerifiedFile,
//     state.Keeper) instead of copying it.
//   - Failure: a local write that fails costs only the local copy; the
//     checkpoint goes on.
//
// Local files are not synced: a crash of the machine may leave them
// short or torn, and the checksum then sends the restore to checkpoint
// storage. They are written to a temporary name and renamed into place,
// so a killed process leaves no file under a piece's name half written.
package local

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/storage"
)

// Store is the local copies of this process's subtasks' snapshots, under
// one directory. Safe for concurrent use.
type Store struct {
	dir string
	// restored counts pieces and bytes restores read, by source.
	localBytes, remoteBytes   atomic.Int64
	localPieces, remotePieces atomic.Int64

	mu sync.Mutex
	// copies are the checkpoints the task directories hold copies of
	// (their completion markers), read at Open and kept up to date.
	copies map[taskKey]checkpoint.ID
	// shapes are the jobs deployed since their last sweep: each vertex's
	// parallelism (Deployed).
	shapes map[string]map[string]int
}

// Copy says that the store holds a local copy of a subtask's state as
// of a completed checkpoint. It is a hint (for placement): a restore
// still checks every piece against the checkpoint's metadata.
type Copy struct {
	Job, Vertex string
	Subtask     int
	Checkpoint  checkpoint.ID
}

type taskKey struct {
	job, vertex string
	subtask     int
}

// markerFile is the name, in a task's directory, of the file that says
// which checkpoint's pieces the directory holds. NB: storage paths start
// with chk- or shared/; names that start with a dot are the store's own
// (path refuses them for pieces).
const markerFile = ".completed"

// maxCopies bounds the copies Copies lists (a heartbeat carries them).
const maxCopies = 4096

// Open returns the store in dir, creating it, and checks that it can
// write there.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("local recovery: no directory: set --local-recovery-dir (Config.LocalRecoveryDir)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("local recovery directory %s: %w: set --local-recovery-dir to a writable directory", dir, err)
	}
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return nil, fmt.Errorf("local recovery directory %s is not writable: %w: set --local-recovery-dir to a writable directory", dir, err)
	}
	f.Close()
	os.Remove(f.Name())
	s := &Store{dir: dir, copies: map[taskKey]checkpoint.ID{}, shapes: map[string]map[string]int{}}
	s.readMarkers()
	return s, nil
}

// readMarkers reads the completion markers of every task directory
// (<dir>/<job>/<vertex>-<subtask>/.completed); what it cannot read or
// parse says nothing.
func (s *Store) readMarkers() {
	jobs, _ := os.ReadDir(s.dir)
	for _, j := range jobs {
		job, err := url.PathUnescape(j.Name())
		if !j.IsDir() || err != nil {
			continue
		}
		tasks, _ := os.ReadDir(filepath.Join(s.dir, j.Name()))
		for _, d := range tasks {
			vertex, subtask, ok := parseTaskDir(d.Name())
			if !d.IsDir() || !ok {
				continue
			}
			b, err := os.ReadFile(filepath.Join(s.dir, j.Name(), d.Name(), markerFile))
			if err != nil {
				continue
			}
			if id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && id > 0 {
				s.copies[taskKey{job, vertex, subtask}] = checkpoint.ID(id)
			}
		}
	}
}

// taskDirName is the name of the directory of a job's subtask.
func taskDirName(vertex string, subtask int) string {
	return fmt.Sprintf("%s-%d", dirName(vertex), subtask)
}

// parseTaskDir is the vertex and subtask of a task directory's name.
func parseTaskDir(name string) (string, int, bool) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return "", 0, false
	}
	subtask, err := strconv.Atoi(name[i+1:])
	if err != nil || subtask < 0 {
		return "", 0, false
	}
	vertex, ok := nameOfDir(name[:i])
	return vertex, subtask, ok
}

// Copies lists the local copies the store holds, sorted (at most
// maxCopies).
func (s *Store) Copies() []Copy {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Copy, 0, len(s.copies))
	for k, id := range s.copies {
		out = append(out, Copy{Job: k.job, Vertex: k.vertex, Subtask: k.subtask, Checkpoint: id})
	}
	slices.SortFunc(out, func(a, b Copy) int {
		return cmp.Or(cmp.Compare(a.Job, b.Job), cmp.Compare(a.Vertex, b.Vertex), cmp.Compare(a.Subtask, b.Subtask), cmp.Compare(a.Checkpoint, b.Checkpoint))
	})
	return out[:min(len(out), maxCopies)]
}

// Deployed tells the store the subtasks job has from now on: each
// vertex's parallelism. The first checkpoint one of its tasks completes
// after that deletes the directories of the job's other subtasks (those
// a scale-down dropped, those of vertices the job no longer has). NB: not
// at once: until a checkpoint of the new shape completes, the newest is
// of the old one, which the job may go back to (a run that fails before
// its first checkpoint, started again with the old parallelism).
// Subtasks of the job that run in another process keep their directories
// here (processes on one machine may share the store's directory).
func (s *Store) Deployed(job string, parallelism map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shapes[job] = maps.Clone(parallelism)
}

// completed records that a task of job completed checkpoint id, its
// directory holding pieces of it or not, and sweeps the job's
// directories if it was deployed since the last sweep.
func (s *Store) completed(job, vertex string, subtask int, id checkpoint.ID, holds bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if holds {
		s.copies[taskKey{job, vertex, subtask}] = id
	} else {
		delete(s.copies, taskKey{job, vertex, subtask})
	}
	shape, ok := s.shapes[job]
	if !ok {
		return
	}
	delete(s.shapes, job)
	jobDir := filepath.Join(s.dir, dirName(job))
	es, _ := os.ReadDir(jobDir)
	for _, e := range es {
		v, sub, ok := parseTaskDir(e.Name())
		if ok && e.IsDir() && sub < shape[v] && taskDirName(v, sub) == e.Name() {
			continue
		}
		os.RemoveAll(filepath.Join(jobDir, e.Name()))
		if ok {
			delete(s.copies, taskKey{job, v, sub})
		}
	}
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

// Restored is what restores read, by source, since the store opened.
type Restored struct {
	LocalPieces, LocalBytes   int64
	RemotePieces, RemoteBytes int64
}

// Restored sums the restores of every task of the store.
func (s *Store) Restored() Restored {
	return Restored{LocalPieces: s.localPieces.Load(), LocalBytes: s.localBytes.Load(),
		RemotePieces: s.remotePieces.Load(), RemoteBytes: s.remoteBytes.Load()}
}

// Task returns the local copy of the snapshots of one subtask. Each
// attempt of the subtask takes its own Task; they share the directory, so
// an attempt (or a process) restores from what an earlier one left.
func (s *Store) Task(job, vertex string, subtask int) *Task {
	return &Task{s: s, job: job, vertex: vertex, subtask: subtask, dir: filepath.Join(s.dir, dirName(job), taskDirName(vertex, subtask)),
		kept: map[string]bool{}, pending: map[checkpoint.ID]map[string]bool{}, temps: map[string]bool{}, aborted: map[checkpoint.ID]bool{}, bases: map[checkpoint.ID]map[string]bool{}}
}

// dirName is name as one directory name inside the store: escaped, and
// "", "." and ".." (which url.PathEscape leaves as they are) written as
// names it never produces (it writes upper-case hexadecimal), so that a job
// or operator so named can neither reach outside the store nor share
// another's directory.
func dirName(name string) string {
	if strings.Trim(name, ".") != "" {
		return url.PathEscape(name)
	}
	return "%" + strings.Repeat("2e", len(name))
}

// nameOfDir is dirName's inverse.
func nameOfDir(dir string) (string, bool) {
	if rest, ok := strings.CutPrefix(dir, "%"); ok && strings.ReplaceAll(rest, "2e", "") == "" {
		return strings.Repeat(".", len(rest)/2), true
	}
	name, err := url.PathUnescape(dir)
	return name, err == nil
}

// Task is one subtask's local copy. Its writers run on snapshot writers'
// goroutines, Complete and Abort on the task's: safe for concurrent use.
type Task struct {
	s           *Store
	job, vertex string
	subtask     int
	dir         string

	mu sync.Mutex
	// kept are the paths of the newest completed checkpoint (until one
	// completes, those a restore read from the local copy); pending,
	// those of each checkpoint taken since and not settled; temps, the
	// temporary files being written.
	kept    map[string]bool
	pending map[checkpoint.ID]map[string]bool
	temps   map[string]bool
	// bases holds, while each checkpoint in flight is unsettled, the
	// shared files kept when its snapshot was taken: an incremental
	// backend builds it on that checkpoint and says which files it reuses
	// only once its write ends (Referenced), after a newer completion may
	// have swept them.
	bases map[checkpoint.ID]map[string]bool
	// completed is the newest checkpoint completed; aborted, those
	// aborted since (at most maxAborted). Their writes that end later
	// keep nothing.
	completed checkpoint.ID
	aborted   map[checkpoint.ID]bool
	// failed is the first local write of a checkpoint that failed since
	// the last call of WriteErr; restoreFailed, of what a restore read,
	// since the last call of RestoreErr.
	failed, restoreFailed error

	restored Restored
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// path is where the local copy of a piece at storage path p lives; an
// error if p could leave the task's directory.
func (t *Task) path(p string) (string, error) {
	if err := checkpoint.ValidatePath(p); err != nil {
		return "", err
	}
	if !filepath.IsLocal(filepath.FromSlash(p)) {
		return "", fmt.Errorf("state path %q is not local", p)
	}
	if strings.HasPrefix(p, ".") {
		return "", fmt.Errorf("state path %q starts with a dot, as the local copy's own files do", p)
	}
	return filepath.Join(t.dir, filepath.FromSlash(p)), nil
}

// Writer returns w, whose writes of checkpoint id are kept locally too
// and whose handles carry a CRC-32C. The task asks for it right after its
// snapshot of id, before the snapshot's asynchronous part.
func (t *Task) Writer(id checkpoint.ID, w state.Writer) state.Writer {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.settledLocked(id) {
		base := map[string]bool{}
		for p := range t.kept {
			if storage.IsShared(checkpoint.Handle{Path: p}) { // the rest is no later checkpoint's
				base[p] = true
			}
		}
		t.bases[id] = base
	}
	return &writer{t: t, id: id, w: w}
}

type writer struct {
	t  *Task
	id checkpoint.ID
	w  state.Writer
}

func (w *writer) Write(h checkpoint.Handle, data []byte) (checkpoint.Handle, error) {
	out, err := w.w.Write(h, data)
	if err != nil {
		return out, err
	}
	if out.CRC32C == 0 {
		out.CRC32C = crc32.Checksum(data, castagnoli)
	}
	if out.Path != "" {
		w.t.keep(w.id, out.Path, func(f *os.File) error {
			_, err := f.Write(data)
			return err
		})
	}
	return out, nil
}

func (w *writer) WriteShared(h checkpoint.Handle, r io.Reader) (checkpoint.Handle, error) {
	if f, ok := r.(state.ImmutableFile); ok {
		sum := &localWriter{sum: crc32.New(castagnoli)}
		out, err := w.w.WriteShared(h, io.TeeReader(r, sum))
		if err == nil && out.CRC32C == 0 {
			out.CRC32C = sum.sum.Sum32()
		}
		if err == nil && out.Path != "" {
			// What the upload read is what the local copy holds only if the
			// file, linked, still has those bytes: a remote that stopped
			// reading early, or a file changed meanwhile, would make the
			// copy another piece.
			w.t.link(w.id, out.Path, f.ImmutablePath(), func(name string) error { return holds(name, sum.n, sum.sum.Sum32()) })
		}
		return out, err
	}
	tmp, err := w.t.temp()
	if err != nil {
		w.t.fail(w.id, err)
		tmp = nil
	}
	lw := &localWriter{f: tmp, sum: crc32.New(castagnoli)}
	out, err := w.w.WriteShared(h, io.TeeReader(r, lw))
	if err == nil && out.CRC32C == 0 {
		out.CRC32C = lw.sum.Sum32()
	}
	if tmp == nil {
		return out, err
	}
	if err != nil || out.Path == "" {
		w.t.drop(tmp)
		return out, err
	}
	w.t.place(w.id, out.Path, tmp.Name(), errors.Join(lw.err, tmp.Close()))
	return out, nil
}

// localWriter copies what the remote write reads into f (if any), sums
// and counts it; a local error stops the copy, never the remote write.
type localWriter struct {
	f   *os.File
	sum hash.Hash32
	n   int64
	err error
}

func (l *localWriter) Write(p []byte) (int, error) {
	l.sum.Write(p)
	l.n += int64(len(p))
	if l.f != nil && l.err == nil {
		_, l.err = l.f.Write(p)
	}
	return len(p), nil
}

// temp creates a temporary file in the task's directory, which sweeps
// leave alone until drop or place.
func (t *Task) temp() (*os.File, error) {
	if err := os.MkdirAll(t.dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(t.dir, ".tmp-*")
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.temps[f.Name()] = true
	t.mu.Unlock()
	return f, nil
}

func (t *Task) drop(f *os.File) {
	f.Close()
	os.Remove(f.Name())
	t.mu.Lock()
	delete(t.temps, f.Name())
	t.mu.Unlock()
}

// fromRestore is the checkpoint id under which keep and place count a piece
// a restore read from checkpoint storage: kept, like the pieces a restore
// read locally, until the next completion says what stays.
const fromRestore checkpoint.ID = 0

// keep writes a local copy of the piece at storage path p of checkpoint
// id (or fromRestore) with write.
func (t *Task) keep(id checkpoint.ID, p string, write func(*os.File) error) {
	f, err := t.temp()
	if err != nil {
		t.fail(id, err)
		return
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	t.place(id, p, f.Name(), err)
}

// place renames temporary file tmp, whose writing ended with err, to the
// local copy of storage path p and counts it as checkpoint id's
// (fromRestore: as restored).
func (t *Task) place(id checkpoint.ID, p, tmp string, err error) {
	dst, perr := t.path(p)
	if err == nil {
		err = perr
	}
	if err == nil {
		err = os.MkdirAll(filepath.Dir(dst), 0o755)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.temps, tmp)
	if err == nil && id != fromRestore && t.settledLocked(id) {
		// Checkpoint id was aborted or subsumed while it was written:
		// its copy would wait for the next completion's sweep.
		os.Remove(tmp)
		return
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		os.Remove(tmp)
		t.failLocked(id, err)
		return
	}
	if id == fromRestore {
		t.kept[p] = true
		return
	}
	t.pendingLocked(id)[p] = true
}

// settledLocked reports whether checkpoint id was aborted, or completed
// or subsumed (a newer one completed).
func (t *Task) settledLocked(id checkpoint.ID) bool {
	return id <= t.completed || t.aborted[id]
}

// fail records that a local write of checkpoint id (or fromRestore)
// failed.
func (t *Task) fail(id checkpoint.ID, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failLocked(id, err)
}

func (t *Task) failLocked(id checkpoint.ID, err error) {
	failed := &t.failed
	if id == fromRestore {
		failed = &t.restoreFailed
	}
	if *failed == nil {
		*failed = fmt.Errorf("local recovery: keep a local copy in %s: %w", t.dir, err)
	}
}

// WriteErr returns, and forgets, the first local write of a checkpoint's
// pieces that failed since the last call: the local copy misses a piece,
// and a restore will read it from checkpoint storage.
func (t *Task) WriteErr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	err := t.failed
	t.failed = nil
	return err
}

// RestoreErr returns, and forgets, the first piece a restore read from
// checkpoint storage that the local copy could not keep.
func (t *Task) RestoreErr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	err := t.restoreFailed
	t.restoreFailed = nil
	return err
}

func (t *Task) pendingLocked(id checkpoint.ID) map[string]bool {
	p := t.pending[id]
	if p == nil {
		p = map[string]bool{}
		t.pending[id] = p
	}
	return p
}

// Referenced records the handles checkpoint id's snapshot of the task
// returned: those it reuses from earlier checkpoints (an incremental
// backend's shared files) are kept with it.
func (t *Task) Referenced(id checkpoint.ID, hs []checkpoint.Handle) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.settledLocked(id) {
		return // aborted or subsumed while it was written
	}
	p := t.pendingLocked(id)
	for _, h := range hs {
		if h.Path != "" {
			p[h.Path] = true
		}
	}
}

// Complete keeps checkpoint id's pieces, and those of the checkpoints
// taken since, and deletes every other file of the task. The first
// completion after the store's Deployed sweeps the job's directories.
func (t *Task) Complete(id checkpoint.ID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id <= t.completed {
		return // late (a savepoint completes outside the concurrency limit): the newer copy stays
	}
	p, ok := t.pending[id]
	if ok {
		t.kept = p
	}
	for c := range t.pending {
		if c <= id {
			delete(t.pending, c)
		}
	}
	for c := range t.bases {
		if c <= id {
			delete(t.bases, c)
		}
	}
	t.completed = max(t.completed, id)
	for c := range t.aborted {
		if c <= t.completed {
			delete(t.aborted, c)
		}
	}
	t.sweepLocked()
	holds := ok && len(t.kept) > 0 && t.mark(id) == nil
	if !holds {
		os.Remove(filepath.Join(t.dir, markerFile))
	}
	t.s.completed(t.job, t.vertex, t.subtask, id, holds)
}

// mark writes the task's completion marker: its directory holds
// checkpoint id's pieces.
func (t *Task) mark(id checkpoint.ID) error {
	f, err := os.CreateTemp(t.dir, ".tmp-*")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "%d\n", id)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(t.dir, markerFile))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// maxAborted bounds the aborted checkpoints a task remembers between two
// completions: past it, the oldest is forgotten (a write of it that ends
// later is kept until the next completion).
const maxAborted = 256

// Abort deletes the pieces only checkpoint id holds; what its writes
// still in progress write is not kept.
func (t *Task) Abort(id checkpoint.ID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.pending, id)
	delete(t.bases, id)
	if id > t.completed {
		t.aborted[id] = true
		if len(t.aborted) > maxAborted {
			delete(t.aborted, slices.Min(slices.Collect(maps.Keys(t.aborted))))
		}
	}
	t.sweepLocked()
}

// sweepLocked deletes the files of the task's directory that no kept or
// pending checkpoint holds (nor the base of one in flight) and no writer
// is writing, and the directories left empty.
func (t *Task) sweepLocked() {
	var dirs []string
	filepath.WalkDir(t.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == t.dir {
			return nil
		}
		if d.IsDir() {
			dirs = append(dirs, p)
			return nil
		}
		rel, err := filepath.Rel(t.dir, p)
		if err != nil {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if t.kept[rel] || t.temps[p] || t.pendingHolds(rel) || rel == markerFile {
			return nil
		}
		os.Remove(p)
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		os.Remove(dirs[i]) // fails unless empty
	}
}

func (t *Task) pendingHolds(rel string) bool {
	for _, p := range t.pending {
		if p[rel] {
			return true
		}
	}
	if planted.sweepIgnoresBases.Load() {
		return false
	}
	for _, b := range t.bases {
		if b[rel] {
			return true
		}
	}
	return false
}

// Reads returns read and open, which read the pieces of a checkpoint
// from checkpoint storage, as functions that read a piece from its local
// copy when that is what the handle describes, and else call them. A
// piece read from checkpoint storage whole, with the handle's size and
// checksum, is kept in the local copy too: the checkpoints after the
// restore build on the restored files (an incremental backend reuses
// them), and the next restore here then finds them.
func (t *Task) Reads(read func(checkpoint.Handle) ([]byte, error), open func(checkpoint.Handle) (io.ReadCloser, error)) (func(checkpoint.Handle) ([]byte, error), func(checkpoint.Handle) (io.ReadCloser, error)) {
	readRemote := func(h checkpoint.Handle, keep bool) ([]byte, error) {
		data, err := read(h)
		if err == nil && keep && !planted.downloadsNotKept.Load() && int64(len(data)) == h.SizeBytes && crc32.Checksum(data, castagnoli) == h.CRC32C {
			t.keep(fromRestore, h.Path, func(f *os.File) error {
				_, err := f.Write(data)
				return err
			})
		}
		return data, err
	}
	localRead := func(h checkpoint.Handle) ([]byte, error) {
		p, ok := t.valid(h)
		if ok {
			if data, err := os.ReadFile(p); err == nil && int64(len(data)) == h.SizeBytes && crc32.Checksum(data, castagnoli) == h.CRC32C {
				t.count(h, true)
				return data, nil
			}
		}
		t.count(h, false)
		return readRemote(h, ok)
	}
	localOpen := func(h checkpoint.Handle) (io.ReadCloser, error) {
		p, ok := t.valid(h)
		if ok {
			if f, err := t.openVerified(p, h); err == nil {
				t.count(h, true)
				return f, nil
			}
		}
		t.count(h, false)
		if open == nil {
			data, err := readRemote(h, ok)
			if err != nil {
				return nil, err
			}
			return io.NopCloser(bytes.NewReader(data)), nil
		}
		rc, err := open(h)
		if err != nil || !ok || planted.downloadsNotKept.Load() {
			return rc, err
		}
		return keeper{ReadCloser: rc, t: t, h: h}, nil
	}
	return localRead, localOpen
}

// keeper is a piece a restore streams from checkpoint storage
// (state.Keeper).
type keeper struct {
	io.ReadCloser
	t *Task
	h checkpoint.Handle
}

// WriteTo passes on the reader's own WriteTo, if it has one (a bucket's
// reads in 1 MiB pieces; io.Copy's default 32 KiB made a downloaded
// restore of 1 GiB take about 11 s instead of 4).
func (k keeper) WriteTo(w io.Writer) (int64, error) { return io.Copy(w, k.ReadCloser) }

// Keep makes the file at path, which holds the piece whole and checked,
// its local copy.
func (k keeper) Keep(path string) { k.t.link(fromRestore, k.h.Path, path, nil) }

// link makes file, which nobody writes again, the local copy of the piece
// at storage path p of checkpoint id (or fromRestore): a hard link, or a
// copy where the local copy is on another file system; check, if set,
// then vets the linked file.
func (t *Task) link(id checkpoint.ID, p, file string, check func(name string) error) {
	tmp, err := t.temp()
	if err != nil {
		t.fail(id, err)
		return
	}
	// The temporary file's name, reserved from sweeps, becomes the link.
	name := tmp.Name()
	tmp.Close()
	if err = os.Remove(name); err == nil && os.Link(file, name) != nil {
		err = copyFile(file, name)
	}
	if err == nil && check != nil {
		err = check(name)
	}
	t.place(id, p, name, err)
}

// holds says whether the file at path has n bytes with CRC-32C sum.
func holds(path string, n int64, sum uint32) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return has(f, n, sum)
}

// has reads f to its end and says whether that was n bytes with CRC-32C
// sum.
func has(f *os.File, n int64, sum uint32) error {
	h := crc32.New(castagnoli)
	got, err := io.Copy(h, f)
	switch {
	case err != nil:
		return err
	case got != n || h.Sum32() != sum:
		return fmt.Errorf("%s holds %d bytes with CRC-32C %08x, not %d with %08x", f.Name(), got, h.Sum32(), n, sum)
	}
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}

// valid returns the local path of h if it may have a local copy: it is a
// file, with a checksum to check the copy by (an empty piece's CRC-32C is
// 0, which its size says as well).
func (t *Task) valid(h checkpoint.Handle) (string, bool) {
	if h.Path == "" || h.CRC32C == 0 && h.SizeBytes != 0 {
		return "", false
	}
	p, err := t.path(h.Path)
	return p, err == nil
}

// verifiedFile is a local copy checked against its handle
// (state.VerifiedFile): the store only ever renames a file into place or
// removes it, never writes one already placed.
type verifiedFile struct{ *os.File }

func (f verifiedFile) VerifiedPath() string { return f.Name() }

// openVerified checks the file at p against h, then opens it again to be
// streamed (the second read comes from the page cache).
func (t *Task) openVerified(p string, h checkpoint.Handle) (verifiedFile, error) {
	f, err := os.Open(p)
	if err != nil {
		return verifiedFile{}, err
	}
	err = has(f, h.SizeBytes, h.CRC32C)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return verifiedFile{}, err
	}
	return verifiedFile{f}, nil
}

// count counts a piece a restore read, from the local copy or not
// (inline pieces come with the metadata: not counted).
func (t *Task) count(h checkpoint.Handle, local bool) {
	if h.Path == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if local {
		t.kept[h.Path] = true // an abort before the next completion keeps it
		t.restored.LocalPieces++
		t.restored.LocalBytes += h.SizeBytes
		t.s.localPieces.Add(1)
		t.s.localBytes.Add(h.SizeBytes)
	} else {
		t.restored.RemotePieces++
		t.restored.RemoteBytes += h.SizeBytes
		t.s.remotePieces.Add(1)
		t.s.remoteBytes.Add(h.SizeBytes)
	}
}

// Restored is what this Task's restores read, by source.
func (t *Task) Restored() Restored {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.restored
}
