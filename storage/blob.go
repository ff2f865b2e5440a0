package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/url"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
	_ "gocloud.dev/blob/s3blob" // s3:// URLs
	"gocloud.dev/gcerrors"

	"github.com/weirstream/weir/checkpoint"
)

// Blob keeps checkpoints in object storage (gocloud.dev/blob): S3 and
// S3-compatible stores (s3://bucket/prefix?endpoint=…&region=…), or a
// bucket in the process's memory for tests (mem://name). Layout under
// <prefix>/<job>/:
//
//	chk-<id>/_reserved   written when the checkpoint is triggered
//	chk-<id>/_metadata   written last: an object PUT is atomic, so its
//	                     presence means the checkpoint completed
//	chk-<id>/<state>     state of that checkpoint
//	shared/<op>/<name>   files several checkpoints reference
//	_lease               which run uses the job's checkpoints, until when
//	                     (written only conditionally: lease.go)
//	_lease.probe         written at Lock, to see that the store honours
//	                     conditional writes
//
// Listings may lag writes (eventually consistent stores): a scan probes
// the ids after the highest it listed, and reads metadata by name.
type Blob struct {
	bucket *blob.Bucket // prefixed with <prefix>/<job>/
	where  string
	// place is where the job's checkpoints are, for SamePlace: the scheme,
	// bucket, prefix and job, and the query (which may pick the server).
	place       string
	inlineBytes int
	lease       time.Duration
	gate        *writeGate
	shared      *registry
	cas         casStore              // writes _lease conditionally (lease.go)
	held        atomic.Pointer[lease] // this run's lease, from Lock to Close
	// owner names this run in its lease; "" is its pid, host and start.
	owner string
	log   *slog.Logger // says what Lock waits for; nil: nothing
}

// SetLogger makes Lock say what it waits for while another run's lease is
// current.
func (b *Blob) SetLogger(l *slog.Logger) { b.log = l }

// IsURL reports whether a checkpoint location is a URL Blob storage
// serves.
func IsURL(dir string) bool {
	return strings.HasPrefix(dir, "s3://") || strings.HasPrefix(dir, "mem://")
}

// AbsoluteLocation is the checkpoint location loc (a path, file://path or
// an object store's URL) as it is named from any directory: a path
// absolute and without file://, a URL as it is.
func AbsoluteLocation(loc string) string {
	if IsURL(loc) {
		return loc
	}
	loc = strings.TrimPrefix(loc, "file://")
	if abs, err := filepath.Abs(loc); err == nil {
		return abs
	}
	return loc
}

// CheckpointLocation is where checkpoint id of job is in the checkpoint
// storage at dir (a directory, or a URL whose query is kept; job may be
// empty when dir is already the job's): what --restore takes.
func CheckpointLocation(dir, job string, id checkpoint.ID) string {
	if IsURL(dir) {
		if u, err := url.Parse(dir); err == nil {
			u.Path = strings.TrimSuffix(u.Path, "/") + "/" + path.Join(job, chkName(id))
			return u.String()
		}
	}
	return filepath.Join(dir, job, chkName(id))
}

// DefaultLease is how long a run's claim on object storage lasts unless
// renewed: a run that was killed blocks the next one at most this long.
const DefaultLease = 30 * time.Second

var (
	memMu      sync.Mutex
	memBuckets = map[string]*blob.Bucket{}
)

