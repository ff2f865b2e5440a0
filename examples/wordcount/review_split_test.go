package wordcount

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// reviewLine is a random line: mostly ASCII (upper and lower case letters,
// digits, separators, the bytes around A-Z), with now and then a byte of
// 0x80 or more (alone: invalid UTF-8), or a letter of another script, at
// any position, of any length from 0 to well past Split's 512-byte
// fast path; some lines are nothing but separators.
func reviewLine(rng *rand.Rand) string {
	n := rng.IntN(1100)
	if rng.IntN(4) == 0 {
		n = rng.IntN(24)
	}
	seps := rng.IntN(10) == 0
	const ascii = "abcxyzABCXYZ0189@[`{ \t,.-_'\x00\x7f"
	var b strings.Builder
	for b.Len() < n {
		switch r := rng.IntN(200); {
		case seps:
			b.WriteByte(" \t,.-_@[`{\x7f"[rng.IntN(11)])
		case r == 0:
			b.WriteByte(byte(0x80 + rng.IntN(0x80)))
		case r == 1:
			b.WriteString([]string{"É", "ß", "İ", "Σ", "日", "Ａ", "\u0301"}[rng.IntN(7)])
		default:
			b.WriteByte(ascii[rng.IntN(len(ascii))])
		}
	}
	return b.String()
}

// TestReviewSplitAgainstReferenceOnRandomLines: Split (its eight-at-a-time
// classification and lower-casing included) gives the reference
// definition's words for random lines, and the words it gave stay as they
// were while many more lines are split (they share chunks).
func TestReviewSplitAgainstReferenceOnRandomLines(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 4))
	type result struct {
		line  string
		words []string
	}
	var kept []result
	for i := range 4000 {
		line := reviewLine(rng)
		got := split(line)
		if want := refSplit(line); !slices.Equal(got, want) {
			t.Fatalf("line %d: Split(%q) = %q, want %q", i, line, got, want)
		}
		if i%10 == 0 {
			kept = append(kept, result{line, got})
		}
	}
	for _, r := range kept {
		if want := refSplit(r.line); !slices.Equal(r.words, want) {
			t.Fatalf("the words of %q changed after more lines were split: %q, want %q", r.line, r.words, want)
		}
	}
}

// TestReviewClassOfRandomWords checks classOf and lowerASCII against the
// byte tables on random bytes, several odd bytes in one eight-byte word
// (the exhaustive test varies one byte among filler).
func TestReviewClassOfRandomWords(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 5))
	for range 200000 {
		line := make([]byte, rng.IntN(40))
		for i := range line {
			switch rng.IntN(4) {
			case 0:
				line[i] = byte(rng.IntN(256))
			case 1:
				line[i] = byte('@' + rng.IntN(28)) // '@', A-Z, '['
			default:
				line[i] = byte(rng.IntN(128))
			}
		}
		var want byte
		for _, c := range line {
			want |= byteClass[c]
		}
		if got := classOf(string(line)); got != want {
			t.Fatalf("classOf(%q) = %d; want %d", line, got, want)
		}
		if want&nonASCII != 0 {
			continue
		}
		got := make([]byte, len(line))
		lowerASCII(got, string(line))
		if lower := strings.ToLower(string(line)); string(got) != lower {
			t.Fatalf("lowerASCII(%q) = %q; want %q", line, got, lower)
		}
	}
}

// TestReviewSplitConcurrently: subtasks split concurrently through the
// shared pools (-race); each goroutine's words are right.
func TestReviewSplitConcurrently(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for g := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 6))
			for range 500 {
				line := reviewLine(rng)
				if got, want := split(line), refSplit(line); !slices.Equal(got, want) {
					errs <- line
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for line := range errs {
		t.Errorf("concurrent Split(%q) differs from the reference", line)
	}
}

// TestReviewFormatRandomCounts: Format agrees with strconv for random
// counts of every magnitude, negative ones and the extremes included.
func TestReviewFormatRandomCounts(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 7))
	for i := range 100000 {
		n := rng.Int64() >> rng.IntN(64)
		if i%2 == 1 {
			n = -n
		}
		switch i {
		case 0:
			n = math.MinInt64
		case 1:
			n = math.MaxInt64
		}
		l := rng.IntN(3)
		dst := make([]byte, l, l+rng.IntN(30))
		want := string(dst) + "w\t" + strconv.FormatInt(n, 10) + "\n"
		if got := string(Format(dst, Count{Word: "w", Count: n})); got != want {
			t.Fatalf("Format(%d) = %q, want %q", n, got, want)
		}
	}
}
