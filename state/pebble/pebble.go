// Package pebble is the Pebble state backend: keyed state in an LSM on
// local disk (github.com/cockroachdb/pebble), one database per keyed
// operator subtask, with incremental checkpoints.
//
// Keys begin with the key group (two bytes, big-endian) and the table (two
// bytes), so a key-group range is a key range; then the key, length-
// prefixed; for maps then the user key. Values are the job's codecs'
// bytes; a list's value is its elements, each length-prefixed, and an
// append is a Pebble merge (the default merger concatenates), which reads
// nothing (see List). Timers stay on the heap (as Flink's RocksDB
// backend can keep them) and are written whole at every checkpoint.
//
// A checkpoint's synchronous part flushes the memtable and takes a Pebble
// checkpoint (hard links); the asynchronous part uploads the data files no
// completed checkpoint holds yet as shared files, and the few small files
// that describe the database as the checkpoint's own. A restore downloads
// the files and opens them; at another parallelism it keeps the key
// groups the subtask owns and copies in those of the other old subtasks.
// A restore of a heap backend's checkpoint moves each state into the
// database when a table declares it (see migrate.go).
package pebble

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"iter"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/keygroup"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/state/heap"
)

// Handle kinds a checkpoint of this backend writes.
const (
	// KindData is an immutable data file (an sstable), shared between
	// checkpoints.
	KindData = "pebble-data"
	// KindFile is a small file describing the database (manifest,
	// options, markers), the checkpoint's own.
	KindFile = "pebble-file"
)

// Options configure the backend.
type Options struct {
	// Dir is where databases live: Dir/<job>/<operator>-<subtask>-….
	// Each is deleted when its backend closes; those a killed process
	// left are deleted by the next backend of the same job.
	Dir string
	// Incremental makes checkpoints upload only the data files no
	// completed checkpoint holds; else every checkpoint uploads them all.
	Incremental bool
	// CacheBytes is the block cache the databases of the process share
	// (default 256 MiB; those opened with another size share another),
	// MemTableBytes each database's memtable (default 16 MiB): with them,
	// the databases' memory.
	CacheBytes, MemTableBytes int64
}

// Scope is the subtask a backend serves.
type Scope struct {
	Job, Operator string
	Subtask       int
	KeyGroups     keygroup.Range
}

// Backend is one subtask's keyed state in a Pebble database.
type Backend struct {
	opts   Options
	scope  Scope
	dir    string // this backend's working directory
	db     *pebble.DB
	group  int // the current key group, absolute
	tables map[string]uint16
	// kinds are the tables' kinds of state (kindKey); a table of a
	// database written before kinds were recorded has none until the
	// job declares it.
	kinds  map[string]string
	timers *heap.Backend
	caches []flusher // the tables' write-back caches
	cache  *sharedCache

	// confirmed are the data files of the newest completed checkpoint, by
	// local name: a snapshot reuses them. files holds, per checkpoint
	// taken and not yet completed or aborted, its data files.
	confirmed map[string]checkpoint.Handle
	files     map[checkpoint.ID]map[string]checkpoint.Handle
}

// meta keys live in key group 0xFFFF, which no key group reaches (at most
// 32,768 key groups).
// (A database written before lists took one key each also holds
// {0xff, 0xff, 's'}, their elements' sequence number, unread now.)
var metaPrefix = []byte{0xff, 0xff}

func tableKey(name string) []byte { return append([]byte{0xff, 0xff, 't'}, name...) }

// kindKey records the kind of state table name holds: value, map or
// list (a list one key, see List), or list? (a list some of whose keys
// may be of the format before, an element per key: a rescale merged a
// database of that time into this one). The job's declaration must be of
// the kind recorded. A database written before kinds were recorded has
// none: a table gets its kind when declared, a list's keys rewritten
// first (migrateListKeys).
func kindKey(name string) []byte { return append([]byte{0xff, 0xff, 'k'}, name...) }

const (
	kindValue   = "value"
	kindList    = "list"
	kindMap     = "map"
	kindOldList = "list?"
)

// setKind records table name's kind.
func (b *Backend) setKind(name, kind string) error {
	if err := b.db.Set(kindKey(name), []byte(kind), pebble.NoSync); err != nil {
		return fmt.Errorf("pebble state backend: %w", err)
	}
	b.kinds[name] = kind
	return nil
}

// kindMismatch is the error of state declared of another kind than the
// checkpoint's.
func kindMismatch(name, had, declared string) error {
	return fmt.Errorf("pebble state backend: state %q is %s state in the checkpoint, and the job declares it %s state: declare it as it was, or under another name: %w",
		name, strings.TrimSuffix(had, "?"), declared, checkpoint.ErrMismatch)
}

