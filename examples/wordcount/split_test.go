package wordcount

import (
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// refSplit is the word's definition (see Split), written plainly: NFD,
// full case folding (Cherokee to upper case), the dots above an i dropped,
// NFC; then maximal runs
// that start with a letter or decimal digit and go on with letters,
// decimal digits and combining marks.
func refSplit(line string) []string {
	s := cases.Fold().String(norm.NFD.String(line))
	s = strings.Map(func(r rune) rune { // as Unicode folds Cherokee, which cases.Fold does not
		if unicode.Is(unicode.Cherokee, r) {
			return unicode.ToUpper(r)
		}
		return r
	}, s)
	s = dotsAfterI.ReplaceAllString(s, "i")
	s = norm.NFC.String(s)
	var words []string
	var word []rune
	for _, r := range s {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r),
			len(word) > 0 && unicode.In(r, unicode.Mn, unicode.Mc, unicode.Me):
			word = append(word, r)
		case len(word) > 0:
			words = append(words, string(word))
			word = nil
		}
	}
	if len(word) > 0 {
		words = append(words, string(word))
	}
	return words
}

var dotsAfterI = regexp.MustCompile(`i\x{307}+`)

type collect []string

func (c *collect) Collect(w string) { *c = append(*c, w) }

func split(line string) []string {
	var got collect
	Split(line, &got)
	return got
}

// TestSplit pins down the definition where a plain lower-casing gets it
// wrong or where there was a choice to make (the README says which).
func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       []string
	}{
		{"ascii", "Hello, World! x1_y2-z3", []string{"hello", "world", "x1", "y2", "z3"}},
		// Σ, σ and the final ς are one letter: folding maps all to σ.
		{"greek final sigma", "ΟΔΟΣ οδος Οδός", []string{"οδοσ", "οδοσ", "οδόσ"}},
		// Vowel signs and the virama are marks (Mc, Mn), not separators.
		{"devanagari", "हिन्दी में", []string{"हिन्दी", "में"}},
		{"tamil", "தமிழ்", []string{"தமிழ்"}},
		// Canonically equivalent spellings are one word, written composed.
		{"nfd", "Cafe\u0301 café CAFÉ", []string{"café", "café", "café"}},
		{"mark without a precomposed form", "x\u0301y q\u0323\u0307", []string{"x\u0301y", "q\u0323\u0307"}},
		// A mark after a separator belongs to the separator.
		{"lone mark", "\u0301a -\u0301b \u0301", []string{"a", "b"}},
		// Full folding: ß and ẞ are ss, as an upper-case German SS is.
		{"sharp s", "Straße STRASSE straẞe", []string{"strasse", "strasse", "strasse"}},
		// Cherokee folds to upper case.
		{"cherokee", "ᏣᎳᎩ ꮳꮃꭹ Ꮳꮃꭹ", []string{"ᏣᎳᎩ", "ᏣᎳᎩ", "ᏣᎳᎩ"}},
		{"ligature", "ﬁx", []string{"fix"}},
		// İ is i (as Turkish lower-cases it) and so is I (as English
		// does); ı stays ı. Precomposed or not, İ is the same.
		{"turkish i", "İstanbul I\u0307stanbul istanbul ISTANBUL ırmak", []string{"istanbul", "istanbul", "istanbul", "istanbul", "ırmak"}},
		{"i with dots above", "i\u0307\u0307 i\u0307\u0301", []string{"i", "í"}},
		// Compatibility variants stay apart: that would be NFKC.
		{"full-width", "ＡＢ１２ ab12 ①", []string{"ａｂ１２", "ab12"}},
		{"arabic-indic digits", "٣٤ 34", []string{"٣٤", "34"}},
		{"cjk", "日本語のテキスト、です", []string{"日本語のテキスト", "です"}},
		{"invalid utf-8", "a\xffb \xc3", []string{"a", "b"}},
		{"long ascii", strings.Repeat("Ab ", 200), slices.Repeat([]string{"ab"}, 200)},
		{"long", strings.Repeat("Öl ", 30000), slices.Repeat([]string{"öl"}, 30000)},
		{"empty", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := split(tc.line); !slices.Equal(got, tc.want) {
				t.Errorf("Split(%q) = %q, want %q", tc.line, got, tc.want)
			}
		})
	}
}

