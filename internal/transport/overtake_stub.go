package transport

import (
	"errors"

	"github.com/weirstream/weir/internal/runtime"
)

// Placeholder until network channels carry overtaking barriers.

func (o *Output) Overtake(b, tail runtime.Event) error {
	return errors.New("transport: unaligned checkpoints are not carried yet")
}

func (in *Input) Overtaken(k int, dst []runtime.Event) []runtime.Event { return dst }
