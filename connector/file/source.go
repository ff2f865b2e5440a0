// Package file reads and writes files: a line source with its offsets in
// checkpointed state, and an exactly-once sink that commits files by rename
// when a checkpoint completes. Every file access goes through vfs.FS.
package file

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/codec"
	"github.com/weirstream/weir/internal/arena"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/state"
)

// DefaultSplitBytes is the size of the byte ranges large files are read in.
const DefaultSplitBytes = 64 << 20

// DefaultMaxLineBytes is the longest line Lines reads unless told
// otherwise (LinesConfig.MaxLineBytes).
const DefaultMaxLineBytes = 16 << 20

// MaxMaxLineBytes is the highest LinesConfig.MaxLineBytes may be: a line is
// held whole in memory.
const MaxMaxLineBytes = 1 << 30

// ErrLineTooLong is what reading a line longer than
// LinesConfig.MaxLineBytes fails with, marked permanent (operator.Permanent):
// the same bytes are there after a restart, so the job fails at once.
var ErrLineTooLong = errors.New("line too long")

// ErrUnreadInputDropped is what a restore fails with, marked permanent, when
// the input (LinesConfig.Pattern, --input) no longer matches a file that the
// checkpoint has not read to its end: removed from the pattern, renamed or
// deleted. Its unread lines would be lost; the error names the files, the
// input the checkpoint was taken with and this run's.
var ErrUnreadInputDropped = errors.New("no longer matches files the checkpoint has not read to the end")

// ErrInputShrank is what reading a file fails with, marked permanent, when
// the file is now shorter than it was when the source took it: it was
// truncated or replaced, and the lines the checkpointed position points
// into are gone. The error names the file and both sizes.
var ErrInputShrank = errors.New("is shorter than when the job took it")

// LinesConfig configures Lines.
type LinesConfig struct {
	FS vfs.FS // default the real file system
	// Pattern is a file path or a glob ("logs/*.txt", "logs/*/part-*"):
	// any element may hold wildcards (path.Match syntax; * does not cross
	// a separator, and, unlike a shell's, matches names that begin with a
	// dot).
	Pattern string
	// SplitBytes is the largest byte range one split reads; 0 means
	// DefaultSplitBytes.
	SplitBytes int64
	// BatchLines is how many lines one Read emits at most; default 1024.
	BatchLines int
	// MaxLineBytes is the longest line read, in bytes, not counting the
	// \n or \r\n that ends it; 0 means DefaultMaxLineBytes, and at most
	// MaxMaxLineBytes. A longer line fails the job at once with
	// ErrLineTooLong, naming the file and the line's byte offset.
	MaxLineBytes int
	// SharedBlocks cuts lines out of shared 4 KiB blocks instead of
	// allocating a string per line (a line over 512 bytes gets its own).
	// NB: a line kept alive, or any part of it, keeps its whole block
	// alive. Heap state copies the strings of the keys and values it keeps
	// (Pebble's encodes them); set SharedBlocks when the job keeps no other
	// line text (in its own variables, behind pointers in state values), or
	// keeps strings.Clone of what it keeps.
	SharedBlocks bool
}

// URLScheme returns the scheme of s, lower-cased, if s begins as a URL
// does: a scheme (RFC 3986: a letter, then letters, digits, '+', '-' or
// '.') and a colon, as in kafka://host/topic, kafka:/host, Kafka://host or
// s3:bucket. Commands that take a path or a URL in one argument use it to
// tell them apart: a URL whose scheme they do not serve is an error, not a
// directory named "mysql:" (a path that begins so is written ./mysql:x).
func URLScheme(s string) (scheme string, ok bool) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		case i > 0 && c == ':':
			return strings.ToLower(s[:i]), true
		default:
			return "", false
		}
	}
	return "", false
}

// split is a byte range of a file; Pos is where the next line starts.
type split struct {
	Path            string // as the input spelled it when the split was made
	Start, End, Pos int64
	started         bool // Pos is at a line start (the first partial line was skipped)
	// File is the file's fileID when the split was made; empty in a
	// checkpoint of an earlier version of Weir (then Path's is taken). A
	// restore finds the file by it, not by Path: a relative path or a
	// symbolic link may name another file by then.
	File string
}

// left is the bytes the split has still to read.
func (s split) left() int64 { return max(s.End-s.Pos, 0) }

func (s split) id() string { return fmt.Sprintf("%s@%d", s.Path, s.Start) }