// New opens a backend for scope: empty (rs nil), or restored from the
// handles of a checkpoint (those of the scope's operator, any
// parallelism). Restored at the parallelism that took it, from a
// checkpoint the job owns (rs.Owned), its next checkpoint reuses the
// restored data files that are still in the database; otherwise it
// uploads them all.
func New(opts Options, sc Scope, rs *state.Restored) (_ *Backend, err error) {
	if opts.Dir == "" {
		return nil, errors.New("pebble state backend: no directory")
	}
	opts.CacheBytes = cmpOr(opts.CacheBytes, 256<<20)
	opts.MemTableBytes = cmpOr(opts.MemTableBytes, 16<<20)
	jobDir := filepath.Join(opts.Dir, url.PathEscape(sc.Job))
	if err := os.MkdirAll(jobDir, 0o755); err != nil {
		return nil, fmt.Errorf("pebble state backend: %w", err)
	}
	removeAbandoned(jobDir)
	dir, err := os.MkdirTemp(jobDir, fmt.Sprintf("%s-%d-p%d-", url.PathEscape(sc.Operator), sc.Subtask, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("pebble state backend: %w", err)
	}
	b := &Backend{opts: opts, scope: sc, dir: dir, tables: map[string]uint16{}, kinds: map[string]string{}, timers: heap.New(sc.KeyGroups),
		confirmed: map[string]checkpoint.Handle{}, files: map[checkpoint.ID]map[string]checkpoint.Handle{}, group: sc.KeyGroups.First,
		cache: acquireCache(opts.CacheBytes)}
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	dbDir := filepath.Join(dir, "db")
	if rs != nil {
		if err := b.restore(dbDir, rs.Handles, rs.Reader, rs.Owned); err != nil {
			return nil, err
		}
		if err := b.timers.Restore(rs.Handles, rs.Reader.Read); err != nil {
			return nil, err
		}
	} else if b.db, err = b.open(dbDir, false); err != nil {
		return nil, err
	}
	return b, b.loadMeta()
}

// removeAbandoned deletes the working directories of processes that are
// gone (killed, say): names end in -p<pid>-<random>.
func removeAbandoned(jobDir string) {
	entries, _ := os.ReadDir(jobDir)
	for _, e := range entries {
		parts := strings.Split(e.Name(), "-")
		if len(parts) < 3 || !strings.HasPrefix(parts[len(parts)-2], "p") {
			continue
		}
		pid, err := strconv.Atoi(parts[len(parts)-2][1:])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(filepath.Join(jobDir, e.Name()))
		}
	}
}

func cmpOr(v, def int64) int64 {
	if v <= 0 {
		return def
	}
	return v
}

func (b *Backend) open(dir string, readOnly bool) (*pebble.DB, error) {
	o := &pebble.Options{
		MemTableSize: uint64(b.opts.MemTableBytes), DisableWAL: true, ReadOnly: readOnly,
		FormatMajorVersion: pebble.FormatNewest, Logger: quiet{}, FS: scratchFS{vfs.Default},
		L0CompactionThreshold: 16, L0StopWritesThreshold: 64, Merger: merger,
	}
	// Bounded data files: a checkpoint uploads changed files whole. Bloom
	// filters: most reads of a new key find nothing, without reading
	// blocks.
	for i := range o.TargetFileSizes {
		o.TargetFileSizes[i] = min(int64(2<<20)<<i, 32<<20)
		o.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	b.cache.set(o)
	db, err := pebble.Open(dir, o)
	if err != nil {
		return nil, fmt.Errorf("pebble state backend: open %s: %w", dir, err)
	}
	return db, nil
}

// quiet drops Pebble's informational logging; errors fail what caused
// them.
type quiet struct{}

func (quiet) Infof(string, ...any)           {}
func (quiet) Errorf(string, ...any)          {}
func (quiet) Fatalf(format string, a ...any) { panic(fmt.Sprintf("pebble: "+format, a...)) }

// loadMeta reads the tables the database holds and their kinds.
func (b *Backend) loadMeta() error {
	it, err := b.db.NewIter(&pebble.IterOptions{LowerBound: metaPrefix, UpperBound: upperBound(metaPrefix)})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		switch k := it.Key(); {
		case len(k) > 2 && k[2] == 't':
			b.tables[string(k[3:])] = binary.BigEndian.Uint16(it.Value())
		case len(k) > 2 && k[2] == 'k':
			b.kinds[string(k[3:])] = string(it.Value())
		}
	}
	return it.Close()
}

