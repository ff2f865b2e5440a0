package weir_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/weirstream/weir"
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
