package runtime

import (
	"context"
	"sync"
)

// pool runs the asynchronous parts of snapshots on at most n goroutines at
// once; submit waits for a free slot (back-pressure on the task).
type pool struct {
	slots chan struct{}
	wg    sync.WaitGroup
}

func newPool(n int) *pool { return &pool{slots: make(chan struct{}, n)} }

func (p *pool) submit(ctx context.Context, job func()) {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return
	}
	p.wg.Go(func() {
		defer func() { <-p.slots }()
		job()
	})
}

func (p *pool) wait() { p.wg.Wait() }