func (s split) encode() []byte {
	b := codec.AppendBytes(nil, []byte(s.Path))
	b = binary.AppendVarint(b, s.Start)
	b = binary.AppendVarint(b, s.End)
	b = binary.AppendVarint(b, s.Pos)
	if s.started {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	return codec.AppendBytes(b, []byte(s.File))
}

func decodeSplit(b []byte) (split, error) {
	var s split
	p, n, err := codec.ReadBytes(b)
	if err != nil {
		return s, err
	}
	s.Path = string(p)
	b = b[n:]
	for _, dst := range []*int64{&s.Start, &s.End, &s.Pos} {
		v, k := binary.Varint(b)
		if k <= 0 {
			return s, codec.ErrShort
		}
		*dst, b = v, b[k:]
	}
	if len(b) < 1 {
		return s, codec.ErrShort
	}
	s.started, b = b[0] == 1, b[1:]
	if len(b) == 0 {
		return s, nil // an earlier version of Weir recorded no File
	}
	f, n, err := codec.ReadBytes(b)
	if err != nil {
		return s, err
	}
	if n != len(b) {
		return s, codec.ErrShort
	}
	s.File = string(f)
	return s, nil
}

// Lines returns a source of the lines of the files matching cfg.Pattern,
// read in byte-range splits dealt to the subtasks evenly. Positions are
// checkpointed, so a restore resumes at the line after the last one a
// completed checkpoint covers. It fails now if the pattern matches no
// readable file.
//
// The checkpoint also records every file the source has taken (by path) and
// the pattern. A restore whose pattern matches files the checkpoint does not
// know reads them from their start, as new splits of subtask 0 (as Flink's
// FileSource does with files it discovers); a file the checkpoint knows is
// never read again, even when it was read to the end. A file is known by its
// absolute path with symbolic links resolved, and only once it has bytes. A restore whose pattern no longer
// matches a file the checkpoint has not read to the end fails with
// ErrUnreadInputDropped. NB: files are taken as immutable: a known file that
// grew is not read past the size it had when its splits were made, and one
// that shrank below it fails the read with ErrInputShrank.
func Lines(cfg LinesConfig) (func() weir.SourceReader[string], error) {
	if cfg.FS == nil {
		cfg.FS = vfs.Default
	}
	if cfg.SplitBytes <= 0 {
		cfg.SplitBytes = DefaultSplitBytes
	}
	if cfg.BatchLines <= 0 {
		cfg.BatchLines = 1024
	}
	switch {
	case cfg.MaxLineBytes == 0:
		cfg.MaxLineBytes = DefaultMaxLineBytes
	case cfg.MaxLineBytes < 0 || cfg.MaxLineBytes > MaxMaxLineBytes:
		return nil, fmt.Errorf("input %s: max line bytes %d: want 1 to %d (0: the default, %d)", cfg.Pattern, cfg.MaxLineBytes, MaxMaxLineBytes, DefaultMaxLineBytes)
	}
	files, err := glob(cfg.FS, cfg.Pattern)
	if err != nil {
		return nil, err
	}
	var splits []split
	ids := make(map[string]string, len(files))
	taken := make(map[string]string, len(files)) // by fileID: the first path matching it
	for _, f := range files {
		// A file matched twice (by a symbolic link to it, or a link to its
		// directory) is read once, by its first path: a restore and a
		// rewind know files by their fileID, and would read it once.
		id := fileID(cfg.FS, f)
		if _, ok := taken[id]; ok {
			continue
		}
		taken[id], ids[f] = f, id
		// Stat first: opening a FIFO waits for its writer, and a pipe's
		// size says nothing of its lines. The source reads a file by
		// position, to resume at a checkpoint's offset.
		if st, err := cfg.FS.Stat(f); err == nil && !st.Mode().IsRegular() {
			return nil, fmt.Errorf("input %s is %s, not a regular file: the file source reads files by position, to resume where a checkpoint left off; write the input to a file first", f, kindOf(st.Mode()))
		}
		// Open each file now: an unreadable input is a mistake to report at
		// start, not a failure to restart the job for.
		r, err := cfg.FS.Open(f)
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", f, err)
		}
		st, err := r.Stat()
		r.Close()
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", f, err)
		}
		for start := int64(0); start < st.Size(); start += cfg.SplitBytes {
			splits = append(splits, split{Path: f, Start: start, End: min(start+cfg.SplitBytes, st.Size()), Pos: start, File: id})
		}
	}
	var total int64
	for _, sp := range splits {
		total += sp.End - sp.Start
	}
	return func() weir.SourceReader[string] {
		return &lineReader{cfg: cfg, all: splits, ids: ids, paths: taken, total: total}
	}, nil
}

// kindOf names a file mode that is not a regular file's.
func kindOf(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a pipe or FIFO"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return "a " + m.Type().String()
}

// fileID names a file however the input spells it: on the real file system
// its absolute path with symbolic links resolved (when it exists), so that
// "data/a.txt", "./data/a.txt" and "$PWD/data/a.txt" are one file;
// otherwise its cleaned path.
func fileID(fs vfs.FS, path string) string {
	if vfs.Root(fs) != vfs.Default {
		return filepath.Clean(path)
	}
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return filepath.Clean(path)
}

// glob lists the files matching pattern, sorted. Any path element may hold
// wildcards (path.Match syntax; a * does not cross a separator, and ** is no
// different from *).
func glob(fs vfs.FS, pattern string) ([]string, error) {
	if pattern == "" {
		return nil, errors.New("input: no file given")
	}
	if !hasMeta(pattern) {
		st, err := fs.Stat(pattern)
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", pattern, err)
		}
		if st.IsDir() {
			return nil, fmt.Errorf("input %s is a directory; give a file or a glob such as %s", pattern, fs.PathJoin(pattern, "*"))
		}
		return []string{pattern}, nil
	}
	out, err := expand(fs, pattern, false)
	if err != nil {
		return nil, fmt.Errorf("input %s: %w", pattern, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("input %s matches no file", pattern)
	}
	slices.Sort(out)
	return out, nil
}

func hasMeta(p string) bool { return strings.ContainsAny(p, "*?[") }

