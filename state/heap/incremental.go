package heap

// Incremental snapshots (design note 86).
//
// Each table's state in each key group is a chain: a full section (every
// entry of the group) and then deltas (the keys deleted and the entries
// written since the section before). A snapshot writes one shared file
// holding a section for each (table, key group) that changed since the
// newest completed checkpoint, and a small index, the checkpoint's own
// keyed blob, that lists every chain: its sections' files, offsets and
// lengths. Its handles are the index and every shared file a chain still
// references; the storage's registry deletes the files no retained
// checkpoint references.
//
// Change tracking costs the task one store per write: an entry carries
// the epoch it was written in (copy-on-write needs it anyway), a group the
// epoch of its latest write, and a deletion is recorded with its epoch. The
// asynchronous part skips unchanged groups without reading them and
// emits, of the changed ones, the entries and deletions newer than the
// base's epoch.
//
// A chain longer than a bound, holding keys the group no longer holds as
// they are there (overwritten since, or deleted) at least as many as it
// does hold, or whose deltas outweigh the group's estimated bytes in full,
// is rewritten whole from the frozen map (the bounds differ between
// groups, so groups that change alike are not all rewritten at once): a
// restore reads at most maxLinks sections per table and group, less than
// 2.75 times the keys the group holds and about 3.75 times its bytes (as
// compactionDue estimates them), and one delta's. A group that only grows
// is not rewritten before its chain's bound: its chain holds nothing a
// rewrite would drop (design note 105).

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/state"
)

// KindData is the Handle.Kind of an incremental snapshot's shared file.
// The index is a keyed blob (state.KindKeyed).
const KindData = "heap-data"

var (
	dataMagic  = [4]byte{'W', 'K', 'I', '1'}
	indexMagic = [4]byte{'W', 'K', 'X', '1'}
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
)

// encoders is how many goroutines encode an incremental snapshot's key
// groups in parallel. More than the cores: a snapshot's asynchronous part
// competes with the job's tasks for them, and this gives it a larger share,
// so that a checkpoint ends sooner (issue 23: q3's checkpoints).
var encoders = max(4, runtime.GOMAXPROCS(0))

// maxLinks bounds a chain's sections. What it holds is bounded by the
// keys and bytes rules (see compactionDue): a long chain of small deltas
// costs a restore little, while rewriting a group whole costs a checkpoint
// all of it.
const maxLinks = 32

// section is a restored part of a chain: full, or a delta.
type section struct {
	full bool
	data []byte
}

// link is a section of a chain in a shared file: bytes [off, off+n),
// holding keys keys (entries, and a delta's deletions); -1: not known (a
// delta restored for a state not declared: its counts are found when it is
// applied, as the state is declared).
type link struct {
	file         *sharedFile
	off, n, keys int
	full         bool
}

// sectionKeys is the keys a restored section holds, as link.keys.
func sectionKeys(s section) int {
	if !s.full {
		return -1
	}
	n, _, err := codec.ReadLen(s.data)
	if err != nil {
		return -1
	}
	return n
}

// sharedFile is a shared file of a snapshot; h is set once it is written.
type sharedFile struct{ h checkpoint.Handle }

// sections is a part of a snapshot's shared file being encoded, to be
// written at offset at of file: the chunks done, then buf. Sections go
// into chunks that snapshots reuse (chunks), not a buffer of their own
// that grows: growing one by append to a snapshot's size, in fresh memory
// each time, was half of q3's snapshot CPU (issue 23).
type sections struct {
	file *sharedFile
	at   int
	done [][]byte
	n    int // the bytes of done
	buf  []byte
}

// chunkBytes is the size of a sections' chunk; a section that does not fit
// in what is left of one makes it larger. The first smallBytes of a part
// go to a buffer of its own, grown by append: a snapshot of little (one
// per encoder per backend, at every barrier) takes no chunk.
const (
	chunkBytes = 256 << 10
	smallBytes = 32 << 10
)

// chunks holds chunks written, for snapshots to encode into again.
var chunks = sync.Pool{New: func() any { return new([chunkBytes]byte) }}