// table returns the id of table name, registering it.
func (b *Backend) table(name string) (uint16, error) {
	if id, ok := b.tables[name]; ok {
		return id, nil
	}
	id := uint16(len(b.tables))
	if len(b.tables) >= 0xffff {
		return 0, fmt.Errorf("pebble state backend: too many states")
	}
	if err := b.db.Set(tableKey(name), binary.BigEndian.AppendUint16(nil, id), pebble.NoSync); err != nil {
		return 0, err
	}
	b.tables[name] = id
	return id, nil
}

// SetGroup makes key group g current.
func (b *Backend) SetGroup(g int) {
	if !b.scope.KeyGroups.Contains(g) {
		panic(fmt.Sprintf("pebble state backend: key group %d outside this subtask's range %v", g, b.scope.KeyGroups))
	}
	b.group = g
	b.timers.SetGroup(g)
}

// failed panics with a storage error: the task fails and the job restarts
// from its latest checkpoint.
func failed(op string, err error) {
	panic(fmt.Errorf("pebble state backend: %s: %w", op, err))
}

// Snapshot flushes the memtable and takes a Pebble checkpoint (hard
// links): the database as it is now, whatever the task writes next.
func (b *Backend) Snapshot(id checkpoint.ID) (state.Async, error) {
	if err := b.flushAll(); err != nil {
		return nil, fmt.Errorf("pebble state backend: write the cache: %w", err)
	}
	if err := b.db.Flush(); err != nil {
		return nil, fmt.Errorf("pebble state backend: flush: %w", err)
	}
	dir := filepath.Join(b.dir, fmt.Sprintf("chk-%d", id))
	os.RemoveAll(dir) // a snapshot of an earlier attempt with this id
	if err := b.db.Checkpoint(dir); err != nil {
		return nil, fmt.Errorf("pebble state backend: checkpoint: %w", err)
	}
	timers, err := b.timers.Snapshot(id)
	if err != nil {
		return nil, err
	}
	reuse := b.confirmed
	if !b.opts.Incremental {
		reuse = nil
	}
	files := map[string]checkpoint.Handle{}
	b.files[id] = files // read only after the asynchronous part returned
	kg := b.scope.KeyGroups
	return func(w state.Writer) (hs []checkpoint.Handle, err error) {
		defer os.RemoveAll(dir)
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			name := e.Name()
			path := filepath.Join(dir, name)
			info, err := e.Info()
			if err != nil {
				return nil, err
			}
			var h checkpoint.Handle
			switch {
			case !isData(name):
				data, err := os.ReadFile(path)
				if err != nil {
					return nil, err
				}
				h, err = w.Write(checkpoint.Handle{Kind: KindFile, KeyGroups: kg, File: name, CRC32C: crc(data)}, data)
				if err != nil {
					return nil, err
				}
			case reuse[name].SizeBytes == info.Size() && reuse[name].Path != "":
				h = reuse[name]
			default:
				if h, err = upload(w, checkpoint.Handle{Kind: KindData, KeyGroups: kg, File: name}, path); err != nil {
					return nil, err
				}
			}
			if h.Kind == KindData {
				files[name] = h
			}
			hs = append(hs, h)
		}
		ths, err := timers(w)
		return append(hs, ths...), err
	}, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// upload writes the data file at path as a shared file, with its checksum.
func upload(w state.Writer, h checkpoint.Handle, path string) (checkpoint.Handle, error) {
	f, err := os.Open(path)
	if err != nil {
		return h, err
	}
	defer f.Close()
	sum := crc32.New(castagnoli)
	out, err := w.WriteShared(h, immutableFile{io.TeeReader(f, sum), path})
	out.CRC32C = sum.Sum32()
	return out, err
}

// immutableFile is a data file being uploaded (state.ImmutableFile): an
// sstable or blob file is never written once made.
type immutableFile struct {
	io.Reader
	path string
}

func (f immutableFile) ImmutablePath() string { return f.path }

// isData reports whether a file of a Pebble checkpoint is immutable data
// that later checkpoints may share.
func isData(name string) bool {
	return strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob")
}

// NotifyComplete makes checkpoint id's data files those the next
// snapshots reuse.
func (b *Backend) NotifyComplete(id checkpoint.ID) {
	if files, ok := b.files[id]; ok {
		b.confirmed = files
	}
	for c := range b.files {
		if c <= id {
			delete(b.files, c)
		}
	}
}

