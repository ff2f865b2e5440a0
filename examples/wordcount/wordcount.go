// Package wordcount is Weir's word count: read lines, split them into
// words in one canonical form (case-folded, NFC: see Split), keep a count
// per word in keyed state, and write each updated count, exactly-once.
//
// Input is files (a path or glob) or a Kafka topic (kafka://host:port/topic,
// one line per record value). Output is a directory of files
// ("word<TAB>count" lines), a Kafka topic (key: the word; value: the count
// in decimal), a PostgreSQL table (postgres://…?table=counts&mode=…:
// exactly-once appends a row per occurrence, upsert keeps one row per word
// with its latest count), or standard output ("-", written at the barrier).
package wordcount

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/bits"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/text/cases"
	"golang.org/x/text/transform"
	"golang.org/x/text/unicode/norm"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/internal/arena"
	"github.com/weirstream/weir/storage"
)

// Options configure the job; Restore, Fresh and AllowNonRestoredState are
// as in weir.Config.
type Options struct {
	Input, Output         string
	Checkpoint            weir.CheckpointConfig
	Parallelism           int
	Restore               string
	Fresh                 bool
	AllowNonRestoredState bool
	Restart               weir.RestartStrategy
	StateBackend          weir.StateBackend
	// LocalRecovery and LocalRecoveryDir are weir.Config's.
	LocalRecovery    bool
	LocalRecoveryDir string
	FS               vfs.FS
	Logger           *slog.Logger
	OnEvent          func(weir.JobEvent)
	// MaxLineBytes is the longest line of a file input
	// (file.LinesConfig.MaxLineBytes); 0 means file.DefaultMaxLineBytes.
	MaxLineBytes int
	// BeforeCount, if set, is called with every word before it is counted,
	// in the counting task; tests use it to fail the operator on purpose.
	BeforeCount func(word string)
	// Cluster makes the process a cluster's coordinator or worker.
	Cluster weir.ClusterConfig
	// BufferDebloat is weir.Config.BufferDebloat.
	BufferDebloat time.Duration
	// Web is where to serve the web UI, metrics and the API, WebToken what
	// its mutations need, OnWeb hears the address it serves on
	// (weir.Config.Web, WebToken, OnWeb).
	Web, WebToken string
	OnWeb         func(addr string)
	WebLinger     time.Duration
}

// Paced returns a BeforeCount that sleeps a millisecond every n words
// counted by the job's subtasks together: tests use it to make a run last
// (n = 200: about 5 ms per thousand words) whatever the machine's speed.
func Paced(n int) func(word string) {
	var count atomic.Int64
	return func(string) {
		if count.Add(1)%int64(n) == 0 {
			time.Sleep(time.Millisecond)
		}
	}
}

// Count is one output record: a word's count after one more occurrence.
type Count struct {
	Word  string
	Count int64
}

// Format appends "word<TAB>count\n".
func Format(dst []byte, c Count) []byte {
	dst = append(dst, c.Word...)
	dst = append(dst, '\t')
	dst = appendCount(dst, c.Count)
	return append(dst, '\n')
}

// appendCount appends n in decimal, as strconv.AppendInt does, but writes
// the digits of a count (n ≥ 0) straight into dst, two at a time from a
// table: strconv formats into an array of its own and copies it, which was
// a third of Format's time.
func appendCount(dst []byte, n int64) []byte {
	if n < 0 {
		return strconv.AppendInt(dst, n, 10)
	}
	u := uint64(n)
	// With L the bit length of u, t = floor(L·log10 2) (1233/4096 is close
	// enough for L ≤ 64) is the digits of 2^L-1, the greatest number of
	// that length, less one: u has t digits, or t+1 if u ≥ 10^t. u|1 makes
	// 0 one digit long and changes nothing else (10^t is even for t ≥ 1,
	// and every u ≥ 1 = 10^0).
	t := uint(bits.Len64(u|1)) * 1233 >> 12
	digits := int(t)
	if u|1 >= powersOf10[t] {
		digits++
	}
	dst = slices.Grow(dst, digits)
	out := dst[len(dst) : len(dst)+digits]
	i := digits
	for u >= 100 {
		q := u / 100
		r := 2 * (u - q*100)
		i -= 2
		out[i], out[i+1] = digitPairs[r], digitPairs[r+1]
		u = q
	}
	if u >= 10 {
		out[0], out[1] = digitPairs[2*u], digitPairs[2*u+1]
	} else {
		out[0] = byte('0' + u)
	}
	return dst[:len(dst)+digits]
}

