package cluster

import (
	"slices"
	"strings"
	"sync"

	"github.com/weirstream/weir/internal/cluster/clusterpb"
)

// OperatorCount is one operator's counters in one worker process: the
// records that entered it and the late records it dropped, since the
// process started.
type OperatorCount struct {
	UID           string
	Records, Late int64
}

// OperatorCounts sums the operators' counters that the workers'
// heartbeats carry, and the bytes their restores read (local recovery),
// for the coordinator's metrics and API: on a cluster the coordinator
// runs no operator, and its own counters stay 0. Counts are monotonic:
// when a worker's process is replaced (a new incarnation under its name,
// after a kill), the old one's last counts are kept beside the new one's.
// Safe for concurrent use.
type OperatorCounts struct {
	mu sync.Mutex
	// live holds each worker's latest counts, by name; retired sums the
	// last counts of the processes replaced since.
	live            map[string]incarnationCounts
	retired         map[string]OperatorCount
	retiredRestored Restored
}

// Restored is the bytes of state restores read from local copies and from
// checkpoint storage.
type Restored struct{ LocalBytes, RemoteBytes int64 }

type incarnationCounts struct {
	incarnation uint64
	counts      []OperatorCount
	restored    Restored
}

// NewOperatorCounts returns an empty sum.
func NewOperatorCounts() *OperatorCounts {
	return &OperatorCounts{live: map[string]incarnationCounts{}, retired: map[string]OperatorCount{}}
}

// report takes worker's latest counts; incarnation numbers its process.
func (o *OperatorCounts) report(worker string, incarnation uint64, counts []OperatorCount, restored Restored) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if old, ok := o.live[worker]; ok && old.incarnation != incarnation {
		for _, c := range old.counts {
			r := o.retired[c.UID]
			r.UID, r.Records, r.Late = c.UID, r.Records+c.Records, r.Late+c.Late
			o.retired[c.UID] = r
		}
		o.retiredRestored.LocalBytes += old.restored.LocalBytes
		o.retiredRestored.RemoteBytes += old.restored.RemoteBytes
	}
	o.live[worker] = incarnationCounts{incarnation: incarnation, counts: counts, restored: restored}
}

// Restored sums the bytes the workers' restores read, by source.
func (o *OperatorCounts) Restored() Restored {
	o.mu.Lock()
	defer o.mu.Unlock()
	sum := o.retiredRestored
	for _, l := range o.live {
		sum.LocalBytes += l.restored.LocalBytes
		sum.RemoteBytes += l.restored.RemoteBytes
	}
	return sum
}

// Sum returns each operator's counts over the workers, sorted by UID.
func (o *OperatorCounts) Sum() []OperatorCount {
	o.mu.Lock()
	defer o.mu.Unlock()
	sum := map[string]OperatorCount{}
	add := func(c OperatorCount) {
		s := sum[c.UID]
		s.UID, s.Records, s.Late = c.UID, s.Records+c.Records, s.Late+c.Late
		sum[c.UID] = s
	}
	for _, c := range o.retired {
		add(c)
	}
	for _, l := range o.live {
		for _, c := range l.counts {
			add(c)
		}
	}
	out := make([]OperatorCount, 0, len(sum))
	for _, c := range sum {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b OperatorCount) int { return strings.Compare(a.UID, b.UID) })
	return out
}

func operatorsToProto(cs []OperatorCount) []*clusterpb.OperatorCount {
	out := make([]*clusterpb.OperatorCount, len(cs))
	for i, c := range cs {
		out[i] = &clusterpb.OperatorCount{Uid: c.UID, Records: c.Records, Late: c.Late}
	}
	return out
}

func operatorsFromProto(ps []*clusterpb.OperatorCount) []OperatorCount {
	out := make([]OperatorCount, len(ps))
	for i, p := range ps {
		out[i] = OperatorCount{UID: p.GetUid(), Records: p.GetRecords(), Late: p.GetLate()}
	}
	return out
}