// add appends a section with appendSection, which says the keys it wrote,
// and a link to it to the chain dst (a copy).
func (s *sections) add(dst []link, full bool, appendSection func([]byte) ([]byte, int)) []link {
	if len(s.buf) >= chunkBytes*3/4 || cap(s.buf) < chunkBytes && len(s.buf) >= smallBytes {
		s.done = append(s.done, s.buf)
		s.n += len(s.buf)
		s.buf = chunks.Get().(*[chunkBytes]byte)[:0]
	}
	off := len(s.buf)
	var keys int
	s.buf, keys = appendSection(s.buf)
	return append(slices.Clip(dst), link{file: s.file, off: s.at + s.n + off, n: len(s.buf) - off, keys: keys, full: full})
}

// len is the bytes of the sections.
func (s *sections) len() int { return s.n + len(s.buf) }

// bytes are the sections' bytes, in chunks, in order.
func (s *sections) bytes() [][]byte { return append(s.done, s.buf) }

// release gives the sections' chunks back for other snapshots to reuse;
// the sections are empty after it.
func (s *sections) release() {
	for _, c := range s.bytes() {
		if cap(c) == chunkBytes {
			chunks.Put((*[chunkBytes]byte)(c[:chunkBytes]))
		}
	}
	*s = sections{file: s.file, at: s.at}
}

// chains are a snapshot's chains: per table, per key group (index); a
// group with no state has none.
type chains struct {
	epoch  uint64 // the snapshot holds every write of this epoch and before
	tables map[string][][]link
}

func (b *Backend) confirmedEpoch() uint64 {
	if b.confirmed == nil {
		return 0
	}
	return b.confirmed.epoch
}