// powersOf10[d] is 10^d, the least number of d+1 digits.
var powersOf10 = [...]uint64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18}

// digitPairs holds 00 to 99, two bytes each.
const digitPairs = "00010203040506070809" + "10111213141516171819" + "20212223242526272829" + "30313233343536373839" + "40414243444546474849" +
	"50515253545556575859" + "60616263646566676869" + "70717273747576777879" + "80818283848586878889" + "90919293949596979899"

// sinkName is the name (and UID) of the job's sink.
const sinkName = "output"

// Build builds the job; it fails at once on unreadable input or output.
func Build(o Options) (*weir.Environment, error) {
	if o.FS == nil {
		o.FS = vfs.Default
	}
	cc := o.Checkpoint
	if cc.FS == nil {
		cc.FS = o.FS
	}
	env := weir.New(weir.Config{
		Job: "wordcount", Parallelism: o.Parallelism, Checkpoint: cc, Restore: o.Restore, Fresh: o.Fresh,
		AllowNonRestoredState: o.AllowNonRestoredState, Restart: o.Restart, Logger: o.Logger, OnEvent: o.OnEvent,
		StateBackend: o.StateBackend, LocalRecovery: o.LocalRecovery, LocalRecoveryDir: o.LocalRecoveryDir, Cluster: o.Cluster, BufferDebloat: o.BufferDebloat, Web: o.Web, WebToken: o.WebToken, OnWeb: o.OnWeb, WebLinger: o.WebLinger,
	})
	lines, err := input(o)
	if err != nil {
		return nil, err
	}
	if _, inURL := file.URLScheme(o.Input); !inURL {
		if _, outURL := file.URLScheme(o.Output); !outURL && o.Output != "-" {
			if f, ok := file.MatchesSinkFiles(o.Input, o.Output, sinkName); ok {
				return nil, fmt.Errorf("input %s matches the output's files (%s): a restore would read the job's output as input; give an input that does not match files in %s, or write the output elsewhere", o.Input, f, o.Output)
			}
		}
		ck := strings.TrimPrefix(cc.Dir, "file://")
		if _, ckURL := file.URLScheme(ck); !ckURL && ck != "" && vfs.Root(o.FS) == vfs.Default {
			files, dirs := storage.JobDirEntries()
			if jobDir := filepath.Join(ck, "wordcount"); file.MatchesUnder(o.Input, jobDir, files, append(dirs, markerDir)) {
				return nil, fmt.Errorf("input %s matches files in the job's checkpoint directory %s: a restore would read the job's lock file and checkpoints as input; give an input that does not match files in %s, or keep checkpoints elsewhere (--checkpoint-dir)", o.Input, jobDir, jobDir)
			}
		}
	}
	sink, err := output(o, cc)
	if err != nil {
		return nil, err
	}
	words := weir.FlatMap(weir.Source(env, "lines", lines), "split", Split)
	counts := weir.Process(weir.KeyBy(words, func(w string) string { return w }), "count",
		func() weir.KeyedProcessFunction[string, string, Count] { return &counter{before: o.BeforeCount} })
	weir.Sink(counts, sinkName, sink)
	return env, nil
}

