package pebble

import (
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// scratchFS is the file system of a database that is scratch space: what
// makes state durable is the checkpoint's upload, never the local disk, so
// syncs are skipped.
type scratchFS struct{ vfs.FS }

func (fs scratchFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return noSync(fs.FS.Create(name, c))
}

func (fs scratchFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return noSync(fs.FS.OpenReadWrite(name, c, opts...))
}

func (fs scratchFS) OpenDir(name string) (vfs.File, error) { return noSync(fs.FS.OpenDir(name)) }

func (fs scratchFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return noSync(fs.FS.ReuseForWrite(oldname, newname, c))
}

func noSync(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

type noSyncFile struct{ vfs.File }

func (noSyncFile) Sync() error                { return nil }
func (noSyncFile) SyncData() error            { return nil }
func (noSyncFile) SyncTo(int64) (bool, error) { return true, nil }

// blockCaches are the block caches the process's databases share, by
// size.
var blockCaches = struct {
	sync.Mutex
	m map[int64]*sharedCache
}{m: map[int64]*sharedCache{}}

type sharedCache struct {
	set   func(*pebble.Options) // sets the cache as the option's
	unref func()
	size  int64
	users int
}

// acquireCache returns the shared block cache of size bytes, for a
// backend's life: release it when the backend closes.
func acquireCache(size int64) *sharedCache {
	blockCaches.Lock()
	defer blockCaches.Unlock()
	sc := blockCaches.m[size]
	if sc == nil {
		c := pebble.NewCache(size)
		sc = &sharedCache{set: func(o *pebble.Options) { o.Cache = c }, unref: c.Unref, size: size}
		blockCaches.m[size] = sc
	}
	sc.users++
	return sc
}

func (sc *sharedCache) release() {
	blockCaches.Lock()
	defer blockCaches.Unlock()
	if sc.users--; sc.users == 0 {
		sc.unref() // open databases keep their own references
		delete(blockCaches.m, sc.size)
	}
}

// cacheEntries bounds each table's write-back cache.
const cacheEntries = 1 << 13

// slot is a cached value: clean (as in the database), dirty (to write), or
// deleted (to delete).
type slot[V any] struct {
	v       V
	group   int
	dirty   bool
	deleted bool
}

// flusher is a table whose cache the backend writes out: before a
// snapshot, and when the cache is full.
type flusher interface {
	flush(b *pebble.Batch)
}

// flushAll writes every table's dirty entries in one batch.
func (b *Backend) flushAll() error {
	batch := b.db.NewBatch()
	for _, f := range b.caches {
		f.flush(batch)
	}
	if batch.Empty() {
		return batch.Close()
	}
	return batch.Commit(pebble.NoSync)
}