func (b *Backend) NotifyAborted(id checkpoint.ID) { delete(b.files, id) }

// Close closes the database and deletes its directory.
func (b *Backend) Close() error {
	var err error
	if b.db != nil {
		err = b.db.Close()
		b.db = nil
	}
	if b.cache != nil {
		b.cache.release()
		b.cache = nil
	}
	return errors.Join(err, os.RemoveAll(b.dir))
}

// restore downloads the databases of the old subtasks whose key groups
// overlap this one's and builds this subtask's database from them. If the
// checkpoint is owned and one old subtask had exactly this one's key
// groups, its data files are those the next snapshot reuses.
func (b *Backend) restore(dbDir string, hs []checkpoint.Handle, r state.Reader, owned bool) error {
	mine := b.scope.KeyGroups
	type old struct {
		sub     int
		overlap int
		files   []checkpoint.Handle
	}
	bySub := map[int]*old{}
	for _, h := range hs {
		if (h.Kind != KindData && h.Kind != KindFile) || h.KeyGroups.Intersect(mine).Len() == 0 {
			continue
		}
		if err := validName(h.File); err != nil {
			return err
		}
		o := bySub[h.Subtask]
		if o == nil {
			o = &old{sub: h.Subtask, overlap: h.KeyGroups.Intersect(mine).Len()}
			bySub[h.Subtask] = o
		}
		o.files = append(o.files, h)
	}
	olds := make([]*old, 0, len(bySub))
	for _, o := range bySub {
		olds = append(olds, o)
	}
	// The old database that overlaps most becomes this one; the others'
	// key groups are copied in.
	slices.SortFunc(olds, func(a, b *old) int {
		if a.overlap != b.overlap {
			return b.overlap - a.overlap
		}
		return a.sub - b.sub
	})
	if len(olds) == 0 {
		var err error
		b.db, err = b.open(dbDir, false)
		return err
	}
	for i, o := range olds {
		dir := dbDir
		if i > 0 {
			dir = filepath.Join(b.dir, fmt.Sprintf("restore-%d", o.sub))
		}
		if err := download(dir, o.files, r); err != nil {
			return err
		}
		if i == 0 {
			var err error
			if b.db, err = b.open(dir, false); err != nil {
				return err
			}
			if err := b.loadMeta(); err != nil {
				return err
			}
			if err := b.keepOnly(mine); err != nil {
				return err
			}
			continue
		}
		if err := b.copyFrom(dir, mine); err != nil {
			return err
		}
		os.RemoveAll(dir)
	}
	if owned && len(olds) == 1 && !slices.ContainsFunc(olds[0].files, func(h checkpoint.Handle) bool { return h.KeyGroups != mine }) {
		for _, h := range olds[0].files {
			if h.Kind == KindData {
				b.confirmed[h.File] = h
			}
		}
	}
	return nil
}

// validName refuses a file name from a checkpoint that is not a plain
// name in a directory.
func validName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) || strings.ContainsRune(name, 0) {
		return fmt.Errorf("pebble state backend: checkpoint names a file %q, which is not a file name: %w", name, checkpoint.ErrCorrupt)
	}
	return nil
}

// download writes the files of one old database into dir, checking each
// one's checksum.
func download(dir string, files []checkpoint.Handle, r state.Reader) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, h := range files {
		if err := downloadOne(filepath.Join(dir, h.File), h, r); err != nil {
			return fmt.Errorf("restore %s subtask %d's %s (%s): %w", h.Operator, h.Subtask, h.File, where(h), err)
		}
	}
	return nil
}

func where(h checkpoint.Handle) string {
	if h.Path == "" {
		return "inline"
	}
	return h.Path
}

func downloadOne(path string, h checkpoint.Handle, r state.Reader) error {
	if h.Kind == KindFile {
		// A small file the database may write again (manifest, options,
		// markers): read whole, so that a local copy keeps a copy of it.
		data, err := r.Read(h)
		if err == nil {
			err = os.WriteFile(path, data, 0o644)
		}
		if err != nil {
			return err
		}
		return isPiece(h, int64(len(data)), crc(data))
	}
	in, err := r.Open(h)
	if err != nil {
		return err
	}
	defer in.Close()
	if v, ok := in.(state.VerifiedFile); ok && h.Kind == KindData && os.Link(v.VerifiedPath(), path) == nil {
		return nil // an sstable is never written once made: the local copy's file serves
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	sum := crc32.New(castagnoli)
	n, err := io.Copy(io.MultiWriter(f, sum), in)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = isPiece(h, n, sum.Sum32())
	}
	if err != nil {
		return err
	}
	if k, ok := in.(state.Keeper); ok && h.Kind == KindData && h.CRC32C != 0 {
		k.Keep(path)
	}
	return nil
}