// expand lists the paths matching pattern that are directories (dirs) or
// files (!dirs), expanding its parent first when that holds wildcards.
func expand(fs vfs.FS, pattern string, dirs bool) ([]string, error) {
	parent, base := fs.PathDir(pattern), fs.PathBase(pattern)
	if _, err := path.Match(base, ""); err != nil {
		return nil, fmt.Errorf("bad pattern %q: %w", base, err)
	}
	parents := []string{parent}
	if hasMeta(parent) {
		var err error
		if parents, err = expand(fs, parent, true); err != nil {
			return nil, err
		}
	}
	var out []string
	for _, dir := range parents {
		names, err := fs.List(dir)
		if err != nil {
			if hasMeta(parent) {
				continue // a match that vanished or is unreadable
			}
			return nil, err
		}
		for _, n := range names {
			if ok, _ := path.Match(base, n); !ok {
				continue
			}
			p := fs.PathJoin(dir, n)
			if st, err := fs.Stat(p); err == nil && st.IsDir() == dirs {
				out = append(out, p)
			}
		}
	}
	return out, nil
}

type lineReader struct {
	operator.Base
	cfg   LinesConfig
	all   []split           // every split of the job, for a fresh start
	ids   map[string]string // every file cfg.Pattern matches, empty ones too: its fileID
	paths map[string]string // ids inverted: the path this run matches a file by
	total int64             // bytes of every split
	// known is every file the source has taken (cleaned): those this
	// run's input matches and those the restored checkpoint records, with
	// how its splits were made (for a rewind). It is never read again from
	// its start; subtask 0 checkpoints it.
	known map[string]made
	// took is, after a fresh start, the splits this subtask was dealt, by
	// file, with the file's size in this process's glob, which every
	// subtask checkpoints ("took", union state). In a cluster each
	// process globs the input itself, and a file may differ between them:
	// empty in one (no split there) and not in another, or grown in
	// between (more splits). Each deals a split by its index, so a split
	// is dealt to one subtask in every process, but only read if that
	// subtask's process has it. A restore reads what of each file no
	// subtask took, and nothing it took (subtask 0's size alone lost the
	// splits of a grown file that only the other process had, or read a
	// file empty in subtask 0's glob again, whole); a rewind reads what
	// was taken. Nil after a restore: subtask 0's known then holds every
	// file, up to the size the job took it at. (What only a process whose
	// subtask took no split of a file saw is recorded nowhere, and not
	// read: design note 137.)
	took   map[string]taken
	mine   []split // this subtask's, in order; mine[0] is being read
	ctx    *operator.Context
	f      vfs.File
	r      *bufio.Reader
	reader *split        // the split r reads
	blocks arena.Strings // where lines are cut from, with cfg.SharedBlocks
}

func (l *lineReader) Open(ctx *operator.Context) error {
	l.ctx = ctx
	// NB: a file known is never read again, so an empty one is not known:
	// it has no split, and the lines it may get later are read by the
	// restore that finds it.
	l.known = make(map[string]made, len(l.ids))
	for _, s := range l.all {
		id := s.File
		l.known[id] = made{size: max(l.known[id].size, s.End), split: l.cfg.SplitBytes}
	}
	switch {
	case ctx.Rewind:
		return l.rewind(ctx.Restore)
	case ctx.Restore != nil:
		return l.restore(ctx.Restore)
	}
	l.mine = l.dealFresh(ctx.Subtask, ctx.Parallelism)
	l.took = map[string]taken{}
	for _, s := range l.mine {
		t := l.took[s.File]
		t.size, t.split, t.ranges = l.known[s.File].size, l.cfg.SplitBytes, append(t.ranges, byteRange{s.Start, s.End})
		l.took[s.File] = t
	}
	return nil
}

// taken is what a fresh start's subtasks took of a file: its size in
// their processes' globs (the greatest), the split size, and their splits'
// byte ranges.
type taken struct {
	size, split int64
	ranges      []byteRange
}

// byteRange is a split's bytes of its file, [start, end).
type byteRange struct{ start, end int64 }

// The "took" union state holds an item per file and subtask that took
// splits of it at a fresh start (lineReader.took): its id, a NUL, the
// file's size in the subtask's glob, the split size, and the splits'
// starts and ends, as varints; and each subtask's item of no id
// (freshMark), which says the checkpoint is a fresh start's, its size the
// bytes of the input the subtask's process listed.
func tookItem(id string, t taken) []byte {
	b := binary.AppendVarint(binary.AppendVarint(append([]byte(id), 0), t.size), t.split)
	for _, r := range t.ranges {
		b = binary.AppendVarint(binary.AppendVarint(b, r.start), r.end)
	}
	return b
}

// freshMark is the id of each subtask's own item in "took".
const freshMark = ""