// Split emits the words of line, each in its one canonical form, which is
// the form a word's count is kept and written under. The definition (the
// README says it for users; split_test.go's refSplit writes it plainly):
//
//  1. the line is decomposed (NFD), case-folded with Unicode's full case
//     folding (cases.Fold: "Straße", "STRASSE" → strasse; "ΟΔΟΣ", "οδος" →
//     οδοσ, as folding maps both Σ and the final ς to σ), every U+0307
//     COMBINING DOT ABOVE directly after an i is dropped (so that İ, whose
//     folding is i + U+0307, folds to i: İstanbul is istanbul, as Turkish
//     lower-cases it; I is i too, as English lower-cases it), and composed
//     again (NFC);
//  2. a word is then a maximal run that starts with a letter (Unicode L) or
//     decimal digit (Nd) and goes on with letters, digits and combining
//     marks (Mn, Mc, Me: हिन्दी is one word); everything else separates
//     words, a mark after a separator included.
//
// Canonically equivalent lines (NFC "café", NFD "cafe\u0301") have the
// same words, and a word's own words are itself. Compatibility variants
// are kept apart: full-width "ＡＢ１２" is the word ａｂ１２, not ab12.
//
// Split allocates nothing per line of up to 512 bytes: its words share the
// memory of the line or of its folded form, which is cut from a chunk
// shared with other lines. An ASCII line takes a fast path (for ASCII, all
// of the above is lower-casing A-Z); any other line is folded through
// pooled buffers, several times slower. Split may be called concurrently.
// NB: a word kept alive keeps its chunk (4 KiB) alive; heap state copies
// the strings of the keys and values it keeps, and a job keeping words
// elsewhere should keep strings.Clone of them.
func Split(line string, out weir.Collector[string]) {
	switch class := classOf(line); {
	case class == 0: // ASCII without upper case
	case class == upper && len(line) <= 512:
		var buf [512]byte
		lowerASCII(buf[:len(line)], line)
		a := lowered.Get().(*arena.Strings)
		line = a.Copy(buf[:len(line)])
		lowered.Put(a)
	case class == upper:
		line = strings.ToLower(line)
	default:
		emitWords(fold(line), out)
		return
	}
	emitASCIIWords(line, out)
}

// lowered holds the chunks Split lower-cases lines into; a pool, as Split
// is a plain function every subtask calls.
var lowered = sync.Pool{New: func() any { return new(arena.Strings) }}

// folder is Unicode's full case folding; cases.Fold's Caser is documented
// as stateless and safe for concurrent use, so one serves every subtask.
var folder = cases.Fold()

// fold returns line in the canonical form of step 1 of Split's definition,
// cut from a chunk shared with other lines (see arena).
func fold(line string) string {
	if !utf8.ValidString(line) {
		// Bytes that are not UTF-8 separate words; as U+FFFD they also
		// leave the text after them to be normalised (norm leaves a mark
		// or singleton right after such a byte as it is: "\xf3\u0374"
		// would keep U+0374, which NFC maps to U+02B9).
		line = strings.ToValidUTF8(line, "\uFFFD")
	}
	f := foldings.Get().(*folding)
	defer f.put()
	src := append(f.src[:0], line...)
	if needsNFD(line) {
		src = norm.NFD.AppendString(src[:0], line)
	}
	f.src = src
	folded := f.folded[:cap(f.folded)]
	if len(folded) < 3*len(src)+utf8.UTFMax {
		folded = make([]byte, 3*len(src)+utf8.UTFMax) // folding makes no rune more than three times longer
	}
	for {
		n, _, err := folder.Transform(folded, src, true)
		if err == nil {
			folded = folded[:n]
			break
		}
		if err != transform.ErrShortDst {
			panic(fmt.Sprintf("wordcount: case folding %q: %v", line, err)) // at EOF, it takes any bytes
		}
		folded = make([]byte, 2*len(folded))
	}
	f.folded = folded
	upperCherokee(folded)
	out := norm.NFC.Append(f.out[:0], folded...)
	if bytes.Contains(out, []byte("i\u0307")) {
		undotted := dropDotsAfterI(f.src[:0], out)
		f.src = undotted
		out = norm.NFC.Append(out[:0], undotted...)
	}
	f.out = out
	return f.words.Copy(out)
}

