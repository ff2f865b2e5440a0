package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/connector/kafka"
	"github.com/weirstream/weir/internal/pgtest"
)

// TestReviewVerifyCLICreatesTheTableItReads: weir verify must only read
// (note 94; TestReviewVerifyCLIOnlyReads for directories). readable() lets
// postgres:// outputs through unchecked, and the word count's sink is built
// with CREATE TABLE IF NOT EXISTS, which Sink runs at build: verify of a
// table the job never wrote (a typo in table=, another database) creates
// it, then fails.
func TestReviewVerifyCLICreatesTheTableItReads(t *testing.T) {
	pg := pgtest.Start(t)
	j := newJob(t, 1, 100)
	if err := os.MkdirAll(filepath.Join(j.ckpt, "wordcount"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(weirBin, "verify", "wordcount", "--input", j.input, "--output", pg.URL+"&table=never_written", "--checkpoint-dir", j.ckpt).CombinedOutput()
	if err == nil {
		t.Fatalf("weir verify of a job that never ran succeeded:\n%s", out)
	}
	conn, cerr := pgx.Connect(context.Background(), pg.URL)
	if cerr != nil {
		t.Fatal(cerr)
	}
	defer conn.Close(context.Background())
	var exists bool
	if qerr := conn.QueryRow(context.Background(), "SELECT to_regclass('never_written') IS NOT NULL").Scan(&exists); qerr != nil {
		t.Fatal(qerr)
	}
	if exists {
		t.Fatalf("weir verify (%v: %s) created table never_written: it must only read", err, out)
	}
}

// TestReviewVerifyCLICreatesKafkaTopics: the same for Kafka. Building the
// sink creates the ownership topic when the cluster lacks it (always), and
// the output topic with create=true, the flag the job ran with: verify
// against a cluster the job never wrote creates both.
func TestReviewVerifyCLICreatesKafkaTopics(t *testing.T) {
	addr := serveKafka(t)
	j := newJob(t, 1, 100)
	if err := os.MkdirAll(filepath.Join(j.ckpt, "wordcount"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(weirBin, "verify", "wordcount", "--input", j.input, "--output", "kafka://"+addr+"/never_written?create=true", "--checkpoint-dir", j.ckpt).CombinedOutput()
	if err == nil {
		t.Fatalf("weir verify of a job that never ran succeeded:\n%s", out)
	}
	cl, cerr := kgo.NewClient(kgo.SeedBrokers(addr))
	if cerr != nil {
		t.Fatal(cerr)
	}
	defer cl.Close()
	topics, lerr := kadm.NewClient(cl).ListTopics(context.Background())
	if lerr != nil {
		t.Fatal(lerr)
	}
	for _, tp := range []string{"never_written", kafka.OwnersTopic} {
		if topics.Has(tp) {
			t.Errorf("weir verify (%v: %s) created topic %s: it must only read", err, out, tp)
		}
	}
}