// restoreTook reads every subtask's took: by file, its greatest size, the
// split size and every range taken, sorted (nil if the checkpoint is not a
// fresh start's); and the most bytes of the input a process listed.
func restoreTook(rs *operator.Restore) (map[string]taken, int64, error) {
	items, err := state.RestoreList(rs.Handles, rs.Read, state.Union, "took", 0, 1)
	if err != nil || len(items) == 0 {
		return nil, 0, err
	}
	var listed int64
	out := map[string]taken{}
	for _, it := range items {
		id, rest, ok := bytes.Cut(it, []byte{0})
		size, n1 := binary.Varint(rest)
		split, n2 := binary.Varint(rest[max(n1, 0):])
		if !ok || n1 <= 0 || n2 <= 0 {
			return nil, 0, fmt.Errorf("splits taken: %w", codec.ErrShort)
		}
		if string(id) == freshMark {
			listed = max(listed, size)
			continue
		}
		t := out[string(id)]
		t.size, t.split = max(t.size, size), split
		for rest = rest[n1+n2:]; len(rest) > 0; {
			start, n1 := binary.Varint(rest)
			end, n2 := binary.Varint(rest[max(n1, 0):])
			if n1 <= 0 || n2 <= 0 || end <= start {
				return nil, 0, fmt.Errorf("splits taken: %w", codec.ErrShort)
			}
			t.ranges = append(t.ranges, byteRange{start, end})
			rest = rest[n1+n2:]
		}
		out[string(id)] = t
	}
	for _, t := range out {
		slices.SortFunc(t.ranges, func(a, b byteRange) int { return cmp.Compare(a.start, b.start) })
	}
	return out, listed, nil
}

// untaken cuts what of a file of size bytes the ranges taken do not cover
// into splits on the grid of splitBytes (a rewind reads a file in its
// splits, and takes out what recorded splits within one had not read),
// the first of a gap from where a taken one ends (its lines start there,
// as the taken splits' end: a split reads the lines that start in it).
func untaken(path, id string, size, splitBytes int64, taken []byteRange) []split {
	var out []split
	cut := func(from, to int64) {
		for start := from; start < to; {
			end := min((start/splitBytes+1)*splitBytes, to)
			out = append(out, split{Path: path, Start: start, End: end, Pos: start, File: id})
			start = end
		}
	}
	at := int64(0)
	for _, r := range taken {
		cut(at, min(r.start, size))
		at = max(at, r.end)
	}
	cut(at, size)
	return out
}

// Rewindable: the files a checkpoint read can be read again (they are
// taken as immutable).
func (l *lineReader) Rewindable() error { return nil }

// rewind takes this subtask's share of what checkpoint rs had read (nil:
// nothing): the splits of every file it knew, as the job made them (of
// cfg.SplitBytes, up to the size the file had then), each up to the
// position the checkpoint recorded for it (not at all if not started), or
// whole if it recorded none (it was read to the end). The splits keep
// their ids, so event time has the same per-split watermarks.
func (l *lineReader) rewind(rs *operator.Restore) error {
	if rs == nil {
		return nil
	}
	items, err := state.RestoreList(rs.Handles, rs.Read, state.Split, "splits", 0, 1)
	if err != nil {
		return fmt.Errorf("input %s: rewind to checkpoint %d: %w", l.cfg.Pattern, rs.Checkpoint, err)
	}
	known, err := state.RestoreList(rs.Handles, rs.Read, state.Union, "files", 0, 1)
	if err != nil {
		return fmt.Errorf("input %s: rewind to checkpoint %d: %w", l.cfg.Pattern, rs.Checkpoint, err)
	}
	if len(known) == 0 && len(items) > 0 {
		return operator.Permanent(fmt.Errorf("input %s: checkpoint %d, taken by an earlier version of Weir, does not record which files it read: it cannot be rewound", l.cfg.Pattern, rs.Checkpoint))
	}
	sizes, err := restoreMade(rs)
	if err != nil {
		return fmt.Errorf("input %s: rewind to checkpoint %d: %w", l.cfg.Pattern, rs.Checkpoint, err)
	}
	type at struct {
		id    string
		start int64
	}
	recorded := map[at]split{}
	for _, it := range items {
		s, err := decodeSplit(it)
		if err != nil {
			return fmt.Errorf("input %s: rewind to checkpoint %d: %w", l.cfg.Pattern, rs.Checkpoint, err)
		}
		recorded[at{l.fileOf(s), s.Start}] = s
	}
	var read []split
	pathOf := func(id string) string {
		if path, ok := l.paths[id]; ok {
			return path
		}
		return id // NB: a file the input no longer matches: the id is its path
	}
	// add reads split s again, but what its recorded splits (unfinished
	// at the checkpoint: begun or not) had not read by then: one where the
	// job split the file so, or several within it where a restore did
	// (untaken: the rest of a file one process's listing had shorter, cut
	// at the end of its last split there, then on the grid of the split
	// size, so that none crosses a split of the grid). What is not
	// recorded was read whole.
	add := func(s split) {
		var cut []split
		for k, r := range recorded {
			if k.id == s.File && s.Start <= k.start && k.start < s.End {
				cut = append(cut, r)
				delete(recorded, k)
			}
		}
		slices.SortFunc(cut, func(a, b split) int { return cmp.Compare(a.Start, b.Start) })
		piece := func(from, to int64) {
			if from < to {
				read = append(read, split{Path: s.Path, Start: from, End: to, Pos: from, File: s.File})
			}
		}
		from := s.Start
		for _, r := range cut {
			piece(from, r.Start)
			if r.started {
				piece(r.Start, r.Pos) // NB: r.Pos is at a line start, after the skip of a partial first line
			}
			from = r.End
		}
		piece(from, s.End)
	}
	// A checkpoint of a fresh start: what each subtask took, exactly (the
	// processes' globs may have split a file apart); else each file known,
	// as it was split.
	took, _, err := restoreTook(rs)
	if err != nil {
		return fmt.Errorf("input %s: rewind to checkpoint %d: %w", l.cfg.Pattern, rs.Checkpoint, err)
	}
	for _, id := range slices.Sorted(maps.Keys(took)) {
		for _, r := range took[id].ranges {
			add(split{Path: pathOf(id), Start: r.start, End: r.end, Pos: r.start, File: id})
		}
		l.known[id] = made{size: max(took[id].size, sizes[id].size), split: took[id].split}
	}
	for _, f := range known {
		id := string(f)
		if _, ok := took[id]; ok {
			continue
		}
		if took != nil {
			// A fresh start's checkpoint: no subtask took a split of it
			// (the subtask each was dealt to had none in its listing).
			l.known[id] = sizes[id]
			continue
		}
		path := pathOf(id)
		m, ok := sizes[id]
		if !ok {
			return operator.Permanent(fmt.Errorf("input %s: checkpoint %d does not record the size %s had when the job took it (the job took it under an earlier version of Weir): it cannot be rewound", l.cfg.Pattern, rs.Checkpoint, path))
		}
		l.known[id] = m // read up to that size (openSplit)
		for start := int64(0); start < m.size; start += m.split {
			add(split{Path: path, Start: start, End: min(start+m.split, m.size), Pos: start, File: id})
		}
	}
	for _, r := range recorded {
		return operator.Permanent(fmt.Errorf("input %s: checkpoint %d records a split of %s at byte %d, which is not one of the splits it records the file was read in", l.cfg.Pattern, rs.Checkpoint, r.Path, r.Start))
	}
	l.mine = deal(read, l.ctx.Subtask, l.ctx.Parallelism)
	return nil
}