// folding is fold's scratch space, and the chunk it cuts folded lines
// from; pooled, as Split is a plain function every subtask calls.
type folding struct {
	src, folded, out []byte
	words            arena.Strings
}

var foldings = sync.Pool{New: func() any { return new(folding) }}

// maxPooledBytes bounds each buffer a pooled folding keeps: a long line's
// buffers are left to the garbage collector.
const maxPooledBytes = 64 << 10

func (f *folding) put() {
	for _, b := range []*[]byte{&f.src, &f.folded, &f.out} {
		if cap(*b) > maxPooledBytes {
			*b = nil
		}
	}
	foldings.Put(f)
}

// needsNFD reports whether line may have U+0345 COMBINING GREEK
// YPOGEGRAMMENI, or a letter whose decomposition has it (all are in
// U+1F80-U+1FFF): for any other text, case folding gives the canonically
// equivalent result without decomposing first (The Unicode Standard, 3.13,
// on D145).
func needsNFD(line string) bool {
	return strings.Contains(line, "\u0345") || strings.Contains(line, "\xe1\xbe") || strings.Contains(line, "\xe1\xbf")
}

// upperCherokee upper-cases the Cherokee letters of the UTF-8 text b in
// place: a Cherokee letter is three bytes long in either case.
// NB: Unicode folds Cherokee letters to upper case (the lower case ones
// came later, and folding is stable), but cases.Fold swaps their case
// (golang/go#46101): Ꮭ and ꮭ would be two words, each folded to the other.
func upperCherokee(b []byte) {
	for i, c := range b {
		if c != 0xE1 && c != 0xEA { // the first bytes of U+1xxx and U+Axxx
			continue
		}
		if r, _ := utf8.DecodeRune(b[i:]); r >= 0x13A0 && r <= 0x13FF || r >= 0xAB70 && r <= 0xABBF {
			utf8.EncodeRune(b[i:], unicode.ToUpper(r))
		}
	}
}

// dropDotsAfterI appends to dst the text b without the U+0307 COMBINING
// DOT ABOVE right after an i.
func dropDotsAfterI(dst, b []byte) []byte {
	for i := 0; i < len(b); {
		c := b[i]
		dst = append(dst, c)
		i++
		if c == 'i' {
			for bytes.HasPrefix(b[i:], []byte("\u0307")) {
				i += len("\u0307")
			}
		}
	}
	return dst
}

// emitASCIIWords emits the words of a lower-cased ASCII line: the runs of
// a-z and 0-9. It takes the line eight bytes at a time (SWAR, as classOf):
// a word starts where a word byte follows one that is not, and ends where
// the other way round, and a block's starts and ends are found at once.
func emitASCIIWords(line string, out weir.Collector[string]) {
	start := 0
	var before uint64 // 0x80 if the byte before the block is a word byte
	// The last block is padded with zero bytes, which end a word at the
	// line's end: i runs to len(line) itself.
	for i := 0; i <= len(line); i += 8 {
		var x uint64
		if i+8 <= len(line) {
			x = load64(line[i:])
		} else {
			var tail [8]byte
			copy(tail[:], line[i:])
			x = binary.LittleEndian.Uint64(tail[:])
		}
		w := wordASCII(x)
		for e := w ^ (w<<8 | before); e != 0; e &= e - 1 {
			at := i + bits.TrailingZeros64(e)>>3
			if e&-e&w != 0 {
				start = at
			} else {
				out.Collect(line[start:at])
			}
		}
		before = w >> 56
	}
}

// wordASCII has the high bit of each byte of x that is in a-z or 0-9, x
// being eight ASCII bytes.
func wordASCII(x uint64) uint64 {
	return inASCII(x, 'a', 'z') | inASCII(x, '0', '9')
}

// inASCII has the high bit of each byte of x that is in lo-hi, x being
// eight ASCII bytes: x+(0x80-lo) sets it in a byte ≥ lo, x+(0x80-hi-1) in
// a byte > hi, and no byte carries into the next.
func inASCII(x uint64, lo, hi byte) uint64 {
	return (x + uint64(0x80-lo)*lowBits) &^ (x + uint64(0x80-hi-1)*lowBits) & highBits
}

