package weir_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/stdio"
	"github.com/weirstream/weir/examples/wordcount"
	"github.com/weirstream/weir/internal/runtime"
	"github.com/weirstream/weir/internal/web"
)

// TestWebShowsUnalignedCheckpoints runs the word count under back-pressure
// (the counter slowed) with unaligned checkpoints until a checkpoint holds
// channel state, and reads it from the API (per checkpoint and per task),
// the config, the metrics and weir checkpoints: the counters unaligned,
// the sources (no input channels) aligned.
func TestWebShowsUnalignedCheckpoints(t *testing.T) {
	dir := t.TempDir()
	for f := range 3 {
		var b strings.Builder
		for i := range 60_000 {
			fmt.Fprintf(&b, "w%d w%d\n", i%97, (i*31+f)%89)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("in-%d.txt", f)), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	found := make(chan weir.JobEvent, 1)
	addrs := make(chan string, 1)
	e, err := wordcount.Build(wordcount.Options{Input: filepath.Join(dir, "in-*.txt"), Output: filepath.Join(dir, "out"), Parallelism: 2,
		Checkpoint:  weir.CheckpointConfig{Interval: 50 * time.Millisecond, Dir: filepath.Join(dir, "ckpt"), Alignment: weir.Unaligned},
		BeforeCount: wordcount.Paced(50), Web: "127.0.0.1:0", OnWeb: func(a string) { addrs <- a },
		OnEvent: firstCompleted(found, func(tt runtime.TaskTrace) bool { return tt.ChannelState > 0 })})
	if err != nil {
		t.Fatal(err)
	}
	addr := runUntilCancelled(t, e, addrs)
	c := checkAlignmentShown(t, addr, waitEvent(t, found, "a checkpoint with channel state"), "unaligned", 0)
	for _, tl := range c.Tasks {
		want := "unaligned"
		if strings.HasPrefix(tl.Task, "lines#") {
			want = "aligned"
		}
		if tl.Alignment != want || (want == "aligned" && tl.ChannelState != 0) {
			t.Errorf("checkpoint %d, task %s: alignment %q, channel state %d bytes; want %s", c.ID, tl.Task, tl.Alignment, tl.ChannelState, want)
		}
	}
	if c.AckedTasks != 4 || c.UnalignedTasks != 2 || c.SwitchedTasks != 0 || c.ChannelState <= 0 {
		t.Errorf("checkpoint %d: %+v; want 2 of 4 tasks unaligned, with channel state", c.ID, c)
	}
}

// TestWebShowsSwitchedCheckpoints runs a job in which the counters read a
// busy and an idle subtask of "slow", with aligned checkpoints and an
// aligned-checkpoint timeout of 5 ms, until a counter's checkpoint
// switched to unaligned (its barrier from the busy subtask came late), and
// reads it as TestWebShowsUnalignedCheckpoints does: switched after
// aligning longer than the timeout. NB: a switched snapshot may hold no
// channel state: the channels still owed a barrier may deliver it next.
func TestWebShowsSwitchedCheckpoints(t *testing.T) {
	src, err := newRateLimited(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	found := make(chan weir.JobEvent, 1)
	addrs := make(chan string, 1)
	env := weir.New(weir.Config{Job: "switched", Parallelism: 2, BatchSize: 16,
		Checkpoint: weir.CheckpointConfig{Interval: 100 * time.Millisecond, AlignedTimeout: 5 * time.Millisecond},
		Web:        "127.0.0.1:0", OnWeb: func(addr string) { addrs <- addr },
		OnEvent: firstCompleted(found, func(tt runtime.TaskTrace) bool { return tt.Switched })})
	slow := weir.Reduce(weir.KeyBy(weir.Source(env, "numbers", src), func(int64) int64 { return 0 }), "slow", func(a, b int64) int64 {
		time.Sleep(200 * time.Microsecond) // the slowness injected
		return a + b
	})
	counts := weir.Reduce(weir.KeyBy(slow, func(i int64) int64 { return i % 7 }), "count", func(a, b int64) int64 { return a + b })
	weir.Sink(counts, "discard", stdio.Print(io.Discard, func(dst []byte, i int64) []byte { return dst }))
	addr := runUntilCancelled(t, env, addrs)
	c := checkAlignmentShown(t, addr, waitEvent(t, found, "a checkpoint switched to unaligned"), "switched", 5*time.Millisecond)
	for _, tl := range c.Tasks {
		switch {
		case strings.HasPrefix(tl.Task, "numbers#") && (tl.Alignment != "aligned" || tl.ChannelState != 0):
			t.Errorf("checkpoint %d, source task %s: alignment %q, channel state %d bytes; want aligned, none", c.ID, tl.Task, tl.Alignment, tl.ChannelState)
		case tl.Alignment == "switched" && tl.Acked < 0.005:
			// The timeout counts from the trigger (as Flink's): the task
			// acknowledged after it, whatever its alignment took.
			t.Errorf("checkpoint %d, task %s switched and acknowledged %v s after the trigger, within the timeout", c.ID, tl.Task, tl.Acked)
		case tl.Alignment == "unaligned":
			t.Errorf("checkpoint %d, task %s: unaligned from its first barrier in an aligned job", c.ID, tl.Task)
		}
	}
	if c.AckedTasks != 6 || c.UnalignedTasks < 1 || c.SwitchedTasks != c.UnalignedTasks {
		t.Errorf("checkpoint %d: %+v; want of 6 tasks some switched, none unaligned from the start", c.ID, c)
	}
}

// firstCompleted is an OnEvent that sends the first completed
// checkpoint one of whose tasks is as wanted on found.
func firstCompleted(found chan<- weir.JobEvent, wanted func(runtime.TaskTrace) bool) func(weir.JobEvent) {
	return func(ev weir.JobEvent) {
		if ev.Kind == weir.EventCheckpointCompleted && slices.ContainsFunc(ev.Tasks, wanted) {
			select {
			case found <- ev:
			default:
			}
		}
	}
}

// runUntilCancelled runs e until the test ends and returns the address it
// serves its API on.
func runUntilCancelled(t *testing.T, e *weir.Environment, addrs <-chan string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := e.Execute(ctx)
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("the job ended with %v, want cancelled", err)
		}
	})
	select {
	case addr := <-addrs:
		return addr
	case err := <-done:
		done <- err
		t.Fatalf("the job ended (%v) before it served", err)
	}
	return ""
}