// TestSplitConcurrent splits non-ASCII lines from several goroutines: the
// folding Split shares must be safe for that (go test -race).
func TestSplitConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 200 {
				if got := split("ΟΔΟΣ Straße İstanbul"); !slices.Equal(got, []string{"οδοσ", "strasse", "istanbul"}) {
					t.Errorf("Split = %q", got)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestSplitEveryCasedLetter compares Split with refSplit on every mark and
// every character that case mapping, case folding or decomposition
// changes, alone and in upper and lower case between a letter and a mark,
// and checks that its word is its own canonical form: folding tables are
// per character, and the fuzzer finds few of them.
func TestSplitEveryCasedLetter(t *testing.T) {
	for r := range unicode.MaxRune + 1 {
		s := string(r)
		if !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.So) || // So: Ⓐ folds to ⓐ
			!unicode.In(r, unicode.M) && unicode.ToUpper(r) == r && unicode.ToLower(r) == r &&
				folder.String(s) == s && norm.NFD.String(s) == s {
			continue
		}
		for _, line := range []string{s, "A" + string(unicode.ToUpper(r)) + "\u0301", "x" + string(unicode.ToLower(r)) + "\u0323 "} {
			got := split(line)
			if want := refSplit(line); !slices.Equal(got, want) {
				t.Fatalf("Split(%+q) = %+q, want %+q", line, got, want)
			}
			for _, w := range got {
				if again := split(w); !slices.Equal(again, []string{w}) {
					t.Fatalf("Split(%+q) has the word %+q, whose own words are %+q", line, w, again)
				}
			}
		}
	}
}

func FuzzSplit(f *testing.F) {
	for _, s := range []string{"", "Hello, World!", "ÄÖÜ straße 42x", "a\xffb", "日本語のテキスト", "tab\tsep\r\n", "İstanbul",
		"x1_y2-z3", "\xf3\u0374", "ΟΔΟΣ οδος", "हिन्दी", "Cafe\u0301", "ᾼ\u0345ͅ", "I\u0323\u0307", "ＡＢ１２", "\u0301x", "ꮂ Ꮂ", "i\u0307\u0323\u0301 ᾀ\u0301\u0345 ΐ\u0345"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		got := split(line)
		if want := refSplit(line); !slices.Equal(got, want) {
			t.Fatalf("Split(%q) = %q, want %q", line, got, want)
		}
		// Canonically equivalent lines have the same words.
		for _, other := range []string{norm.NFC.String(line), norm.NFD.String(line)} {
			if words := split(other); !slices.Equal(words, got) {
				t.Fatalf("Split(%q) = %q, but Split(%q), its canonical equivalent, = %q", line, got, other, words)
			}
		}
		// A word is its own canonical form.
		for _, w := range got {
			if again := split(w); !slices.Equal(again, []string{w}) {
				t.Fatalf("Split(%q) has the word %q, whose own words are %q", line, w, again)
			}
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

// BenchmarkSplitNonASCII splits lines that take the folding path: eight
// words of German, Greek and Hindi.
func BenchmarkSplitNonASCII(b *testing.B) {
	line := "Straße Über οδός ΟΔΟΣ हिन्दी में café Ärger"
	var n countWords
	for b.Loop() {
		Split(line, &n)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/word")
}

type countWords int

func (c *countWords) Collect(string) { *c++ }

func TestFormat(t *testing.T) {
	ns := []int64{123456789, 1e18 - 1, 1e18, 1e18 + 1, math.MaxInt64, -1, -10, math.MinInt64}
	for n := range int64(100_000) {
		ns = append(ns, n)
	}
	for p := int64(10); p > 0 && p <= math.MaxInt64/10; p *= 10 {
		ns = append(ns, p-1, p, p+1, 10*p-1)
	}
	for _, n := range ns {
		for _, dst := range [][]byte{nil, []byte("x\n"), make([]byte, 0, 64)} {
			want := string(dst) + "wörd\t" + strconv.FormatInt(n, 10) + "\n"
			if got := string(Format(dst, Count{Word: "wörd", Count: n})); got != want {
				t.Errorf("Format(%q, %d) = %q; want %q", dst, n, got, want)
			}
		}
	}
}

func BenchmarkFormat(b *testing.B) {
	buf := make([]byte, 0, 64<<10)
	for i := 0; b.Loop(); i++ {
		if buf = Format(buf, Count{Word: "word1234", Count: int64(i % 8192)}); len(buf) > 60<<10 {
			buf = buf[:0]
		}
	}
}

// TestClassAndLowerEightAtATime checks the SWAR helpers against the byte
// tables: every byte value at every position of lines of 1 to 17 bytes
// (so in a whole eight-byte word and in the tail), among filler bytes at
// the edges of A-Z.
func TestClassAndLowerEightAtATime(t *testing.T) {
	for _, filler := range []byte{'a', '@', '[', 'Z'} {
		for n := 1; n <= 17; n++ {
			for pos := range n {
				for b := range 256 {
					line := []byte(strings.Repeat(string(filler), n))
					line[pos] = byte(b)
					var want byte
					for _, c := range line {
						want |= byteClass[c]
					}
					if got := classOf(string(line)); got != want {
						t.Fatalf("classOf(%q) = %d; want %d", line, got, want)
					}
					if want&nonASCII != 0 {
						continue // lowerASCII takes ASCII only
					}
					got := make([]byte, n)
					lowerASCII(got, string(line))
					if lower := strings.ToLower(string(line)); string(got) != lower {
						t.Fatalf("lowerASCII(%q) = %q; want %q", line, got, lower)
					}
				}
			}
		}
	}
}

// TestASCIIWordsEightAtATime checks emitASCIIWords against a byte at a
// time: lines of 0 to 25 bytes (words across and at the ends of the
// eight-byte blocks) of the bytes at the edges of a-z and 0-9, and every
// ASCII byte at every position of a 17-byte line.
func TestASCIIWordsEightAtATime(t *testing.T) {
	byteAtATime := func(line string) (words []string) {
		start := -1
		for i := 0; i <= len(line); i++ {
			word := i < len(line) && asciiWord[line[i]]
			switch {
			case word && start < 0:
				start = i
			case !word && start >= 0:
				words = append(words, line[start:i])
				start = -1
			}
		}
		return words
	}
	check := func(line string) {
		t.Helper()
		var got collect
		emitASCIIWords(line, &got)
		if want := byteAtATime(line); !slices.Equal(got, want) {
			t.Fatalf("emitASCIIWords(%q) = %q; want %q", line, got, want)
		}
	}
	const edges = "az09 /:`{\x00\x7f"
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n <= 25; n++ {
		for range 2000 {
			line := make([]byte, n)
			for i := range line {
				line[i] = edges[rng.IntN(len(edges))]
			}
			check(string(line))
		}
	}
	for pos := range 17 {
		for b := range utf8.RuneSelf {
			if b >= 'A' && b <= 'Z' {
				continue // the line is lower-cased
			}
			line := []byte("ab cd3 ef9 gh ij ")
			line[pos] = byte(b)
			check(string(line))
		}
	}
}
