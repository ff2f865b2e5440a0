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