// deal returns subtask i of p's share of splits read from a checkpoint, in
// their order. Shares are balanced by the bytes left to read: the largest
// split goes first, each to the subtask with the fewest bytes so far (then
// the fewest splits, then the lowest index), so no share exceeds another by
// more than the largest split. Every subtask deals the checkpoint's list
// alike. NB: dealing every p-th split gave one subtask every file's first
// 64 MiB and the other its tail, when the files were a little over the
// split size.
func deal(splits []split, i, p int) []split {
	order := make([]int, len(splits))
	for j := range order {
		order[j] = j
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(splits[b].left(), splits[a].left()) })
	bytes, count := make([]int64, p), make([]int, p)
	to := make([]int, len(splits))
	for _, j := range order {
		least := 0
		for k := 1; k < p; k++ {
			if bytes[k] < bytes[least] || bytes[k] == bytes[least] && count[k] < count[least] {
				least = k
			}
		}
		to[j] = least
		bytes[least] += splits[j].left()
		count[least]++
	}
	return share(splits, to, i)
}

// dealFresh returns subtask i of p's share of a fresh start's splits, in
// their order. Split k (from 0) of the n-th file the input matches (by
// path, empty files too) goes to subtask (n+k) mod p: a file's splits go
// round the subtasks, and each file starts one subtask after the one
// before it, so that files of about one size are shared evenly. NB: a
// split's subtask depends on nothing but its file's place and its own: in a
// cluster each process globs and stats the files itself when it builds the
// job (a replacement worker minutes later), and a file that grew in
// between has more splits in one process than in another, which must not
// move the other splits (dealt in list order or by offset, they moved, and
// were read twice or never). A file that appears in between and sorts
// before others still moves theirs.
func (l *lineReader) dealFresh(i, p int) []split {
	place := make(map[string]int, len(l.ids))
	for n, path := range slices.Sorted(maps.Keys(l.ids)) {
		place[path] = n
	}
	to := make([]int, len(l.all))
	for j, s := range l.all {
		to[j] = (place[s.Path] + int(s.Start/l.cfg.SplitBytes)) % p
	}
	return share(l.all, to, i)
}

// share is the splits dealt to subtask i (to[j]: split j's), in their order.
func share(splits []split, to []int, i int) []split {
	var mine []split
	for j, s := range splits {
		if to[j] == i {
			mine = append(mine, s)
		}
	}
	return mine
}

// maxNamedFiles bounds the files an error or a log line names.
const maxNamedFiles = 10

// fileOf is the fileID of the file split s reads: the one recorded with
// it, or (recorded by an earlier version of Weir) its path's now.
func (l *lineReader) fileOf(s split) string {
	if s.File != "" {
		return s.File
	}
	if id, ok := l.ids[s.Path]; ok {
		return id
	}
	return fileID(l.cfg.FS, s.Path)
}

// pathOf is the path split s is opened by: the one this run's input
// matches its file by, else its fileID.
func (l *lineReader) pathOf(s *split) string {
	id := l.fileOf(*s)
	if p, ok := l.paths[id]; ok {
		return p
	}
	return id
}

