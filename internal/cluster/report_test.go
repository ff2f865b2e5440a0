package cluster

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/cluster/clusterpb"
	"github.com/weirstream/weir/internal/runtime"
)

// TestReportRoundTrip: an ack crosses the control plane (marshalled, as
// Connect sends it) with its alignment mode and channel state intact, so
// the coordinator's web UI and metrics see what the worker's task did.
func TestReportRoundTrip(t *testing.T) {
	handles := []checkpoint.Handle{
		{Operator: "count", Subtask: 1, Parallelism: 2, Path: "chk-7/count-1", SizeBytes: 300},
		{Operator: "count", Subtask: 1, Parallelism: 2, Kind: runtime.KindChannelState, Path: "chk-7/count-1.channel", SizeBytes: 1200},
	}
	for _, tc := range []struct {
		name string
		r    runtime.Report
	}{
		{"aligned", runtime.Report{Kind: runtime.ReportAck, Task: checkpoint.TaskID{Vertex: "count", Subtask: 1}, ID: 7,
			Handles: handles[:1], Sync: 3 * time.Millisecond, Align: 40 * time.Millisecond, Async: 9 * time.Millisecond,
			Arrivals: []time.Duration{0, 40 * time.Millisecond}}},
		{"unaligned", runtime.Report{Kind: runtime.ReportAck, Task: checkpoint.TaskID{Vertex: "count", Subtask: 1}, ID: 7,
			Handles: handles, Sync: time.Millisecond, Async: 2 * time.Millisecond, Arrivals: []time.Duration{0, -1},
			Unaligned: true, ChannelState: 1200}},
		{"switched", runtime.Report{Kind: runtime.ReportAck, Task: checkpoint.TaskID{Vertex: "count", Subtask: 1}, ID: 7,
			Handles: handles, Align: 250 * time.Millisecond, Arrivals: []time.Duration{0, -1},
			Unaligned: true, Switched: true, ChannelState: 1200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wire, err := proto.Marshal(reportToProto(tc.r))
			if err != nil {
				t.Fatal(err)
			}
			var p clusterpb.TaskReport
			if err := proto.Unmarshal(wire, &p); err != nil {
				t.Fatal(err)
			}
			got, err := reportFromProto(&p)
			if err != nil {
				t.Fatalf("reportFromProto: %v", err)
			}
			if !reflect.DeepEqual(got, tc.r) {
				t.Errorf("round trip:\n got %+v\nwant %+v", got, tc.r)
			}
		})
	}
}

// TestReportRefusesNonsenseChannelState: a report the UI would show as a
// negative size, or as a switch to unaligned of an aligned snapshot, is
// refused with an error that names the task.
func TestReportRefusesNonsenseChannelState(t *testing.T) {
	task := &clusterpb.TaskID{Vertex: "count", Subtask: 1}
	for _, tc := range []struct {
		name string
		p    *clusterpb.TaskReport
		want string
	}{
		{"negative", &clusterpb.TaskReport{Task: task, Kind: int32(runtime.ReportAck), Checkpoint: 7, Unaligned: true, ChannelStateBytes: -1}, "channel state of -1 bytes"},
		{"switched aligned", &clusterpb.TaskReport{Task: task, Kind: int32(runtime.ReportAck), Checkpoint: 7, Switched: true}, "switched to unaligned but not unaligned"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := reportFromProto(tc.p)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "count") {
				t.Errorf("reportFromProto: %v; want an error naming task count that says %q", err, tc.want)
			}
		})
	}
}
