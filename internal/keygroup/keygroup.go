// Package keygroup maps keys to key groups and key groups to subtasks.
//
// A key group is hash(key) mod maxParallelism; it is the unit in which keyed
// state is stored, moved and rescaled. Subtask i of p owns a contiguous range
// of key groups, computed exactly as Flink's KeyGroupRangeAssignment does, so
// that a restore at another parallelism hands each subtask exactly its groups.
package keygroup

import "fmt"

// DefaultMaxParallelism is the number of key groups when a job does not say.
const DefaultMaxParallelism = 128

// MaxMaxParallelism bounds maxParallelism; it is Flink's bound too.
const MaxMaxParallelism = 1 << 15

// Range is the inclusive range [First, Last] of key groups. The zero value
// is the single key group 0; use Empty for "no key groups".
type Range struct {
	First int `json:"first"`
	Last  int `json:"last"`
}

// Empty is a range that contains no key group.
var Empty = Range{First: 0, Last: -1}

// Len is the number of key groups in r.
func (r Range) Len() int {
	if r.Last < r.First {
		return 0
	}
	return r.Last - r.First + 1
}

// Contains reports whether key group g is in r.
func (r Range) Contains(g int) bool { return g >= r.First && g <= r.Last }

// Intersect is the key groups in both r and o.
func (r Range) Intersect(o Range) Range {
	out := Range{First: max(r.First, o.First), Last: min(r.Last, o.Last)}
	if out.Len() == 0 {
		return Empty
	}
	return out
}

func (r Range) String() string {
	if r.Len() == 0 {
		return "[]"
	}
	return fmt.Sprintf("[%d..%d]", r.First, r.Last)
}

// ForSubtask is the key-group range that subtask i of parallelism p owns when
// there are maxParallelism key groups. It panics on arguments out of range:
// they are a bug in the plan, not an operating error.
func ForSubtask(maxParallelism, p, i int) Range {
	if p <= 0 || p > maxParallelism || i < 0 || i >= p {
		panic(fmt.Sprintf("keygroup: subtask %d of %d with max parallelism %d", i, p, maxParallelism))
	}
	first := (i*maxParallelism + p - 1) / p
	last := ((i+1)*maxParallelism+p-1)/p - 1
	return Range{First: first, Last: last}
}

// Subtask is the index of the subtask of parallelism p that owns key group g.
func Subtask(maxParallelism, p, g int) int {
	return g * p / maxParallelism
}

// Of is the key group of a key with the given 64-bit hash. The hash is mixed
// once more (murmur3's finaliser) so that weak user hashes still spread.
func Of(hash uint64, maxParallelism int) int {
	h := hash
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	if maxParallelism&(maxParallelism-1) == 0 {
		return int(h & uint64(maxParallelism-1)) // the same, without a division
	}
	return int(h % uint64(maxParallelism))
}