// OpenBlob opens the object storage at rawURL for job. Besides the
// store's own query parameters (s3: endpoint, region, use_path_style, …;
// credentials come from the environment, as AWS tools read them), lease
// sets how long a run's claim lasts (default DefaultLease).
func OpenBlob(ctx context.Context, rawURL, job string) (*Blob, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("checkpoint storage %q: %w", rawURL, err)
	}
	if job == "" || strings.ContainsAny(job, `/\`) || job == "." || job == ".." {
		return nil, fmt.Errorf("checkpoint storage: job name %q cannot be a directory name", job)
	}
	// NB: not u.Query(), which drops what it cannot parse (a ';' and all
	// after it) without a word.
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("checkpoint storage %s: its query: %w: write it as name=value pairs joined by '&', with '%%' escapes", redact(u), err)
	}
	lease := DefaultLease
	if l := q.Get("lease"); l != "" {
		if lease, err = time.ParseDuration(l); err != nil || lease <= 0 {
			return nil, fmt.Errorf("checkpoint storage %q: lease %q: want a duration above 0 (30s)", redact(u), l)
		}
		q.Del("lease")
	}
	prefix := strings.Trim(u.Path, "/")
	var b *blob.Bucket
	var cas func(*blob.Bucket) casStore
	switch u.Scheme {
	case "mem":
		memMu.Lock()
		if b = memBuckets[u.Host]; b == nil {
			b = memblob.OpenBucket(nil)
			memBuckets[u.Host] = b
		}
		memMu.Unlock()
		cas = func(b *blob.Bucket) casStore { return memCAS{b} }
	case "s3":
		bu := url.URL{Scheme: u.Scheme, Host: u.Host, RawQuery: q.Encode()}
		if b, err = blob.OpenBucket(ctx, bu.String()); err != nil {
			return nil, fmt.Errorf("checkpoint storage %s: %w", redact(u), err)
		}
		cas = func(b *blob.Bucket) casStore { return s3CAS{b} }
	default:
		return nil, fmt.Errorf("checkpoint storage %q: want s3://bucket/prefix or mem://name", redact(u))
	}
	if prefix != "" {
		prefix += "/"
	}
	where := redact(u) + "/" + job
	place := u.Scheme + "://" + u.Host + "/" + prefix + job + "?" + q.Encode()
	b = blob.PrefixedBucket(b, prefix+job+"/")
	return &Blob{bucket: b, where: where, place: place, inlineBytes: DefaultInlineBytes, lease: lease,
		gate: newWriteGate(), shared: newRegistry(), cas: cas(b)}, nil
}

// redact is u for people: scheme, host and path, no query (it may hold
// secrets).
func redact(u *url.URL) string {
	return strings.TrimSuffix(u.Scheme+"://"+u.Host+u.Path, "/")
}

func (b *Blob) Describe() string { return b.where }

// bg is the context of storage calls: they are bounded by the store's
// own retries and timeouts.
func bg() context.Context { return context.Background() }

func (b *Blob) Reserve(id checkpoint.ID) error {
	if err := b.fence(); err != nil {
		return fmt.Errorf("checkpoint %d: reserve: %w", id, err)
	}
	if err := b.bucket.WriteAll(bg(), chkName(id)+"/_reserved", nil, nil); err != nil {
		return fmt.Errorf("checkpoint %d: reserve in %s: %w", id, b.where, err)
	}
	b.shared.reserve(id)
	return nil
}

func (b *Blob) WriteState(id checkpoint.ID, h checkpoint.Handle, data []byte) (checkpoint.Handle, error) {
	h.SizeBytes = int64(len(data))
	if len(data) <= b.inlineBytes {
		h.Path, h.Inline = "", slices.Clone(data)
		if h.Inline == nil {
			h.Inline = []byte{}
		}
		return h, nil
	}
	name := fmt.Sprintf("%s.%d.%s", url.PathEscape(h.Operator), h.Subtask, url.PathEscape(h.Kind))
	if h.Kind == checkpoint.KindKeyed {
		name += fmt.Sprintf(".kg%d-%d", h.KeyGroups.First, h.KeyGroups.Last)
	}
	if h.File != "" {
		name += "." + url.PathEscape(h.File)
	}
	key := chkName(id) + "/" + name
	if err := b.fence(); err != nil {
		return h, fmt.Errorf("checkpoint %d: write %s: %w", id, handleName(h), err)
	}
	err := b.gate.write(id, func(ctx context.Context) error { return b.bucket.WriteAll(ctx, key, data, nil) })
	if err != nil {
		return h, fmt.Errorf("checkpoint %d: write %s to %s: %w", id, handleName(h), b.where, err)
	}
	h.Inline, h.Path = nil, key
	return h, nil
}

func (b *Blob) WriteShared(id checkpoint.ID, h checkpoint.Handle, r io.Reader) (checkpoint.Handle, error) {
	h.Inline, h.Path = nil, sharedName(id, h)
	if err := b.fence(); err != nil {
		return h, fmt.Errorf("checkpoint %d: write %s: %w", id, h.Path, err)
	}
	err := b.gate.write(id, func(ctx context.Context) error {
		b.shared.wrote(id, h.Path)
		w, err := b.bucket.NewWriter(ctx, h.Path, nil)
		if err != nil {
			return err
		}
		n, err := io.Copy(w, r)
		h.SizeBytes = n
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		return err
	})
	if err != nil {
		return h, fmt.Errorf("checkpoint %d: %w", id, sharedErr("write", h, err))
	}
	return h, nil
}

func (b *Blob) ReadState(h checkpoint.Handle) ([]byte, error) {
	r, err := b.OpenState(h)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read %s from %s: %w", handleName(h), b.where, err)
	}
	return data, nil
}

func (b *Blob) OpenState(h checkpoint.Handle) (io.ReadCloser, error) {
	if h.Path == "" {
		return io.NopCloser(bytes.NewReader(h.Inline)), nil
	}
	if err := checkpoint.ValidatePath(h.Path); err != nil {
		return nil, err
	}
	r, err := b.bucket.NewReader(bg(), h.Path, nil)
	if err != nil {
		return nil, fmt.Errorf("read %s: %s/%s: %w", handleName(h), b.where, h.Path, damaged(err))
	}
	if r.Size() != h.SizeBytes {
		r.Close()
		return nil, fmt.Errorf("read %s: %w: %s/%s is %d bytes, the metadata says %d", handleName(h), checkpoint.ErrStateDamaged, b.where, h.Path, r.Size(), h.SizeBytes)
	}
	return r, nil
}

// Commit writes the metadata object: one PUT, the commit point. A run
// that holds the lease first renews it on the condition that it is still
// its own, and gives the PUT only the time before another run may take
// the lease: a run that lost it fails with ErrLeaseLost and commits
// nothing.
func (b *Blob) Commit(m *checkpoint.Metadata) error {
	if err := b.shared.check(m); err != nil {
		return err
	}
	data, err := checkpoint.Encode(m)
	if err != nil {
		return err
	}
	ctx, cancel, err := b.commitWindow()
	if err != nil {
		return fmt.Errorf("checkpoint %d: not committed: %w", m.ID, err)
	}
	defer cancel()
	if err := b.bucket.WriteAll(ctx, chkName(m.ID)+"/"+MetadataFile, data, nil); err != nil && ctx.Err() != nil {
		return fmt.Errorf("checkpoint %d: write metadata to %s: not done before the lease could run out: %w", m.ID, b.where, unavailable(err))
	} else if err != nil {
		return fmt.Errorf("checkpoint %d: write metadata to %s: %w", m.ID, b.where, err)
	}
	if err := b.remove(b.shared.committed(m)); err != nil {
		return fmt.Errorf("checkpoint %d completed, but %w: %w", m.ID, ErrFreedFilesStay, err)
	}
	return nil
}

// Scan lists the checkpoints. It reads metadata by name, and probes the
// ids after the highest listed, so a listing that lags writes does not
// hide the newest. Metadata that is not there makes a checkpoint
// incomplete, metadata proven damaged (ProvenDamage) puts it in Damaged;
// any other error (a 5xx, a timeout) fails Scan with ErrUnavailable,
// naming the object.
func (b *Blob) Scan() (Scan, error) {
	var s Scan
	ids := map[checkpoint.ID]bool{}
	it := b.bucket.List(&blob.ListOptions{Delimiter: "/"})
	for {
		o, err := it.Next(bg())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Scan{}, fmt.Errorf("list %s: %w", b.where, unavailable(err))
		}
		if id, ok := parseChk(strings.TrimSuffix(o.Key, "/")); ok && o.IsDir {
			ids[id] = true
		} else if !o.IsDir {
			if err := b.scanRollback(&s, o.Key); err != nil {
				return Scan{}, err
			}
		}
	}
	for id := range ids {
		s.MaxID = max(s.MaxID, id)
	}
	for next := s.MaxID + 1; ; next++ {
		ok, err := b.bucket.Exists(bg(), chkName(next)+"/_reserved")
		if err != nil {
			return Scan{}, fmt.Errorf("scan checkpoints: %s/%s: %w", b.where, chkName(next)+"/_reserved", unavailable(err))
		}
		if !ok {
			break
		}
		ids[next], s.MaxID = true, next
	}
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		key := chkName(id) + "/" + MetadataFile
		data, err := b.bucket.ReadAll(bg(), key)
		if gcerrors.Code(err) == gcerrors.NotFound {
			s.Incomplete = append(s.Incomplete, id)
			continue
		}
		if err != nil && !plantedDefect3.Load() {
			// NB: not damage: skipping the checkpoint would restore an
			// older one and delete this one.
			return Scan{}, fmt.Errorf("scan checkpoints: checkpoint metadata %s/%s: %w", b.where, key, unavailable(err))
		}
		var m *checkpoint.Metadata
		if err == nil {
			m, err = checkpoint.Decode(data)
		}
		if err == nil && m.ID != id {
			err = fmt.Errorf("%w: it describes checkpoint %d", checkpoint.ErrCorrupt, m.ID)
		}
		if err != nil {
			s.Damaged = append(s.Damaged, Damaged{ID: id, Path: b.where + "/" + key, Err: fmt.Errorf("checkpoint metadata %s/%s: %w", b.where, key, err)})
			continue
		}
		s.Completed = append(s.Completed, m)
	}
	settleRollbacks(&s)
	b.shared.reset(s.Completed)
	return s, nil
}

// Discard deletes the metadata first, then the checkpoint's own objects,
// then the shared ones it was the last to reference.
func (b *Blob) Discard(id checkpoint.ID) error {
	if err := b.fence(); err != nil {
		return fmt.Errorf("discard checkpoint %d: %w", id, err)
	}
	defer b.gate.discard(id)()
	dir := chkName(id) + "/"
	if err := b.bucket.Delete(bg(), dir+MetadataFile); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return fmt.Errorf("discard checkpoint %d in %s: %w", id, b.where, err)
	}
	keys, err := b.list(dir)
	if err != nil {
		return fmt.Errorf("discard checkpoint %d: %w", id, err)
	}
	if err := b.remove(keys); err != nil {
		return fmt.Errorf("discard checkpoint %d: %w", id, err)
	}
	if err := b.remove(b.shared.discarded(id)); err != nil {
		return fmt.Errorf("discard checkpoint %d: shared files: %w", id, err)
	}
	return nil
}

// list returns every key under prefix.
func (b *Blob) list(prefix string) ([]string, error) {
	var keys []string
	it := b.bucket.List(&blob.ListOptions{Prefix: prefix})
	for {
		o, err := it.Next(bg())
		if errors.Is(err, io.EOF) {
			return keys, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list %s/%s: %w", b.where, prefix, err)
		}
		keys = append(keys, o.Key)
	}
}

func (b *Blob) remove(keys []string) error {
	var errs []error
	for _, k := range keys {
		if err := b.bucket.Delete(bg(), k); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (b *Blob) DiscardState(hs []checkpoint.Handle) error {
	if err := b.fence(); err != nil {
		return fmt.Errorf("delete state: %w", err)
	}
	errs := []error{b.remove(b.shared.unreferenced(hs))}
	var keys []string
	for _, h := range hs {
		if h.Path == "" || IsShared(h) {
			continue
		}
		if err := checkpoint.ValidatePath(h.Path); err != nil {
			errs = append(errs, err)
			continue
		}
		keys = append(keys, h.Path)
	}
	return errors.Join(append(errs, b.remove(keys))...)
}

func (b *Blob) RemoveOrphans() error { return b.removeOrphans(nil) }

// removeOrphans is Dir.removeOrphans's.
func (b *Blob) removeOrphans(alive func() error) error {
	if err := b.fence(); err != nil {
		return fmt.Errorf("delete orphaned shared files: %w", err)
	}
	all, err := b.list(SharedDir + "/")
	if err != nil {
		return err
	}
	if alive != nil {
		if err := alive(); err != nil {
			return err
		}
	}
	return b.remove(b.shared.orphans(all))
}

// OpenCheckpointURL opens the completed checkpoint at rawURL, the URL of a
// chk-<id> prefix or its _metadata object (s3://bucket/prefix/<job>/chk-7).
func OpenCheckpointURL(ctx context.Context, rawURL string) (*checkpoint.Metadata, Storage, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("restore from %q: %w", rawURL, err)
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if parts[len(parts)-1] == MetadataFile {
		parts = parts[:len(parts)-1]
	}
	id, ok := parseChk(parts[len(parts)-1])
	if !ok || len(parts) < 2 {
		return nil, nil, fmt.Errorf("checkpoint %s: not a checkpoint: expected <job>/chk-<id> or its %s", redact(u), MetadataFile)
	}
	job := parts[len(parts)-2]
	u.Path = "/" + strings.Join(parts[:len(parts)-2], "/")
	b, err := OpenBlob(ctx, u.String(), job)
	if err != nil {
		return nil, nil, err
	}
	data, err := b.bucket.ReadAll(bg(), chkName(id)+"/"+MetadataFile)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, nil, fmt.Errorf("checkpoint %s: no %s: the checkpoint never completed (%w)", redact(u), MetadataFile, err)
	} else if err != nil {
		return nil, nil, fmt.Errorf("checkpoint %s: %s: %w", redact(u), MetadataFile, unavailable(err))
	}
	m, err := checkpoint.Decode(data)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint %s: %w", rawURL, err)
	}
	if m.ID != id {
		return nil, nil, fmt.Errorf("checkpoint %s: %w: the metadata describes checkpoint %d", rawURL, checkpoint.ErrCorrupt, m.ID)
	}
	return m, b, nil
}