// isPiece says whether n bytes with CRC-32C sum are the piece h describes.
func isPiece(h checkpoint.Handle, n int64, sum uint32) error {
	switch {
	case n != h.SizeBytes:
		return fmt.Errorf("%w: %d bytes, the checkpoint says %d", checkpoint.ErrStateDamaged, n, h.SizeBytes)
	case h.CRC32C != 0 && sum != h.CRC32C:
		return fmt.Errorf("%w: checksum %08x, the checkpoint says %08x", checkpoint.ErrStateDamaged, sum, h.CRC32C)
	}
	return nil
}

// keepOnly deletes the key groups outside r (the meta keys stay).
func (b *Backend) keepOnly(r keygroup.Range) error {
	lo, hi := groupKey(r.First), groupKey(r.Last+1)
	if err := b.db.DeleteRange(groupKey(0), lo, pebble.NoSync); err != nil {
		return err
	}
	return b.db.DeleteRange(hi, metaPrefix, pebble.NoSync)
}

func groupKey(g int) []byte { return binary.BigEndian.AppendUint16(nil, uint16(g)) }

// copyFrom copies the key groups of r from the database in dir, whose
// tables may have other ids.
func (b *Backend) copyFrom(dir string, r keygroup.Range) error {
	src, err := b.open(dir, true)
	if err != nil {
		return err
	}
	defer src.Close()
	other := &Backend{db: src, tables: map[string]uint16{}, kinds: map[string]string{}}
	if err := other.loadMeta(); err != nil {
		return err
	}
	ids := map[uint16]uint16{} // theirs → ours
	for name, id := range other.tables {
		_, had := b.tables[name]
		if ids[id], err = b.table(name); err != nil {
			return err
		}
		mine, theirs := b.kinds[name], other.kinds[name]
		if !had {
			mine = theirs
		}
		if kind, err := mergeKinds(name, mine, theirs); err != nil {
			return err
		} else if kind != b.kinds[name] {
			if err := b.setKind(name, kind); err != nil {
				return err
			}
		}
	}
	it, err := src.NewIter(&pebble.IterOptions{LowerBound: groupKey(r.First), UpperBound: groupKey(r.Last + 1)})
	if err != nil {
		return err
	}
	w := newBatchWriter(b.db)
	var key []byte
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		key = append(append(append(key[:0], k[:2]...), binary.BigEndian.AppendUint16(nil, ids[binary.BigEndian.Uint16(k[2:4])])...), k[4:]...)
		if err := w.set(key, it.Value()); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	return w.commit()
}

// mergeKinds is the kind of table name in a database merged from two
// whose kinds were a and b ("": recorded by neither).
func mergeKinds(name, a, b string) (string, error) {
	if a == b {
		return a, nil
	}
	if a == "" {
		a, b = b, a
	}
	switch {
	case b != "" && strings.TrimSuffix(a, "?") != strings.TrimSuffix(b, "?"):
		return "", fmt.Errorf("pebble state backend: state %q is %s state in one subtask's part of the checkpoint and %s state in another's: %w", name, a, b, checkpoint.ErrMismatch)
	case a == kindList || a == kindOldList:
		// A list, some of whose keys may be of the format before.
		return kindOldList, nil
	}
	// A value or map table is of one format in every version.
	return a, nil
}

// upperBound is the least key above every key beginning with prefix.
func upperBound(prefix []byte) []byte {
	end := slices.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil // every key
}

// table is what every state table has: its id and a buffer for keys.
type table struct {
	b  *Backend
	id uint16
	// fromHeap: the table is new to the database, and the heap backend
	// holds restored state of its name to migrate (see migrate.go).
	fromHeap      bool
	key, enc, val []byte // scratch
}

// newTable declares table name of kind (kindValue, kindList or kindMap)
// and returns it with the kind recorded before; unknown: the table holds
// state that a database written before kinds were recorded left.
func newTable(b *Backend, name, kind string) (t table, had string, unknown bool, err error) {
	_, known := b.tables[name]
	id, err := b.table(name)
	if err != nil {
		return table{}, "", false, err
	}
	t = table{b: b, id: id, fromHeap: !known && b.timers.Restored(name)}
	had = b.kinds[name]
	if had != "" && strings.TrimSuffix(had, "?") != kind {
		return t, had, false, kindMismatch(name, had, kind)
	}
	return t, had, known && had == "", nil
}

