// Package stdio writes records to a writer such as standard output. It is
// not transactional: after a restore, records may be written again.
package stdio

import (
	"io"
	"sync"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/operator"
)

// Print writes format(v) for every record to w, shared by every subtask.
func Print[T any](w io.Writer, format func(dst []byte, v T) []byte) func() weir.SinkWriter[T] {
	var mu sync.Mutex
	return func() weir.SinkWriter[T] { return &printer[T]{w: w, mu: &mu, format: format} }
}

type printer[T any] struct {
	operator.Base
	w      io.Writer
	mu     *sync.Mutex
	format func([]byte, T) []byte
	buf    []byte
}

func (p *printer[T]) Write(v T) error {
	p.buf = p.format(p.buf[:0], v)
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := p.w.Write(p.buf)
	return err
}
