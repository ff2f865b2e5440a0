package wordcount

import (
	"fmt"
	"io"
	"iter"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
)

// Expected counts the words of the given files directly: the reference a
// run's output is checked against.
func Expected(fs vfs.FS, files []string) (map[string]int64, error) {
	want := map[string]int64{}
	for _, f := range files {
		data, err := readAll(fs, f)
		if err != nil {
			return nil, err
		}
		for line := range strings.SplitSeq(data, "\n") {
			Split(line, collectFunc(func(w string) { want[w]++ }))
		}
	}
	return want, nil
}

type collectFunc func(string)

func (f collectFunc) Collect(w string) { f(w) }

var _ weir.Collector[string] = collectFunc(nil)

// Report is what Verify found.
type Report struct {
	Words, Lines int
	Lost         int // (word, count) lines missing
	Duplicated   int // (word, count) lines seen more than once
	Unexpected   int // lines for words or counts the input does not have
	// Beyond counts lines whose count exceeds the word's occurrences: a
	// fault in exactly-once mode, replay in at-least-once mode.
	Beyond   int
	Examples []string
}

// OK reports whether the output is exactly-once.
func (r Report) OK() bool { return r.Lost == 0 && r.Duplicated == 0 && r.Unexpected == 0 }

func (r Report) String() string {
	s := fmt.Sprintf("%d words, %d output lines: %d lost, %d duplicated, %d unexpected", r.Words, r.Lines, r.Lost, r.Duplicated, r.Unexpected)
	if len(r.Examples) > 0 {
		s += " (for example " + strings.Join(r.Examples, "; ") + ")"
	}
	return s
}

// Verify reads the committed output in dir and checks it with Check.
func Verify(fs vfs.FS, dir string, want map[string]int64, atLeastOnce bool) (Report, error) {
	var readErr error
	rep, err := Check(want, CommittedLines(fs, dir, &readErr), atLeastOnce)
	if readErr != nil {
		return rep, readErr
	}
	return rep, err
}

// CommittedLines yields the lines of the committed output of a file sink
// in dir (the files not beginning with "."), file by file; *errp is set to
// the first error reading them.
func CommittedLines(fs vfs.FS, dir string, errp *error) iter.Seq[string] {
	return func(yield func(string) bool) {
		names, err := fs.List(dir)
		if err != nil {
			*errp = err
			return
		}
		for _, n := range names {
			if strings.HasPrefix(n, ".") {
				continue
			}
			data, err := readAll(fs, fs.PathJoin(dir, n))
			if err != nil {
				*errp = err
				return
			}
			for line := range strings.Lines(data) {
				if len(line) > maxLine {
					*errp = fmt.Errorf("output %s: a line longer than %d bytes", n, maxLine)
					return
				}
				if !yield(strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")) {
					return
				}
			}
		}
	}
}

// maxLine bounds an output line CommittedLines accepts, its end of line
// included (as bufio.Scanner's buffer of that size did, but for a last
// line without one, which may now be a byte longer).
const maxLine = 1 << 20

// Check checks output lines "word<TAB>count": every word's counts must be
// exactly 1..n, each once, where n is its count in want. With atLeastOnce,
// duplicates are allowed: only loss is counted.
func Check(want map[string]int64, lines iter.Seq[string], atLeastOnce bool) (Report, error) {
	var r Report
	// seen[w][c] is how often "w<TAB>c" was written, for 1 ≤ c ≤ want[w].
	seen := make(map[string][]uint32, len(want))
	for w, n := range want {
		seen[w] = make([]uint32, n+1)
	}
	example := func(format string, args ...any) {
		if len(r.Examples) < 3 {
			r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
		}
	}
	for line := range lines {
		r.Lines++
		word, num, ok := strings.Cut(line, "\t")
		c, err := strconv.ParseInt(num, 10, 64)
		if !ok || err != nil {
			return r, fmt.Errorf("malformed output line %q", line)
		}
		counts, known := seen[word]
		switch {
		case !known:
			r.Unexpected++
			example("%q is not in the input", word)
		case c < 1:
			r.Unexpected++
			example("%q count %d", word, c)
		case c >= int64(len(counts)):
			r.Beyond++
			if !atLeastOnce {
				r.Unexpected++
				example("%q count %d beyond its %d occurrences", word, c, len(counts)-1)
			}
		default:
			counts[c]++
		}
	}
	r.Words = len(want)
	for _, w := range slices.Sorted(maps.Keys(want)) {
		for c, k := range seen[w][1:] {
			switch {
			case k == 0:
				r.Lost++
				example("%q count %d lost", w, c+1)
			case k > 1 && !atLeastOnce:
				r.Duplicated += int(k - 1)
				example("%q count %d written %d times", w, c+1, k)
			}
		}
	}
	return r, nil
}

// CheckFinal checks final counts (an upsert table): every word of want has
// exactly its count, and there is no other word.
func CheckFinal(want map[string]int64, got map[string]int64) Report {
	var r Report
	r.Words, r.Lines = len(want), len(got)
	for w, n := range want {
		switch g, ok := got[w]; {
		case !ok:
			r.Lost++
			if len(r.Examples) < 3 {
				r.Examples = append(r.Examples, fmt.Sprintf("%q missing", w))
			}
		case g != n:
			r.Unexpected++
			if len(r.Examples) < 3 {
				r.Examples = append(r.Examples, fmt.Sprintf("%q count %d, want %d", w, g, n))
			}
		}
	}
	for w := range got {
		if _, ok := want[w]; !ok {
			r.Unexpected++
		}
	}
	return r
}

// readAll reads a file whole.
func readAll(fs vfs.FS, path string) (string, error) {
	f, err := fs.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	// NB: one copy, into a buffer of the file's size: io.ReadAll's
	// doublings, and a scanner's copy of each line, cost the kill -9
	// tests seconds of CPU each under -race.
	var b strings.Builder
	if st, err := f.Stat(); err == nil {
		b.Grow(int(st.Size()) + 1)
	}
	if _, err := io.Copy(&b, f); err != nil {
		return "", err
	}
	return b.String(), nil
}