// prefixOf is the key of k in the current key group, length-prefixed so
// that list elements and map entries can follow it.
func prefixOf[K any](t *table, kc codec.Codec[K], k K) []byte { return prefixAt(t, t.b.group, kc, k) }

// prefixAt is prefixOf in key group g.
func prefixAt[K any](t *table, g int, kc codec.Codec[K], k K) []byte {
	t.enc = kc.Append(t.enc[:0], k)
	t.key = binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(t.key[:0], uint16(g)), t.id)
	t.key = binary.AppendUvarint(t.key, uint64(len(t.enc)))
	t.key = append(t.key, t.enc...)
	return t.key
}

func (t *table) get(key []byte) ([]byte, bool) {
	v, closer, err := t.b.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false
	}
	if err != nil {
		failed("read", err)
	}
	t.val = append(t.val[:0], v...)
	closer.Close()
	return t.val, true
}

func (t *table) set(key, value []byte) {
	if err := t.b.db.Set(key, value, pebble.NoSync); err != nil {
		failed("write", err)
	}
}

func (t *table) del(key []byte) {
	if err := t.b.db.Delete(key, pebble.NoSync); err != nil {
		failed("delete", err)
	}
}

// scan calls f with the suffix (after prefix) and value of every key that
// begins with prefix, until f returns false. The keys and values are valid
// during the call only.
func (t *table) scan(prefix []byte, f func(suffix, value []byte) bool) {
	it, err := t.b.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upperBound(prefix)})
	if err != nil {
		failed("read", err)
	}
	n := len(prefix)
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			failed("read", err)
		}
		if !f(it.Key()[n:], v) {
			break
		}
	}
	if err := it.Close(); err != nil {
		failed("read", err)
	}
}

// deletePrefix deletes every key beginning with prefix.
func (t *table) deletePrefix(prefix []byte) {
	batch := t.b.db.NewBatch()
	t.scan(prefix, func(suffix, _ []byte) bool {
		key := append(slices.Clip(prefix), suffix...)
		if err := batch.Delete(key, nil); err != nil {
			failed("delete", err)
		}
		return true
	})
	if err := batch.Commit(pebble.NoSync); err != nil {
		failed("delete", err)
	}
}

func decode[V any](vc codec.Codec[V], b []byte) V {
	v, _, err := vc.Decode(b)
	if err != nil {
		failed("decode", err)
	}
	return v
}

// Value is value state in Pebble, behind a write-back cache: a hot key is
// read and written in memory, and reaches the database when the cache is
// full or a snapshot is taken.
type Value[K comparable, V any] struct {
	table
	kc    codec.Codec[K]
	vc    codec.Codec[V]
	cache map[K]slot[V]
}

// NewValue declares value state name.
func NewValue[K comparable, V any](b *Backend, name string, kc codec.Codec[K], vc codec.Codec[V]) (*Value[K, V], error) {
	t, had, _, err := newTable(b, name, kindValue)
	if err == nil && had == "" {
		err = b.setKind(name, kindValue)
	}
	if err != nil {
		return nil, err
	}
	v := &Value[K, V]{table: t, kc: kc, vc: vc, cache: map[K]slot[V]{}}
	b.caches = append(b.caches, v)
	return v, migrateValue(v, name)
}

func (t *Value[K, V]) Get(k K) (V, bool) {
	if s, ok := t.cache[k]; ok {
		return s.v, !s.deleted
	}
	var v V
	b, ok := t.get(prefixOf(&t.table, t.kc, k))
	if ok {
		v = decode(t.vc, b)
	}
	t.room()
	// An absent key is cached too (clean and deleted): reads of keys that
	// are not there are the common case of new keys.
	t.cache[k] = slot[V]{v: v, group: t.b.group, deleted: !ok}
	return v, ok
}

func (t *Value[K, V]) Put(k K, v V) {
	t.room()
	t.cache[k] = slot[V]{v: v, group: t.b.group, dirty: true}
}

func (t *Value[K, V]) Delete(k K) {
	t.room()
	t.cache[k] = slot[V]{group: t.b.group, dirty: true, deleted: true}
}

// room empties a full cache: its dirty entries go to the database.
func (t *Value[K, V]) room() {
	if len(t.cache) < cacheEntries {
		return
	}
	batch := t.b.db.NewBatch()
	t.flush(batch)
	if err := batch.Commit(pebble.NoSync); err != nil {
		failed("write", err)
	}
	clear(t.cache)
}

