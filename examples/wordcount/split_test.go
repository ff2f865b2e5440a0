package wordcount

import (
	"slices"
	"strings"
	"testing"
	"unicode"
)

// refSplit is the word's definition, written plainly: lower-case, then
// maximal runs of Unicode letters and digits.
func refSplit(line string) []string {
	return strings.FieldsFunc(strings.ToLower(line), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

type collect []string

func (c *collect) Collect(w string) { *c = append(*c, w) }

func FuzzSplit(f *testing.F) {
	for _, s := range []string{"", "Hello, World!", "ÄÖÜ straße 42x", "a\xffb", "日本語のテキスト", "tab\tsep\r\n", "İstanbul", "x1_y2-z3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		var got collect
		Split(line, &got)
		if want := refSplit(line); !slices.Equal(got, want) {
			t.Fatalf("Split(%q) = %q, want %q", line, got, want)
		}
	})
}

// BenchmarkSplit splits lines of the benchmark corpus's shape: eight
// capitalised words.
//
//	go test ./examples/wordcount -run '^$' -bench Split
func BenchmarkSplit(b *testing.B) {
	line := "Word1234 Word17 Word905 Word1999 Word3 Word44 Word1500 Word777"
	var n countWords
	for b.Loop() {
		Split(line, &n)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/word")
}

type countWords int

func (c *countWords) Collect(string) { *c++ }