// restore takes this subtask's share of the checkpointed splits and, in
// subtask 0, the splits of files the input now matches that the checkpoint
// does not know. Every subtask reads every split and every known file, so
// all of them decide alike, and rescaled (split state is dealt again by
// the bytes left). NB: only subtask 0 takes the new files, which it alone
// records as known: in a cluster every process matches the input itself,
// and a file that appeared between two processes' starts would otherwise
// be dealt by one and not by the other (lost), and be new again at the
// next restore (read twice).
func (l *lineReader) restore(rs *operator.Restore) error {
	items, err := state.RestoreList(rs.Handles, rs.Read, state.Split, "splits", 0, 1)
	if err != nil {
		return fmt.Errorf("input %s: restore positions: %w", l.cfg.Pattern, err)
	}
	recorded := make([]split, len(items))
	for i, it := range items {
		if recorded[i], err = decodeSplit(it); err != nil {
			return fmt.Errorf("input %s: restore position: %w", l.cfg.Pattern, err)
		}
	}
	known, err := state.RestoreList(rs.Handles, rs.Read, state.Union, "files", l.ctx.Subtask, l.ctx.Parallelism)
	if err != nil {
		return fmt.Errorf("input %s: restore the files read: %w", l.cfg.Pattern, err)
	}
	input, err := state.RestoreList(rs.Handles, rs.Read, state.Union, "input", l.ctx.Subtask, l.ctx.Parallelism)
	if err != nil {
		return fmt.Errorf("input %s: restore the input read: %w", l.cfg.Pattern, err)
	}
	matched := make(map[string]bool, len(l.ids))
	for _, id := range l.ids {
		matched[id] = true
	}
	var dropped []string
	for _, s := range recorded {
		if id := l.fileOf(s); !matched[id] && !(s.started && s.Pos >= s.End) && !slices.Contains(dropped, id) {
			dropped = append(dropped, id)
		}
	}
	if len(dropped) > 0 {
		was, fix := "", "restore with an input that matches them"
		if len(input) == 1 {
			was = fmt.Sprintf(" (the checkpoint was taken reading input %s)", input[0])
			fix = fmt.Sprintf("restore with an input that matches them, such as %s", input[0])
		}
		return operator.Permanent(fmt.Errorf("restore checkpoint %d: input %s %w: %s%s; %s, or put them back: their unread lines would be lost",
			rs.Checkpoint, l.cfg.Pattern, ErrUnreadInputDropped, nameFiles(dropped), was, fix))
	}

	if len(input) == 0 {
		// NB: a checkpoint taken before files were recorded (by an earlier
		// version of Weir) holds positions only: a matched file it holds
		// none for may have been read to the end, so it is taken as read,
		// as it was then. It records no input either (both came in one
		// version); known files alone cannot tell it, since a checkpoint
		// whose input matched only empty files knows none.
		positioned := make(map[string]bool, len(recorded))
		for _, s := range recorded {
			positioned[l.fileOf(s)] = true
		}
		var unknown []string
		for id := range matched {
			if !positioned[id] {
				unknown = append(unknown, id)
			}
		}
		slices.Sort(unknown)
		if len(unknown) > 0 && l.ctx.Subtask == 0 {
			l.ctx.Logger.Warn("file source: the checkpoint, taken by an earlier version of Weir, does not record which files it read to the end: matched files it holds no position for are taken as read, and not read",
				"input", l.cfg.Pattern, "checkpoint", rs.Checkpoint, "files", len(unknown), "names", nameFiles(unknown))
		}
		l.mine = deal(recorded, l.ctx.Subtask, l.ctx.Parallelism)
		return nil
	}

	sizes, err := restoreMade(rs)
	if err != nil {
		return fmt.Errorf("input %s: restore the sizes of the files read: %w", l.cfg.Pattern, err)
	}
	wasKnown := make(map[string]bool, len(known))
	for _, f := range known {
		wasKnown[string(f)] = true
		// NB: without a size recorded (an earlier version of Weir took the
		// file), none is carried on: the file may have grown since.
		l.known[string(f)] = sizes[string(f)]
	}
	l.mine = deal(recorded, l.ctx.Subtask, l.ctx.Parallelism)
	if l.ctx.Subtask != 0 {
		return nil
	}
	// A checkpoint of a fresh start: what of each file no subtask took
	// (no process of the subtask it was dealt to had it), up to the
	// greatest size subtask 0's process or a taker's saw.
	took, listed, err := restoreTook(rs)
	if err != nil {
		return fmt.Errorf("input %s: restore the splits taken: %w", l.cfg.Pattern, err)
	}
	var accounted int64 // bytes of the files the fresh start took that the job reads
	rest := map[string]bool{}
	for _, f := range known {
		// Files subtask 0 listed with lines and no subtask took a split
		// of: the subtask each was dealt to had none in its listing.
		if _, ok := took[string(f)]; took != nil && !ok && sizes[string(f)].size > 0 {
			took[string(f)] = taken{split: sizes[string(f)].split}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(took)) {
		t := took[id]
		t.size = max(t.size, sizes[id].size)
		if t.split <= 0 {
			t.split = l.cfg.SplitBytes
		}
		l.known[id] = made{size: t.size, split: t.split}
		accounted += t.size
		more := untaken(l.paths[id], id, t.size, t.split, t.ranges)
		if len(more) == 0 {
			continue
		}
		if !matched[id] {
			return operator.Permanent(fmt.Errorf("restore checkpoint %d: input %s %w: %s; restore with an input that matches it, or put it back: its unread lines would be lost",
				rs.Checkpoint, l.cfg.Pattern, ErrUnreadInputDropped, id))
		}
		l.mine = append(l.mine, more...)
		rest[id] = true
	}
	unread := map[string]bool{}
	for _, s := range l.all {
		if _, taken := took[s.File]; !wasKnown[s.File] && !taken {
			l.mine = append(l.mine, s)
			unread[s.File] = true
		}
	}
	if listed > accounted {
		// A process listed bytes that no record holds: a file grew while
		// the processes listed the input, and only a process whose
		// subtask took none of its splits saw it so (design note 137); or
		// such a process alone listed a file with lines, which this
		// restore reads whole as a new one. (New files do not count: one
		// that landed since would hide the first.)
		l.ctx.Logger.Warn("file source: a process listed more of the input at the job's start than the files the job took then: a file grew while the processes listed it, and what only a process that took none of its splits saw may not be read; a job started on input that no longer changes reads it all",
			"input", l.cfg.Pattern, "checkpoint", rs.Checkpoint, "listed", listed, "took", accounted)
	}
	if len(unread) > 0 {
		l.ctx.Logger.Info("file source: the input matches files the checkpoint did not read: reading them from the start",
			"input", l.cfg.Pattern, "checkpoint", rs.Checkpoint, "files", len(unread), "names", nameFiles(slices.Sorted(maps.Keys(unread))))
	}
	if len(rest) > 0 {
		l.ctx.Logger.Info("file source: files that differed between the processes' listings of the input at the job's start (empty, or shorter, in one): reading the splits no subtask took",
			"input", l.cfg.Pattern, "checkpoint", rs.Checkpoint, "files", len(rest), "names", nameFiles(slices.Sorted(maps.Keys(rest))))
	}
	return nil
}

// made is how the job split a file it took: the file's size then, and
// the split size; zero when not known (the job took the file under an
// earlier version of Weir).
type made struct{ size, split int64 }

// The "sizes" union state holds an item per known file whose made is
// known: its id, a NUL, and its size and split size as varints. ("files"
// holds the ids alone, as earlier versions of Weir read them.)
func madeItem(id string, m made) []byte {
	return binary.AppendVarint(binary.AppendVarint(append([]byte(id), 0), m.size), m.split)
}

// restoreMade reads the "sizes" state of rs, by file id.
func restoreMade(rs *operator.Restore) (map[string]made, error) {
	items, err := state.RestoreList(rs.Handles, rs.Read, state.Union, "sizes", 0, 1)
	if err != nil {
		return nil, err
	}
	out := make(map[string]made, len(items))
	for _, it := range items {
		id, rest, ok := bytes.Cut(it, []byte{0})
		size, n1 := binary.Varint(rest)
		split, n2 := binary.Varint(rest[max(n1, 0):])
		if !ok || n1 <= 0 || n2 <= 0 || split <= 0 {
			return nil, fmt.Errorf("file sizes: %w", codec.ErrShort)
		}
		out[string(id)] = made{size: size, split: split}
	}
	return out, nil
}

// nameFiles lists files for a message, the first maxNamedFiles of them.
func nameFiles(files []string) string {
	if len(files) <= maxNamedFiles {
		return strings.Join(files, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(files[:maxNamedFiles], ", "), len(files)-maxNamedFiles)
}

func (l *lineReader) Read(out weir.Collector[string]) (operator.PollResult, error) {
	for n := 0; n < l.cfg.BatchLines; {
		if len(l.mine) == 0 {
			return operator.PollResult{Exhausted: true}, l.closeFile()
		}
		s := &l.mine[0]
		if s.Pos >= s.End && s.started {
			weir.FinishSplit(out, s.id())
			l.mine = l.mine[1:]
			if err := l.closeFile(); err != nil {
				return operator.PollResult{}, err
			}
			continue
		}
		if l.reader != s {
			// For event time, each split has its own watermark from when
			// it is read (as in Flink, splits not read yet do not hold
			// the watermark back).
			weir.EnterSplit(out, s.id())
		}
		if err := l.openSplit(s); err != nil {
			return operator.PollResult{}, err
		}
		if !s.started {
			// A split after the first of a file starts at the line that
			// begins after its first byte: the previous split reads the
			// line that crosses the boundary.
			if s.Start > 0 {
				skipped, err := l.readLine(s)
				if err != nil && !errors.Is(err, io.EOF) {
					return operator.PollResult{}, err
				}
				if err != nil && s.Pos+int64(len(skipped)) < s.End {
					return operator.PollResult{}, l.shrank(s)
				}
				s.Pos += int64(len(skipped))
			}
			s.started = true
			continue
		}
		line, err := l.readLine(s)
		if err != nil && !errors.Is(err, io.EOF) {
			// NB: what was read before the error is a line cut short, no
			// line of the input: the restore reads it again.
			return operator.PollResult{}, err
		}
		if errors.Is(err, io.EOF) && s.Pos+int64(len(line)) < s.End {
			// NB: the section read ends at the size the file had when the
			// split was opened, at least End: the file shrank since, and
			// line may be cut short.
			return operator.PollResult{}, l.shrank(s)
		}
		if len(line) > 0 {
			s.Pos += int64(len(line))
			out.Collect(l.text(bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))))
			n++
		}
		if err != nil { // io.EOF
			s.Pos = max(s.Pos, s.End)
		}
	}
	return operator.PollResult{}, nil
}