func (t *Value[K, V]) flush(batch *pebble.Batch) {
	for k, s := range t.cache {
		if !s.dirty {
			continue
		}
		key := prefixAt(&t.table, s.group, t.kc, k)
		var err error
		if s.deleted {
			err = batch.Delete(key, nil)
			delete(t.cache, k)
		} else {
			t.val = t.vc.Append(t.val[:0], s.v)
			err = batch.Set(key, t.val, nil)
			s.dirty = false
			t.cache[k] = s
		}
		if err != nil {
			failed("write", err)
		}
	}
}

// List is list state in Pebble: a list is one key, whose value is its
// elements, each a uvarint length and the element's bytes. Add merges an
// element in (Pebble's default merger concatenates), reading nothing, as
// Flink's RocksDB list state appends with RocksDB's merge operator; Get
// is one point read. (Lists were an element per key under a sequence
// number: every read was an iterator, and every Update deleted the
// elements and wrote them again under new keys, so reads walked the
// tombstones of all the list's earlier versions.)
type List[K comparable, V any] struct {
	table
	kc   codec.Codec[K]
	vc   codec.Codec[V]
	elem []byte // scratch
}

// NewList declares list state name.
func NewList[K comparable, V any](b *Backend, name string, kc codec.Codec[K], vc codec.Codec[V]) (*List[K, V], error) {
	t, had, unknown, err := newTable(b, name, kindList)
	if err != nil {
		return nil, err
	}
	l := &List[K, V]{table: t, kc: kc, vc: vc}
	if had == kindList {
		return l, nil
	}
	if unknown || had == kindOldList {
		err = migrateListKeys(l, name, had == kindOldList)
	} else {
		err = migrateList(l, name)
	}
	if err == nil {
		err = b.setKind(name, kindList)
	}
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (t *List[K, V]) Get(k K) []V { return slices.Collect(t.All(k)) }

// All reads k's list when it is iterated.
func (t *List[K, V]) All(k K) iter.Seq[V] {
	key := slices.Clone(prefixOf(&t.table, t.kc, k))
	return func(yield func(V) bool) {
		v, closer, err := t.b.db.Get(key)
		if errors.Is(err, pebble.ErrNotFound) {
			return
		}
		if err != nil {
			failed("read", err)
		}
		// Pebble keeps v as it is until the closer closes, whatever yield
		// writes meanwhile (a memtable's or data file's bytes are never
		// written again; a merge's result is new).
		defer closer.Close()
		list := v
		for rest := list; len(rest) > 0; {
			n, w := binary.Uvarint(rest)
			if w <= 0 || n > uint64(len(rest)-w) {
				failed("decode", fmt.Errorf("a list of %d bytes whose element at byte %d runs past its end", len(list), len(list)-len(rest)))
			}
			e := rest[w : w+int(n)]
			rest = rest[w+int(n):]
			if !yield(decode(t.vc, e)) {
				return
			}
		}
	}
}

// appendElem appends v, length-prefixed, to b.
func (t *List[K, V]) appendElem(b []byte, v V) []byte {
	t.elem = t.vc.Append(t.elem[:0], v)
	return append(binary.AppendUvarint(b, uint64(len(t.elem))), t.elem...)
}

func (t *List[K, V]) Add(k K, v V) {
	t.val = t.appendElem(t.val[:0], v)
	if err := t.b.db.Merge(prefixOf(&t.table, t.kc, k), t.val, pebble.NoSync); err != nil {
		failed("write", err)
	}
}

func (t *List[K, V]) Update(k K, vs []V) {
	if len(vs) == 0 {
		t.Delete(k)
		return
	}
	t.val = t.val[:0]
	for _, v := range vs {
		t.val = t.appendElem(t.val, v)
	}
	t.set(prefixOf(&t.table, t.kc, k), t.val)
}

func (t *List[K, V]) Delete(k K) { t.del(prefixOf(&t.table, t.kc, k)) }

// Map is map state in Pebble: a key per entry, behind a write-back cache
// per key; iterating a key's map writes its cached changes first.
type Map[K, UK comparable, V any] struct {
	table
	kc     codec.Codec[K]
	ukc    codec.Codec[UK]
	vc     codec.Codec[V]
	cache  map[K]map[UK]slot[V]
	cached int
}

// NewMap declares map state name.
func NewMap[K, UK comparable, V any](b *Backend, name string, kc codec.Codec[K], ukc codec.Codec[UK], vc codec.Codec[V]) (*Map[K, UK, V], error) {
	t, had, _, err := newTable(b, name, kindMap)
	if err == nil && had == "" {
		err = b.setKind(name, kindMap)
	}
	if err != nil {
		return nil, err
	}
	m := &Map[K, UK, V]{table: t, kc: kc, ukc: ukc, vc: vc, cache: map[K]map[UK]slot[V]{}}
	b.caches = append(b.caches, m)
	return m, migrateMap(m, name)
}

func (t *Map[K, UK, V]) entryAt(g int, k K, uk UK) []byte {
	return t.ukc.Append(prefixAt(&t.table, g, t.kc, k), uk)
}

func (t *Map[K, UK, V]) Get(k K, uk UK) (V, bool) {
	if s, ok := t.cache[k][uk]; ok {
		return s.v, !s.deleted
	}
	var v V
	b, ok := t.get(t.entryAt(t.b.group, k, uk))
	if ok {
		v = decode(t.vc, b)
	}
	// An absent entry is cached too (clean and deleted): a window asks
	// for panes that never had a record.
	t.keep(k, uk, slot[V]{v: v, group: t.b.group, deleted: !ok})
	return v, ok
}

func (t *Map[K, UK, V]) Put(k K, uk UK, v V) {
	t.keep(k, uk, slot[V]{v: v, group: t.b.group, dirty: true})
}

func (t *Map[K, UK, V]) Remove(k K, uk UK) {
	if s, ok := t.cache[k][uk]; ok && s.deleted {
		return // known absent, or its deletion is already pending
	}
	t.keep(k, uk, slot[V]{group: t.b.group, dirty: true, deleted: true})
}

func (t *Map[K, UK, V]) keep(k K, uk UK, s slot[V]) {
	if t.cached >= cacheEntries {
		batch := t.b.db.NewBatch()
		t.flush(batch)
		if err := batch.Commit(pebble.NoSync); err != nil {
			failed("write", err)
		}
		clear(t.cache)
		t.cached = 0
	}
	m := t.cache[k]
	if m == nil {
		m = map[UK]slot[V]{}
		t.cache[k] = m
	}
	if _, ok := m[uk]; !ok {
		t.cached++
	}
	m[uk] = s
}

// All yields the cached entries of k, as they are when All is called (the
// caller may write while it iterates), then those of the database that
// the cache did not hold: the cache overrides the database without being
// written out first.
func (t *Map[K, UK, V]) All(k K) iter.Seq2[UK, V] {
	cached := maps.Clone(t.cache[k])
	prefix := slices.Clone(prefixOf(&t.table, t.kc, k))
	return func(yield func(UK, V) bool) {
		for uk, s := range cached {
			if !s.deleted && !yield(uk, s.v) {
				return
			}
		}
		t.scan(prefix, func(suffix, value []byte) bool {
			uk := decode(t.ukc, suffix)
			if _, ok := cached[uk]; ok {
				return true
			}
			return yield(uk, decode(t.vc, value))
		})
	}
}

func (t *Map[K, UK, V]) Delete(k K) {
	t.cached -= len(t.cache[k])
	delete(t.cache, k)
	t.deletePrefix(slices.Clone(prefixOf(&t.table, t.kc, k)))
}

func (t *Map[K, UK, V]) flush(batch *pebble.Batch) {
	for k, m := range t.cache {
		t.flushKey(batch, k, m)
	}
}

func (t *Map[K, UK, V]) flushKey(batch *pebble.Batch, k K, m map[UK]slot[V]) {
	for uk, s := range m {
		if !s.dirty {
			continue
		}
		key := t.entryAt(s.group, k, uk)
		var err error
		if s.deleted {
			err = batch.Delete(key, nil)
			delete(m, uk)
			t.cached--
		} else {
			t.val = t.vc.Append(t.val[:0], s.v)
			err = batch.Set(key, t.val, nil)
			s.dirty = false
			m[uk] = s
		}
		if err != nil {
			failed("write", err)
		}
	}
}

// Timers are kept on the heap; firing one makes its key group current
// here too.
type Timers[K comparable] struct {
	*heap.Timers[K]
	b *Backend
}

// NewTimers declares a timer table.
func NewTimers[K comparable](b *Backend, name string, kc codec.Codec[K]) (*Timers[K], error) {
	t, err := heap.NewTimers(b.timers, name, kc)
	return &Timers[K]{Timers: t, b: b}, err
}

func (t *Timers[K]) FireUpTo(limit int64, fire func(k K, at time.Time) error) error {
	return t.Timers.FireUpTo(limit, func(k K, at time.Time) error {
		t.b.group = t.b.timers.Group()
		return fire(k, at)
	})
}