// pruned is a copy of deleted without the deletions a delta never needs
// again: those of epoch floor and before.
func pruned[K comparable](deleted map[K]uint64, floor uint64) map[K]uint64 {
	out := make(map[K]uint64, len(deleted))
	for k, e := range deleted {
		if e > floor {
			out[k] = e
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// frozen is a table as a freeze left it; key groups are indexes.
type frozen interface {
	len(g int) int // keys
	// changed: a write since epoch; whole: a Clear since epoch (a delta
	// cannot say it).
	changed(g int, since uint64) (changed, whole bool)
	appendFull(dst []byte, g int) []byte
	// appendDelta also returns the keys it wrote, deleted and written.
	appendDelta(dst []byte, g int, since uint64) ([]byte, int)
}

type frozenCow[K comparable, E any] struct {
	ec                *entryCodec[K, E]
	groups            []map[K]E
	deleted           []map[K]uint64
	written           [][]wrote[K]
	modified, cleared []uint64
	untracked         []uint64
}

func (f *frozenCow[K, E]) len(g int) int { return len(f.groups[g]) }

func (f *frozenCow[K, E]) changed(g int, since uint64) (bool, bool) {
	return f.modified[g] > since, f.cleared[g] > since
}

// appendFull appends a count and every entry of group g.
func (f *frozenCow[K, E]) appendFull(dst []byte, g int) []byte {
	m := f.groups[g]
	dst = codec.AppendLen(dst, len(m))
	for k, e := range m {
		dst = f.ec.appendEntry(dst, k, e)
	}
	return dst
}

// appendDelta appends the keys deleted since epoch since, then the
// entries written since (found by the keys written, without walking the
// group, unless they were dropped); each list begins with its count (4
// bytes).
// Applied in this order, a key deleted and written again is there.
func (f *frozenCow[K, E]) appendDelta(dst []byte, g int, since uint64) ([]byte, int) {
	at, n := len(dst), 0
	dst = append(dst, 0, 0, 0, 0)
	for k, e := range f.deleted[g] {
		if e > since {
			dst = f.ec.appendKey(dst, k)
			n++
		}
	}
	binary.BigEndian.PutUint32(dst[at:], uint32(n))
	deleted := n
	at, n = len(dst), 0
	dst = append(dst, 0, 0, 0, 0)
	m := f.groups[g]
	if f.untracked[g] > since {
		for k, e := range m {
			if f.ec.epochOf(e) > since {
				dst = f.ec.appendEntry(dst, k, e)
				n++
			}
		}
		binary.BigEndian.PutUint32(dst[at:], uint32(n))
		return dst, deleted + n
	}
	var again map[K]bool // keys deleted and made again in one epoch, written
	for _, w := range f.written[g] {
		if w.epoch <= since {
			continue
		}
		// A key written in several epochs is written once: as of the
		// epoch its entry was last made in. One deleted and made again in
		// that epoch is recorded once each time.
		e, ok := m[w.key]
		if !ok || f.ec.epochOf(e) != w.epoch {
			continue
		}
		if d, ok := f.deleted[g][w.key]; ok && d == w.epoch {
			if again[w.key] {
				continue
			}
			if again == nil {
				again = map[K]bool{}
			}
			again[w.key] = true
		}
		dst = f.ec.appendEntry(dst, w.key, e)
		n++
	}
	binary.BigEndian.PutUint32(dst[at:], uint32(n))
	return dst, deleted + n
}

// applySection applies restored section s to key group g (index) of t,
// and says the keys it held, as link.keys.
func applySection(t table, g int, s section) (keys int, err error) {
	put := func(src []byte) (int, error) { return t.put(g, src) }
	if s.full {
		return sectionKeys(s), restoreEntries(s.data, put)
	}
	data := s.data
	for _, apply := range []func([]byte) (int, error){func(src []byte) (int, error) { return t.deleteEncoded(g, src) }, put} {
		if len(data) < 4 {
			return 0, codec.ErrShort
		}
		n := binary.BigEndian.Uint32(data)
		data = data[4:]
		keys += int(n)
		for range n {
			used, err := apply(data)
			if err != nil {
				return 0, err
			}
			data = data[used:]
		}
	}
	if len(data) != 0 {
		return 0, fmt.Errorf("%d bytes after the last entry of a delta", len(data))
	}
	return keys, nil
}

// snapshotIncremental freezes every table; the asynchronous part writes
// the sections of what changed since the newest completed checkpoint. A
// full backend's snapshots have no base (confirmed stays nil): they write
// every group in full.
func (b *Backend) snapshotIncremental(id checkpoint.ID) state.Async {
	base := b.confirmed
	out := &chains{epoch: b.epoch}
	b.epoch++
	if b.incremental {
		b.taken[id] = out // filled by the asynchronous part
	}
	names := slices.Sorted(maps.Keys(b.byName))
	tables := make([]frozen, len(names))
	for i, n := range names {
		tables[i] = b.byName[n].freeze()
	}
	pendingNames := slices.Sorted(maps.Keys(b.pending))
	pending := make([]map[int][]section, len(pendingNames))
	for i, n := range pendingNames {
		pending[i] = maps.Clone(b.pending[n])
	}
	r := b.groups
	return func(w state.Writer) ([]checkpoint.Handle, error) {
		file := &sharedFile{}
		// The key groups are encoded by encoders in parallel, each a range
		// of them into sections of its own (the sections' order in the file
		// does not matter); the parts are then written one after the
		// other, and each new link's offset moved by where its part lands.
		ranges := min(encoders, r.Len())
		groupsOf := func(e int) (from, to int) { return r.Len() * e / ranges, r.Len() * (e + 1) / ranges }
		parts := make([]sections, ranges+1) // the last: the pending tables' chains
		defer func() {
			for i := range parts {
				parts[i].release()
			}
		}()
		tableChains := make([][][]link, len(names))
		for i := range names {
			tableChains[i] = make([][]link, r.Len())
		}
		var wg sync.WaitGroup
		// An encoder's panic (a codec's) is its range's error: on a
		// goroutine of its own it would end the process.
		panics := make([]error, ranges)
		for e := range ranges {
			wg.Go(func() {
				var at string // the table being encoded
				defer func() {
					if p := recover(); p != nil {
						err, ok := p.(error)
						if !ok {
							err = fmt.Errorf("%v", p)
						}
						panics[e] = &state.PanicError{Err: fmt.Errorf("heap state %q: encoding panicked: %w", at, err), Stack: debug.Stack()}
					}
				}()
				part := &parts[e]
				part.file = file
				for i, name := range names {
					at = name
					f, cs := tables[i], tableChains[i]
					var prev [][]link
					if base != nil {
						prev = base.tables[name]
					}
					from, to := groupsOf(e)
					for g := from; g < to; g++ {
						changed, whole := true, true // with no base chain, a full section
						if prev != nil {
							changed, whole = f.changed(g, base.epoch)
						}
						switch {
						case !changed:
							cs[g] = prev[g]
						case !whole && len(prev[g]) > 0 && !compactionDue(prev[g], g+i, f.len(g)):
							cs[g] = part.add(prev[g], false, func(dst []byte) ([]byte, int) { return f.appendDelta(dst, g, base.epoch) })
						case f.len(g) > 0:
							cs[g] = part.add(nil, true, func(dst []byte) ([]byte, int) { return f.appendFull(dst, g), f.len(g) })
						}
					}
				}
			})
		}
		wg.Wait()
		for _, err := range panics {
			if err != nil {
				return nil, err
			}
		}
		// Each range's new links move by where its buffer begins.
		at := len(dataMagic)
		for e := range ranges {
			from, to := groupsOf(e)
			for _, cs := range tableChains {
				for _, c := range cs[from:to] {
					if len(c) > 0 && c[len(c)-1].file == file {
						c[len(c)-1].off += at
					}
				}
			}
			at += parts[e].len()
		}
		result := map[string][][]link{}
		for i, name := range names {
			result[name] = tableChains[i]
		}
		pendingPart := &parts[ranges]
		pendingPart.file, pendingPart.at = file, at
		// Tables restored and not registered do not change: their chains
		// are copied once into this file, then referenced.
		for i, name := range pendingNames {
			cs := make([][]link, r.Len())
			if base != nil && base.tables[name] != nil {
				cs = base.tables[name]
			} else {
				for g, ss := range pending[i] {
					for _, s := range ss {
						cs[g] = pendingPart.add(cs[g], s.full, func(dst []byte) ([]byte, int) { return append(dst, s.data...), sectionKeys(s) })
					}
				}
			}
			result[name] = cs
		}
		if at+pendingPart.len() > len(dataMagic) {
			// A copy: a writer may change what it is given (a test's file
			// system that damages writes does), and dataMagic is shared.
			magic := dataMagic
			sum := crc32.Checksum(magic[:], castagnoli)
			readers := []io.Reader{bytes.NewReader(magic[:])}
			for _, p := range parts {
				for _, c := range p.bytes() {
					sum = crc32.Update(sum, castagnoli, c)
					readers = append(readers, bytes.NewReader(c))
				}
			}
			h, err := w.WriteShared(checkpoint.Handle{Kind: KindData, KeyGroups: r, File: fmt.Sprintf("heap-%d", id), CRC32C: sum}, io.MultiReader(readers...))
			if err != nil {
				return nil, err
			}
			file.h = h
		}
		index, files := encodeIndex(r.First, r.Last, result)
		h, err := w.Write(checkpoint.Handle{Kind: state.KindKeyed, KeyGroups: r}, index)
		if err != nil {
			return nil, err
		}
		out.tables = result
		hs := []checkpoint.Handle{h}
		for _, f := range files {
			hs = append(hs, f.h)
		}
		return hs, nil
	}
}

// compactionDue says whether chain prev of a group that now holds live
// keys is rewritten whole rather than extended: when it is at its bound,
// between maxLinks/2+1 and maxLinks sections; when the keys it holds that
// the group no longer holds as they are there (overwritten or deleted
// since) outnumber the keys the group holds 1 to 1.75 times; or when its
// deltas outweigh the group's bytes in full 2 to 2.75 times, estimated
// from its full section's bytes per key (a growing group's deltas come
// near its bytes in full, and its new entries may be larger than its
// old: the margin keeps it from being rewritten for that). Both ratios
// depend on salt: groups with other salts (key group and table) reach
// their bounds at other checkpoints, so groups that change alike are not
// all rewritten at once.
//
// A rewrite pays for itself by what it drops: what the chain holds beyond
// the group. A group that only grows (q3's join, a word count meeting new
// words) holds nothing to drop, and rewriting it whole would cost a
// checkpoint the group's size instead of the change (design note 105):
// neither ratio grows with it, as its deltas hold its new keys, which the
// estimate of its size counts too. The keys rule bounds what a restore
// decodes; the bytes rule bounds what it reads when a few keys with large
// entries (a long list, a big value) are rewritten by every delta. A chain
// with a section whose keys are not known (see link.keys) is rewritten
// when its deltas outweigh its full section 1 to 1.75 times (note 86).
func compactionDue(prev []link, salt, live int) bool {
	if len(prev) >= maxLinks/2+1+salt%(maxLinks/2) {
		return true
	}
	keys, deltas := 0, 0
	for i, l := range prev {
		if keys >= 0 && l.keys >= 0 {
			keys += l.keys
		} else {
			keys = -1
		}
		if i > 0 {
			deltas += l.n
		}
	}
	ratio := float64(4+salt%4) / 4
	full := float64(prev[0].n) // the group's bytes in full
	if keys < 0 {
		return float64(deltas) > full*ratio
	}
	if prev[0].keys > 0 {
		full *= float64(live) / float64(prev[0].keys)
	}
	return float64(keys-live) > float64(live)*ratio || float64(deltas) > full*(1+ratio)
}

// encodeIndex writes the chains of key groups first..last: the shared
// files they reference (by File name), then per key group the tables'
// chains, and a CRC-32C. It returns the files in the index's order.
func encodeIndex(first, last int, tables map[string][][]link) ([]byte, []*sharedFile) {
	var files []*sharedFile
	fileIndex := map[*sharedFile]int{}
	for _, cs := range tables {
		for _, c := range cs {
			for _, l := range c {
				if _, ok := fileIndex[l.file]; !ok {
					fileIndex[l.file] = len(files)
					files = append(files, l.file)
				}
			}
		}
	}
	buf := slices.Clone(indexMagic[:])
	buf = binary.BigEndian.AppendUint32(buf, uint32(first))
	buf = binary.BigEndian.AppendUint32(buf, uint32(last))
	buf = codec.AppendLen(buf, len(files))
	for _, f := range files {
		buf = codec.AppendBytes(buf, []byte(f.h.File))
	}
	names := slices.Sorted(maps.Keys(tables))
	for g := range last - first + 1 {
		n := 0
		for _, name := range names {
			if len(tables[name][g]) > 0 {
				n++
			}
		}
		buf = codec.AppendLen(buf, n)
		for _, name := range names {
			c := tables[name][g]
			if len(c) == 0 {
				continue
			}
			buf = codec.AppendLen(codec.AppendBytes(buf, []byte(name)), len(c))
			for _, l := range c {
				full := 0
				if l.full {
					full = 1
				}
				buf = codec.AppendLen(buf, fileIndex[l.file])
				buf = codec.AppendLen(buf, full)
				buf = codec.AppendLen(buf, l.off)
				buf = codec.AppendLen(buf, l.n)
			}
		}
	}
	return binary.BigEndian.AppendUint32(buf, crc32.Checksum(buf, castagnoli)), files
}

func isIndex(blob []byte) bool { return len(blob) >= 4 && [4]byte(blob[:4]) == indexMagic }

// restoreChains applies the chains of the index blob (of handle ih) for
// this backend's key groups, reading each shared file they reference once
// and checking it against its handle. If into is set, it also gets the
// chains, referencing the restored files.
func (b *Backend) restoreChains(ih checkpoint.Handle, blob []byte, hs []checkpoint.Handle, read func(checkpoint.Handle) ([]byte, error), into *chains) error {
	if len(blob) < 4+8+4 {
		return fmt.Errorf("%w: heap index: short", state.ErrCorrupt)
	}
	body := blob[:len(blob)-4]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(blob[len(blob)-4:]) {
		return fmt.Errorf("%w: heap index: checksum mismatch", state.ErrCorrupt)
	}
	first, last := int(binary.BigEndian.Uint32(body[4:])), int(binary.BigEndian.Uint32(body[8:]))
	in := &indexReader{src: body[12:]}
	nf := in.len(len(hs))
	handles := make([]checkpoint.Handle, nf)
	for i := range handles {
		name := in.bytes()
		j := slices.IndexFunc(hs, func(h checkpoint.Handle) bool {
			return h.Kind == KindData && h.Operator == ih.Operator && h.Subtask == ih.Subtask && h.File == name
		})
		if j < 0 && in.err == nil {
			return fmt.Errorf("%w: heap state file %s of %s subtask %d is not in the checkpoint", checkpoint.ErrStateDamaged, name, ih.Operator, ih.Subtask)
		}
		if j >= 0 {
			handles[i] = hs[j]
		}
	}
	data := make([][]byte, nf) // read when first needed
	files := make([]*sharedFile, nf)
	for i, h := range handles {
		files[i] = &sharedFile{h: h}
	}
	for g := first; g <= last && in.err == nil; g++ {
		for range in.len(len(in.src)) {
			name := in.bytes()
			for range in.len(maxLinks) {
				fi, full, off, n := in.len(nf-1), in.len(1), in.len(1<<62), in.len(1<<62)
				if in.err != nil || !b.groups.Contains(g) {
					continue
				}
				if data[fi] == nil {
					d, err := readShared(handles[fi], read)
					if err != nil {
						return err
					}
					data[fi] = d
				}
				if off < len(dataMagic) || off > len(data[fi]) || n > len(data[fi])-off {
					return fmt.Errorf("%w: heap state file %s (%s): key group %d, state %q: section out of bounds", state.ErrCorrupt, handles[fi].File, where(handles[fi]), g, name)
				}
				s := section{full: full == 1, data: data[fi][off : off+n]}
				keys, err := b.apply(name, g, s)
				if err != nil {
					return fmt.Errorf("key group %d, state %q: %w", g, name, err)
				}
				if into != nil {
					cs := into.tables[name]
					if cs == nil {
						cs = make([][]link, b.groups.Len())
						into.tables[name] = cs
					}
					i := g - b.groups.First
					cs[i] = append(cs[i], link{file: files[fi], off: off, n: n, keys: keys, full: s.full})
				}
			}
		}
	}
	if in.err == nil && len(in.src) != 0 {
		in.err = errors.New("bytes after the last key group")
	}
	if in.err != nil {
		return fmt.Errorf("%w: heap index: %v", state.ErrCorrupt, in.err)
	}
	return nil
}

// indexReader decodes an index; its first error sticks, and every read
// after it returns zero.
type indexReader struct {
	src []byte
	err error
}

// len reads a count or offset, at most limit.
func (r *indexReader) len(limit int) int {
	if r.err != nil {
		return 0
	}
	u, used := binary.Uvarint(r.src)
	n := int(u)
	switch {
	case used <= 0:
		r.err = codec.ErrShort
		return 0
	case limit < 0 || u > uint64(limit):
		r.err = fmt.Errorf("%d where at most %d fits", n, limit)
		return 0
	}
	r.src = r.src[used:]
	return n
}

func (r *indexReader) bytes() string {
	if r.err != nil {
		return ""
	}
	s, used, err := codec.ReadBytes(r.src)
	if err != nil {
		r.err = err
		return ""
	}
	r.src = r.src[used:]
	return string(s)
}

// readShared reads a shared file and checks its size and checksum.
func readShared(h checkpoint.Handle, read func(checkpoint.Handle) ([]byte, error)) ([]byte, error) {
	d, err := read(h)
	switch {
	case err != nil:
		return nil, fmt.Errorf("heap state file %s (%s): %w", h.File, where(h), err)
	case int64(len(d)) != h.SizeBytes:
		return nil, fmt.Errorf("%w: heap state file %s (%s): %d bytes, the checkpoint says %d", checkpoint.ErrStateDamaged, h.File, where(h), len(d), h.SizeBytes)
	case crc32.Checksum(d, castagnoli) != h.CRC32C:
		return nil, fmt.Errorf("%w: heap state file %s (%s): checksum %08x, the checkpoint says %08x", checkpoint.ErrStateDamaged, h.File, where(h), crc32.Checksum(d, castagnoli), h.CRC32C)
	case len(d) < len(dataMagic) || [4]byte(d[:4]) != dataMagic:
		return nil, fmt.Errorf("%w: heap state file %s (%s) is not a heap state file", state.ErrCorrupt, h.File, where(h))
	}
	return d, nil
}

func where(h checkpoint.Handle) string {
	if h.Path == "" {
		return "inline"
	}
	return h.Path
}