// text is a line's string.
func (l *lineReader) text(line []byte) string {
	if l.cfg.SharedBlocks {
		return l.blocks.Copy(line)
	}
	return string(line)
}

// readLine reads through the next newline; for a split that does not start
// the file, the first call is made one byte before Start. The line aliases
// the reader's buffer unless it is longer than the buffer: it is valid until
// the next read. A line longer than cfg.MaxLineBytes is a permanent error.
func (l *lineReader) readLine(s *split) ([]byte, error) {
	frag, err := l.r.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return l.checkLine(s, frag, err)
	}
	line := append([]byte(nil), frag...)
	for {
		if len(line) > l.cfg.MaxLineBytes+1 { // +1: a \r may end it
			return l.checkLine(s, line, nil)
		}
		frag, err := l.r.ReadSlice('\n')
		line = append(line, frag...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return l.checkLine(s, line, err)
		}
	}
}

// checkLine returns line, read from s, and err with the place in the input;
// or, when line is over the limit, no line and a permanent ErrLineTooLong.
func (l *lineReader) checkLine(s *split, line []byte, err error) ([]byte, error) {
	if len(bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))) > l.cfg.MaxLineBytes {
		where := fmt.Sprintf("the line at byte %d", s.Pos)
		if !s.started && s.Start > 0 {
			// NB: the skip of a split's partial first line starts
			// anywhere in the line; the split before reads it whole, and
			// fails with its start.
			where = fmt.Sprintf("the line that crosses byte %d", s.Start)
		}
		return nil, operator.Permanent(fmt.Errorf("input %s: %s: %w: it is longer than %d bytes; raise the limit (--max-line-bytes, LinesConfig.MaxLineBytes) or split the line",
			s.Path, where, ErrLineTooLong, l.cfg.MaxLineBytes))
	}
	if err != nil && !errors.Is(err, io.EOF) {
		err = fmt.Errorf("input %s at byte %d: %w", s.Path, s.Pos, err)
	}
	return line, err
}