// waitEvent waits up to 2 minutes for found's event.
func waitEvent(t *testing.T, found <-chan weir.JobEvent, what string) weir.JobEvent {
	t.Helper()
	select {
	case ev := <-found:
		return ev
	case <-time.After(2 * time.Minute):
		t.Fatalf("no %s within 2 minutes", what)
	}
	return weir.JobEvent{}
}

// checkAlignmentShown reads completed checkpoint ev from the API at addr
// (the server observed it before OnEvent heard it): the checkpoint, as
// listed and with its tasks, says it was how (unaligned or switched), with
// its tasks' alignment and channel state as the job reported them; the
// config says the job's alignment and aligned timeout; the metrics count
// the tasks' snapshots and the channel state; weir checkpoints lists it.
func checkAlignmentShown(t *testing.T, addr string, ev weir.JobEvent, how string, timeout time.Duration) web.Checkpoint {
	t.Helper()
	base := "http://" + addr
	var c web.Checkpoint
	getJSON(t, fmt.Sprint(base, "/api/v1/checkpoints/", ev.ID), &c)
	if len(c.Tasks) != len(ev.Tasks) {
		t.Fatalf("checkpoint %d: %d tasks in the API, %d acknowledged", c.ID, len(c.Tasks), len(ev.Tasks))
	}
	var sum int64
	unaligned, switched := 0, 0
	for i, tl := range c.Tasks {
		tt := ev.Tasks[i]
		want := "aligned"
		if tt.Switched {
			want, switched = "switched", switched+1
		} else if tt.Unaligned {
			want = "unaligned"
		}
		if tt.Unaligned {
			unaligned++
		}
		if tl.Task != tt.Task.String() || tl.Alignment != want || tl.ChannelState != tt.ChannelState || tl.Align != tt.Align.Seconds() {
			t.Errorf("checkpoint %d, task %d in the API: %+v; the job reported %+v", c.ID, i, tl, tt)
		}
		sum += tl.ChannelState
	}
	if c.Alignment != how || c.AckedTasks != len(ev.Tasks) || c.UnalignedTasks != unaligned || c.SwitchedTasks != switched ||
		c.ChannelState != sum || c.Size < c.ChannelState {
		t.Fatalf("checkpoint %d: %+v; want %s, %d of %d tasks unaligned, %d switched, %d bytes of channel state", c.ID, c, how, unaligned, len(ev.Tasks), switched, sum)
	}
	var list []web.Checkpoint
	getJSON(t, base+"/api/v1/checkpoints", &list)
	if i := slices.IndexFunc(list, func(l web.Checkpoint) bool { return l.ID == c.ID }); i < 0 {
		t.Fatalf("checkpoint %d is not listed: %+v", c.ID, list)
	} else if l := list[i]; l.Alignment != how || l.UnalignedTasks != unaligned || l.SwitchedTasks != switched || l.ChannelState != sum || l.Tasks != nil {
		t.Fatalf("checkpoint %d as listed: %+v", c.ID, l)
	}

	var cfg struct {
		Alignment      string `json:"checkpointAlignment"`
		AlignedTimeout int64  `json:"alignedCheckpointTimeoutNanos"`
	}
	getJSON(t, base+"/api/v1/config", &cfg)
	wantCfg := "aligned"
	if how == "unaligned" {
		wantCfg = "unaligned"
	}
	if cfg.Alignment != wantCfg || cfg.AlignedTimeout != int64(timeout) {
		t.Errorf("config: %+v, want alignment %s, timeout %d ns", cfg, wantCfg, timeout)
	}

	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	wantMetrics := []string{
		`(?m)^# TYPE weir_checkpoint_channel_state_bytes histogram$`,
		`(?m)^weir_checkpoint_channel_state_bytes_count\{job="\w+"\} [1-9]`,
		`(?m)^weir_checkpoint_task_snapshots_total\{alignment="` + how + `",job="\w+"\} [1-9]`,
		`(?m)^weir_checkpoint_task_snapshots_total\{alignment="aligned",job="\w+"\} [1-9]`,
	}
	if sum > 0 {
		wantMetrics = append(wantMetrics, `(?m)^weir_checkpoint_channel_state_bytes_sum\{job="\w+"\} [1-9]`)
	}
	for _, want := range wantMetrics {
		if !regexp.MustCompile(want).Match(metrics) {
			t.Errorf("no line matching %s in:\n%s", want, metrics)
		}
	}

	var out bytes.Buffer
	for _, cmd := range web.Commands() {
		if cmd.Name() == "checkpoints" {
			cmd.SetArgs([]string{"--web", addr})
			cmd.SetOut(&out)
			if err := cmd.Execute(); err != nil {
				t.Fatal(err)
			}
		}
	}
	line := regexp.MustCompile(fmt.Sprintf(`(?m)^%d +checkpoint +completed +\S+ +\d+ms +%d +%s %d/%d tasks +%d +\S+#\d$`, c.ID, c.Size, how, unaligned, len(ev.Tasks), sum))
	if !line.MatchString(out.String()) {
		t.Errorf("weir checkpoints: no line matching %s in:\n%s", line, out.String())
	}
	t.Logf("checkpoint %d: %s %d/%d tasks, %d bytes of channel state of %d; weir checkpoints:\n%s", c.ID, c.Alignment, c.UnalignedTasks, c.AckedTasks, c.ChannelState, c.Size, out.String())
	return c
}
