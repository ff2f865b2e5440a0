package kafka_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/connector/kafka"
)

// Review: a job whose Kafka sink delivers at least once (or without
// guarantees) cannot be resumed with --restore latest (Config.Restore
// "latest") once its sink has written. The sink keeps no state, so the
// runtime gives it no operator.Context.Restore; the new run has a new run
// id; so subtask 0 takes the resumed run's ownership record for "an earlier
// run" and refuses with ErrEarlierOutput, telling the user to "resume that
// run with --restore latest", which is what they did (wrong refusal,
// misleading error). README: "A run without `--restore` whose sink finds a
// committed record of its job and UID for the topic is refused"; this run
// has --restore.
func TestAtLeastOnceResumeWithRestoreLatestReview(t *testing.T) {
	for _, d := range []kafka.Delivery{kafka.AtLeastOnce, kafka.NoGuarantee} {
		t.Run(d.String(), func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "out"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("a\nb\nc\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			run := func(restore string) error {
				e := weir.New(weir.Config{Job: "j", Restore: restore,
					Checkpoint: weir.CheckpointConfig{Interval: 10 * time.Millisecond, Dir: filepath.Join(dir, "ckpt")}})
				lines, err := file.Lines(file.LinesConfig{Pattern: filepath.Join(dir, "*.txt")})
				if err != nil {
					t.Fatal(err)
				}
				sink, err := kafka.Sink(kafka.SinkConfig[string]{Brokers: c.ListenAddrs(), Topic: "out", Delivery: d,
					Encode: func(s string) *kgo.Record { return &kgo.Record{Value: []byte(s)} }})
				if err != nil {
					t.Fatal(err)
				}
				weir.Sink(weir.Source(e, "lines", lines), "out", sink)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_, err = e.Execute(ctx)
				return err
			}
			if err := run(""); err != nil {
				t.Fatalf("first run: %v", err)
			}
			if err := run("latest"); err != nil {
				t.Fatalf("--restore latest of the finished run refused: %v", err)
			}
		})
	}
}
