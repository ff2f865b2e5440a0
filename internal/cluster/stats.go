package cluster

import (
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/runtime"
)

func statsToProto(ss []runtime.SubtaskStats) []*clusterpb.SubtaskStats {
	out := make([]*clusterpb.SubtaskStats, len(ss))
	for i, s := range ss {
		out[i] = &clusterpb.SubtaskStats{
			Task:    &clusterpb.TaskID{Vertex: s.Task.Vertex, Subtask: int32(s.Task.Subtask)},
			Attempt: int64(s.Attempt), UptimeNs: int64(s.Uptime), RecordsIn: s.In, RecordsOut: s.Out,
			IdleNs: int64(s.Idle), BackPressuredNs: int64(s.BackPressured), Watermark: s.Watermark,
			Commits: s.Commits, CommitNs: int64(s.CommitTime), State: int32(s.State),
			InputCapacity: int32(s.InputCapacity), BytesIn: s.BytesIn, BytesOut: s.BytesOut,
			BarrierCheckpoint: uint64(s.Barrier.ID), BarrierSinceUnixNanos: unixNanos(s.Barrier.Since),
			BarriersReceived: int32(s.Barrier.Barriers), InputChannels: int32(s.Barrier.Channels), BarrierFlags: barrierFlags(s.Barrier),
		}
	}
	return out
}

// The bits of SubtaskStats.barrier_flags.
const (
	barrierUnaligned = 1 << iota
	barrierSwitched
	barrierDone
)

func barrierFlags(b runtime.BarrierProgress) int32 {
	var f int32
	for _, x := range []struct {
		set bool
		bit int32
	}{{b.Unaligned, barrierUnaligned}, {b.Switched, barrierSwitched}, {b.Done, barrierDone}} {
		if x.set {
			f |= x.bit
		}
	}
	return f
}

// unixNanos is t in Unix nanoseconds, 0 for the zero time (not said).
func unixNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func statsFromProto(ps []*clusterpb.SubtaskStats) []runtime.SubtaskStats {
	out := make([]runtime.SubtaskStats, len(ps))
	for i, p := range ps {
		out[i] = runtime.SubtaskStats{
			Task:    checkpoint.TaskID{Vertex: p.GetTask().GetVertex(), Subtask: int(p.GetTask().GetSubtask())},
			Attempt: int(p.GetAttempt()), Uptime: time.Duration(p.GetUptimeNs()), In: p.GetRecordsIn(), Out: p.GetRecordsOut(),
			Idle: time.Duration(p.GetIdleNs()), BackPressured: time.Duration(p.GetBackPressuredNs()), Watermark: p.GetWatermark(),
			Commits: p.GetCommits(), CommitTime: time.Duration(p.GetCommitNs()), State: runtime.TaskState(p.GetState()),
			InputCapacity: int(p.GetInputCapacity()), BytesIn: p.GetBytesIn(), BytesOut: p.GetBytesOut(),
			Barrier: runtime.BarrierProgress{ID: checkpoint.ID(p.GetBarrierCheckpoint()), Barriers: int(p.GetBarriersReceived()), Channels: int(p.GetInputChannels()),
				Unaligned: p.GetBarrierFlags()&barrierUnaligned != 0, Switched: p.GetBarrierFlags()&barrierSwitched != 0, Done: p.GetBarrierFlags()&barrierDone != 0},
		}
		if n := p.GetBarrierSinceUnixNanos(); n != 0 {
			out[i].Barrier.Since = time.Unix(0, n)
		}
	}
	return out
}
