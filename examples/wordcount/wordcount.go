// Package wordcount is Weir's word count: read lines, lower-case and split
// them into words, keep a count per word in keyed state, and write each
// updated count, exactly-once.
//
// Input is files (a path or glob) or a Kafka topic (kafka://host:port/topic,
// one line per record value). Output is a directory of files
// ("word<TAB>count" lines), a Kafka topic (key: the word; value: the count
// in decimal), a PostgreSQL table (postgres://…?table=counts&mode=…:
// exactly-once appends a row per occurrence, upsert keeps one row per word
// with its latest count), or standard output ("-", written at the barrier).
package wordcount

import (
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/arena"
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
	FS                    vfs.FS
	Logger                *slog.Logger
	OnEvent               func(weir.JobEvent)
	// BeforeCount, if set, is called with every word before it is counted,
	// in the counting task; tests use it to fail the operator on purpose.
	BeforeCount func(word string)
	// Cluster makes the process a cluster's coordinator or worker.
	Cluster weir.ClusterConfig
	// Web is where to serve the web UI, metrics and the API, WebToken what
	// its mutations need, OnWeb hears the address it serves on
	// (weir.Config.Web, WebToken, OnWeb).
	Web, WebToken string
	OnWeb         func(addr string)
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
	dst = strconv.AppendInt(dst, c.Count, 10)
	return append(dst, '\n')
}

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
		StateBackend: o.StateBackend, Cluster: o.Cluster, Web: o.Web, WebToken: o.WebToken, OnWeb: o.OnWeb,
	})
	lines, err := input(o)
	if err != nil {
		return nil, err
	}
	sink, err := output(o, cc)
	if err != nil {
		return nil, err
	}
	words := weir.FlatMap(weir.Source(env, "lines", lines), "split", Split)
	counts := weir.Process(weir.KeyBy(words, func(w string) string { return w }), "count",
		func() weir.KeyedProcessFunction[string, string, Count] { return &counter{before: o.BeforeCount} })
	weir.Sink(counts, "output", sink)
	return env, nil
}

// Split lower-cases line and emits its words: runs of letters and digits.
// Words share the lower-cased line's memory: an ASCII line of up to 512
// bytes is lower-cased byte by byte into a chunk shared with other lines
// (none when it has no upper case); another goes through strings.ToLower.
// NB: a word kept alive keeps its chunk (4 KiB) alive; heap state copies
// the keys it keeps, and a job keeping words elsewhere should keep
// strings.Clone of them.
func Split(line string, out weir.Collector[string]) {
	var class byte
	for i := 0; i < len(line); i++ {
		class |= byteClass[line[i]]
	}
	switch {
	case class == upper && len(line) <= 512: // ASCII with upper case
		var buf [512]byte
		for i := 0; i < len(line); i++ {
			buf[i] = asciiLower[line[i]]
		}
		a := lowered.Get().(*arena.Strings)
		line = a.Copy(buf[:len(line)])
		lowered.Put(a)
	case class != 0:
		line = strings.ToLower(line)
	}
	emitWords(line, out)
}

// lowered holds the chunks Split lower-cases lines into; a pool, as Split
// is a plain function every subtask calls.
var lowered = sync.Pool{New: func() any { return new(arena.Strings) }}

// emitWords emits the words of a lower-cased line.
func emitWords(line string, out weir.Collector[string]) {
	start := -1
	for i := 0; i < len(line); {
		var word bool
		size := 1
		if b := line[i]; b < utf8.RuneSelf {
			word = asciiWord[b] // what unicode.IsLetter || unicode.IsDigit say, without decoding
		} else {
			var r rune
			r, size = utf8.DecodeRuneInString(line[i:])
			word = unicode.IsLetter(r) || unicode.IsDigit(r)
		}
		switch {
		case word && start < 0:
			start = i
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
