package runtime

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
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

// TaskMetrics are counters of one task, safe to read from any goroutine.
type TaskMetrics struct {
	syncNanos atomic.Int64 // longest synchronous snapshot part
}

func (m *TaskMetrics) observeSync(d time.Duration) {
	for {
		old := m.syncNanos.Load()
		if int64(d) <= old || m.syncNanos.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

// MaxSyncSnapshot is the longest synchronous snapshot part seen.
func (m *TaskMetrics) MaxSyncSnapshot() time.Duration { return time.Duration(m.syncNanos.Load()) }