func (l *lineReader) openSplit(s *split) error {
	if l.reader == s && l.r != nil {
		return nil
	}
	if err := l.closeFile(); err != nil {
		return err
	}
	f, err := l.cfg.FS.Open(l.pathOf(s))
	if err != nil {
		return fmt.Errorf("input %s: %w", s.Path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("input %s: %w", s.Path, err)
	}
	if st.Size() < s.End {
		f.Close()
		return shrankError(s, st.Size())
	}
	pos := s.Pos
	if !s.started && s.Start > 0 {
		pos = s.Start - 1 // the skip reads through the newline at or after Start-1
		s.Pos = pos
	}
	// The file is read up to the size it had when the job took it, even
	// where its last line has no newline and the file grew since: the
	// bytes appended after it would be read as part of that line.
	size := st.Size()
	if m := l.known[l.fileOf(*s)].size; m >= s.End && m < size {
		size = m
	}
	l.f, l.reader = f, s
	l.r = bufio.NewReaderSize(io.NewSectionReader(f, pos, size-pos), 64<<10)
	return nil
}

// shrank is the error of split s, open, whose file ended before its end.
func (l *lineReader) shrank(s *split) error {
	size := int64(-1)
	if st, err := l.f.Stat(); err == nil {
		size = st.Size()
	}
	return shrankError(s, size)
}

// shrankError is the error of split s whose file has size bytes now, -1 if
// unknown.
func shrankError(s *split, size int64) error {
	now := fmt.Sprintf("%d bytes", size)
	if size < 0 {
		now = "shorter"
	}
	return operator.Permanent(fmt.Errorf("input %s %w: %s, taken with at least %d; it was truncated or replaced, and the lines from byte %d on would be lost or be others; put the file back as it was, or start over (--fresh)",
		s.Path, ErrInputShrank, now, s.End, s.Pos))
}

func (l *lineReader) closeFile() error {
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f, l.r, l.reader = nil, nil, nil
	return err
}

func (l *lineReader) Snapshot(checkpoint.ID) (operator.Async, error) {
	items := make([][]byte, len(l.mine))
	for i, s := range l.mine {
		items[i] = s.encode()
	}
	asyncs := []operator.Async{l.ctx.SnapshotList(state.Split, "splits", items)}
	if l.took != nil {
		took := make([][]byte, 0, len(l.took)+1)
		took = append(took, tookItem(freshMark, taken{size: l.total}))
		for _, f := range slices.Sorted(maps.Keys(l.took)) {
			took = append(took, tookItem(f, l.took[f]))
		}
		asyncs = append(asyncs, l.ctx.SnapshotList(state.Union, "took", took))
	}
	switch {
	case l.ctx.Subtask != 0 && len(asyncs) == 1:
		return asyncs[0], nil
	case l.ctx.Subtask == 0:
		// Subtask 0 records the files and the input for every subtask
		// (union state: each gets them all on restore, at any
		// parallelism).
		known := make([][]byte, 0, len(l.known))
		var sizes [][]byte
		for _, f := range slices.Sorted(maps.Keys(l.known)) {
			known = append(known, []byte(f))
			if m := l.known[f]; m.split > 0 {
				sizes = append(sizes, madeItem(f, m))
			}
		}
		asyncs = append(asyncs, l.ctx.SnapshotList(state.Union, "files", known), l.ctx.SnapshotList(state.Union, "sizes", sizes),
			l.ctx.SnapshotList(state.Union, "input", [][]byte{[]byte(l.cfg.Pattern)}))
	}
	return func(w operator.Writer) ([]checkpoint.Handle, error) {
		var hs []checkpoint.Handle
		for _, async := range asyncs {
			more, err := async(w)
			if err != nil {
				return nil, err
			}
			hs = append(hs, more...)
		}
		return hs, nil
	}, nil
}

func (l *lineReader) Close() error { return l.closeFile() }

// Progress reports the bytes this subtask has left to read, and the bytes of
// the whole input.
func (l *lineReader) Progress() (remaining, total int64) {
	for _, s := range l.mine {
		remaining += s.left()
	}
	return remaining, l.total
}
