package weir_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/connector/generator"
	"github.com/weirstream/weir/connector/stdio"
)

// A whole job: a generator of readings, a running maximum per sensor in
// keyed state, printed. Checkpoints are taken every 100ms in memory; the
// bounded job ends with a final checkpoint.
func Example() {
	type reading struct {
		Sensor string
		Value  int64
	}
	env := weir.New(weir.Config{Job: "max-per-sensor", Checkpoint: weir.CheckpointConfig{Interval: 100 * time.Millisecond}})
	readings, err := generator.New(generator.Config[reading]{
		Count: 6,
		Make:  func(i int64) reading { return reading{Sensor: fmt.Sprint("s", i%2), Value: (i * 7) % 5} },
	})
	if err != nil {
		panic(err)
	}
	src := weir.Source(env, "readings", readings)
	maxes := weir.Reduce(weir.KeyBy(src, func(r reading) string { return r.Sensor }), "max",
		func(acc, r reading) reading { return reading{r.Sensor, max(acc.Value, r.Value)} })
	weir.Sink(maxes, "print", stdio.Print(os.Stdout, func(dst []byte, r reading) []byte {
		return append(strconv.AppendInt(append(append(dst, r.Sensor...), ' '), r.Value, 10), '\n')
	}))
	if _, err := env.Execute(context.Background()); err != nil {
		panic(err)
	}
	// Output:
	// s0 0
	// s1 2
	// s0 4
	// s1 2
	// s0 4
	// s1 2
}

// A word count over files, exactly-once: counts are kept per word in keyed
// state, and the file sink commits its output when a checkpoint completes
// (the bounded job ends with a final checkpoint).
func Example_wordCount() {
	dir, err := os.MkdirTemp("", "weir-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("To be, or not to be\n"), 0o644); err != nil {
		panic(err)
	}

	lines, err := file.Lines(file.LinesConfig{Pattern: filepath.Join(dir, "*.txt")})
	if err != nil {
		panic(err)
	}
	out, err := file.Sink(file.SinkConfig[string]{Dir: filepath.Join(dir, "out"),
		Format: func(dst []byte, s string) []byte { return append(append(dst, s...), '\n') }})
	if err != nil {
		panic(err)
	}
	env := weir.New(weir.Config{Job: "wordcount", Checkpoint: weir.CheckpointConfig{Dir: filepath.Join(dir, "ckpt")}})
	words := weir.FlatMap(weir.Source(env, "lines", lines), "split", func(line string, out weir.Collector[string]) {
		for _, w := range strings.FieldsFunc(strings.ToLower(line), func(r rune) bool { return !unicode.IsLetter(r) }) {
			out.Collect(w)
		}
	})
	type count struct {
		Word string
		N    int64
	}
	ones := weir.Map(words, "one", func(w string) count { return count{w, 1} })
	counts := weir.Reduce(weir.KeyBy(ones, func(c count) string { return c.Word }), "count",
		func(acc, c count) count { return count{acc.Word, acc.N + c.N} })
	weir.Sink(weir.Map(counts, "format", func(c count) string { return fmt.Sprint(c.Word, " ", c.N) }), "output", out)
	if _, err := env.Execute(context.Background()); err != nil {
		panic(err)
	}

	committed, _ := filepath.Glob(filepath.Join(dir, "out", "part-*"))
	var got []string
	for _, f := range committed {
		data, _ := os.ReadFile(f)
		got = append(got, strings.Fields(strings.ReplaceAll(string(data), " ", "="))...)
	}
	slices.Sort(got)
	fmt.Println(got)
	// Output: [be=1 be=2 not=1 or=1 to=1 to=2]
}

// Event time and windows: clicks with their own timestamps, out of order by
// up to 2 s, counted per page in tumbling 10 s windows. A window fires when
// the watermark passes its end; the end of the input fires the rest.
func ExampleWindowAggregate() {
	type click struct {
		Page string
		At   time.Time
	}
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	offsets := []int{1, 4, 3, 12, 11, 15, 22, 21} // seconds, out of order
	env := weir.New(weir.Config{Job: "clicks", Checkpoint: weir.CheckpointConfig{Interval: 100 * time.Millisecond}})
	clicks, err := generator.New(generator.Config[click]{
		Count: int64(len(offsets)),
		Make: func(i int64) click {
			return click{Page: fmt.Sprint("p", i%2), At: start.Add(time.Duration(offsets[i]) * time.Second)}
		},
	})
	if err != nil {
		panic(err)
	}
	src := weir.Source(env, "clicks", clicks,
		weir.Watermarks(weir.BoundedOutOfOrderness(2*time.Second, func(c click) time.Time { return c.At })))
	perPage := weir.Window(weir.KeyBy(src, func(c click) string { return c.Page }), weir.Tumbling(10*time.Second))
	counts := weir.WindowAggregate(perPage, "clicks per page", weir.Count[click]())
	weir.Sink(counts, "print", stdio.Print(os.Stdout, func(dst []byte, r weir.WindowResult[string, int64]) []byte {
		return fmt.Appendf(dst, "%s %s–%s: %d\n", r.Key, r.Window.Start.Format("15:04:05"), r.Window.End.Format("15:04:05"), r.Value)
	}))
	if _, err := env.Execute(context.Background()); err != nil {
		panic(err)
	}
	// Unordered output:
	// p0 12:00:00–12:00:10: 2
	// p1 12:00:00–12:00:10: 1
	// p0 12:00:10–12:00:20: 1
	// p1 12:00:10–12:00:20: 2
	// p0 12:00:20–12:00:30: 1
	// p1 12:00:20–12:00:30: 1
}

// A job program that is a whole Weir command line for its job: "run" in
// one process, "coordinator" and "worker" on many machines, "status" for a
// cluster. Every process runs the same binary and builds the same graph.
// (Not run here: Main reads the command line and exits.)
func ExampleMain() {
	weir.Main(weir.Config{Job: "sensors", Parallelism: 2}, func(env *weir.Environment) error {
		readings, err := generator.New(generator.Config[int64]{Count: 1000, Make: func(i int64) int64 { return i % 7 }})
		if err != nil {
			return err
		}
		counts := weir.Reduce(weir.KeyBy(weir.Map(weir.Source(env, "readings", readings), "one", func(v int64) [2]int64 { return [2]int64{v, 1} }),
			func(c [2]int64) int64 { return c[0] }), "count", func(a, b [2]int64) [2]int64 { return [2]int64{a[0], a[1] + b[1]} })
		weir.Sink(counts, "print", stdio.Print(os.Stdout, func(dst []byte, c [2]int64) []byte { return fmt.Appendf(dst, "%d %d\n", c[0], c[1]) }))
		return nil
	})
}