// emitWords emits the words (step 2 of Split's definition) of a folded
// line.
func emitWords(line string, out weir.Collector[string]) {
	start := -1
	for i := 0; i < len(line); {
		var word, mark bool
		size := 1
		if b := line[i]; b < utf8.RuneSelf {
			word = asciiWord[b] // what unicode.IsLetter || unicode.IsDigit say, without decoding
		} else {
			var r rune
			r, size = utf8.DecodeRuneInString(line[i:])
			word = unicode.IsLetter(r) || unicode.IsDigit(r)
			mark = !word && unicode.In(r, unicode.Mn, unicode.Mc, unicode.Me)
		}
		switch {
		case word && start < 0:
			start = i
		case mark && start >= 0: // a combining mark belongs to the letter or digit before it
		case !word && start >= 0:
			out.Collect(line[start:i])
			start = -1
		}
		i += size
	}
	if start >= 0 {
		out.Collect(line[start:])
	}
}

// classOf is the union of byteClass over the bytes of line, taken eight
// at a time (SWAR: SIMD within a register).
func classOf(line string) (class byte) {
	var all, up uint64
	i := 0
	for ; i+8 <= len(line); i += 8 {
		x := load64(line[i:])
		all |= x
		up |= upperASCII(x&^highBits) &^ x // not of a byte that is not ASCII
	}
	for ; i < len(line); i++ {
		class |= byteClass[line[i]]
	}
	if all&highBits != 0 {
		class |= nonASCII
	}
	if up != 0 {
		class |= upper
	}
	return class
}

// lowerASCII writes the ASCII line lower-cased into dst, of its length,
// eight bytes at a time.
func lowerASCII(dst []byte, line string) {
	i := 0
	for ; i+8 <= len(line); i += 8 {
		x := load64(line[i:])
		binary.LittleEndian.PutUint64(dst[i:], x|upperASCII(x)>>2) // 'A' | 0x20 = 'a'
	}
	for ; i < len(line); i++ {
		dst[i] = asciiLower[line[i]]
	}
}

const (
	lowBits  = 0x0101010101010101 // the lowest bit of each byte
	highBits = 0x80 * lowBits     // the highest bit of each byte
)

// upperASCII has the high bit of each byte of x that is in A-Z, x being
// eight ASCII bytes.
func upperASCII(x uint64) uint64 { return inASCII(x, 'A', 'Z') }

// load64 is the first eight bytes of s, little-endian (one load).
func load64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// byteClass marks the bytes that are ASCII upper case or not ASCII.
var byteClass = func() (t [256]byte) {
	for c := range 256 {
		switch {
		case c >= utf8.RuneSelf:
			t[c] = nonASCII
		case unicode.IsUpper(rune(c)):
			t[c] = upper
		}
	}
	return t
}()

const (
	upper    = 1
	nonASCII = 2
)

// asciiLower maps every byte below 0x80 to its lower case.
var asciiLower = func() (t [utf8.RuneSelf]byte) {
	for c := range utf8.RuneSelf {
		t[c] = byte(unicode.ToLower(rune(c)))
	}
	return t
}()

// asciiWord marks the ASCII letters and digits.
var asciiWord = func() (t [utf8.RuneSelf]bool) {
	for c := range utf8.RuneSelf {
		t[c] = unicode.IsLetter(rune(c)) || unicode.IsDigit(rune(c))
	}
	return t
}()

type counter struct {
	before func(string)
	count  *weir.ValueState[string, int64]
}

func (c *counter) Open(ctx *weir.KeyedContext[string]) (err error) {
	c.count, err = weir.NewValueState[string, int64](ctx, "count")
	return err
}

func (c *counter) Process(_ *weir.KeyedContext[string], w string, out weir.Collector[Count]) error {
	if c.before != nil {
		c.before(w)
	}
	n, _ := c.count.Value()
	n++
	c.count.Update(n)
	out.Collect(Count{Word: w, Count: n})
	return nil
}
