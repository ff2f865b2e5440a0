package wordcount

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
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
		for line := range strings.SplitSeq(string(data), "\n") {
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
	Examples     []string
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

// Verify reads the committed output in dir (files not beginning with ".")
// and checks that every word's counts are exactly 1..n, each once, where n
// is its count in want. With atLeastOnce, duplicates are allowed: only loss
// is counted.
func Verify(fs vfs.FS, dir string, want map[string]int64, atLeastOnce bool) (Report, error) {
	var r Report
	names, err := fs.List(dir)
	if err != nil {
		return r, err
	}
	seen := map[string]map[int64]int{}
	for _, n := range names {
		if strings.HasPrefix(n, ".") {
			continue
		}
		data, err := readAll(fs, fs.PathJoin(dir, n))
		if err != nil {
			return r, err
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			r.Lines++
			word, num, ok := strings.Cut(sc.Text(), "\t")
			c, err := strconv.ParseInt(num, 10, 64)
			if !ok || err != nil {
				return r, fmt.Errorf("output %s: malformed line %q", n, sc.Text())
			}
			if seen[word] == nil {
				seen[word] = map[int64]int{}
			}
			seen[word][c]++
		}
		if err := sc.Err(); err != nil {
			return r, fmt.Errorf("output %s: %w", n, err)
		}
	}
	example := func(format string, args ...any) {
		if len(r.Examples) < 3 {
			r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
		}
	}
	r.Words = len(want)
	for _, w := range slices.Sorted(maps.Keys(want)) {
		n := want[w]
		for c := int64(1); c <= n; c++ {
			switch k := seen[w][c]; {
			case k == 0:
				r.Lost++
				example("%q count %d lost", w, c)
			case k > 1 && !atLeastOnce:
				r.Duplicated += k - 1
				example("%q count %d written %d times", w, c, k)
			}
		}
		for c := range seen[w] {
			if (c < 1 || c > n) && !atLeastOnce {
				r.Unexpected++
				example("%q count %d beyond its %d occurrences", w, c, n)
			}
		}
	}
	for w := range seen {
		if _, ok := want[w]; !ok {
			r.Unexpected++
			example("%q is not in the input", w)
		}
	}
	return r, nil
}

func readAll(fs vfs.FS, path string) ([]byte, error) {
	f, err := fs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}
