package wordcount

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/connector/kafka"
	"github.com/weirstream/weir/connector/postgres"
	"github.com/weirstream/weir/connector/writeahead"
)

// input is the source of lines o.Input names.
func input(o Options) (func() weir.SourceReader[string], error) {
	if !strings.HasPrefix(o.Input, "kafka://") {
		// The job keeps no line text but its state's keys, which heap
		// state copies: lines may share blocks.
		return file.Lines(file.LinesConfig{FS: o.FS, Pattern: o.Input, SharedBlocks: true})
	}
	u, err := kafka.ParseURL(o.Input)
	if err != nil {
		return nil, err
	}
	cfg := kafka.SourceConfig[string]{Brokers: u.Brokers, Topics: u.Topics, TopicRegex: u.Query.Get("regex"), Group: u.Query.Get("group"), Decode: kafka.StringValue}
	if cfg.Start, cfg.StartTimestamp, err = kafka.ParseStart(u.Query.Get("start")); err != nil {
		return nil, err
	}
	if cfg.Bounded, err = u.Bool("bounded"); err != nil {
		return nil, err
	}
	if cfg.SkipInvalid, err = u.Bool("skip-invalid"); err != nil {
		return nil, err
	}
	return kafka.Source(cfg)
}

// KafkaRecord is how the word count writes a count to Kafka: the word as
// key, the count in decimal as value.
func KafkaRecord(c Count) *kgo.Record {
	return &kgo.Record{Key: []byte(c.Word), Value: strconv.AppendInt(nil, c.Count, 10)}
}

// output is the sink o.Output names.
func output(o Options, cc weir.CheckpointConfig) (func() weir.SinkWriter[Count], error) {
	switch out := o.Output; {
	case out == "-":
		if cc.Dir == "" {
			return nil, errors.New("output - (standard output, written at the barrier) keeps its markers beside the checkpoints: give a checkpoint directory")
		}
		return writeahead.Sink(writeahead.Config[Count]{
			FS: o.FS, MarkerDir: o.FS.PathJoin(cc.Dir, "wordcount", "stdout-markers"),
			Write: func(_ context.Context, b writeahead.Batch[Count]) error {
				var buf []byte
				for _, c := range b.Records {
					buf = Format(buf, c)
				}
				_, err := os.Stdout.Write(buf)
				return err
			},
		})
	case strings.HasPrefix(out, "kafka://"):
		u, err := kafka.ParseURL(out)
		if err != nil {
			return nil, err
		}
		if len(u.Topics) != 1 {
			return nil, fmt.Errorf("kafka output %s: name one topic", out)
		}
		cfg := kafka.SinkConfig[Count]{Brokers: u.Brokers, Topic: u.Topics[0], Encode: KafkaRecord, TransactionalIDPrefix: u.Query.Get("txn-prefix")}
		if d := u.Query.Get("delivery"); d != "" {
			if cfg.Delivery, err = kafka.ParseDelivery(d); err != nil {
				return nil, err
			}
		}
		if t := u.Query.Get("txn-timeout"); t != "" {
			if cfg.TransactionTimeout, err = parseDuration("txn-timeout", t); err != nil {
				return nil, err
			}
		}
		if cfg.CreateTopic, err = u.Bool("create"); err != nil {
			return nil, err
		}
		if p := u.Query.Get("partitions"); p != "" {
			n, err := strconv.ParseInt(p, 10, 32)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("kafka output option partitions=%q: want a positive number", p)
			}
			cfg.Partitions = int32(n)
		}
		return kafka.Sink(cfg)
	case strings.HasPrefix(out, "postgres://") || strings.HasPrefix(out, "postgresql://"):
		return postgresSink(out)
	}
	return file.Sink(file.SinkConfig[Count]{FS: o.FS, Dir: o.Output, Format: Format})
}

func parseDuration(opt, v string) (d time.Duration, err error) {
	if d, err = time.ParseDuration(v); err != nil {
		return 0, fmt.Errorf("option %s=%q: %w", opt, v, err)
	}
	return d, nil
}

var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// postgresSink reads the word count's options (table, mode) off a
// PostgreSQL URL and passes the rest to PostgreSQL.
func postgresSink(raw string) (func() weir.SinkWriter[Count], error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("postgres URL: %w", err)
	}
	q := u.Query()
	table := q.Get("table")
	if table == "" {
		table = "counts"
	}
	if !tableName.MatchString(table) {
		return nil, fmt.Errorf("postgres URL option table=%q: want a table name such as counts or schema.counts", table)
	}
	mode := postgres.ExactlyOnce
	if m := q.Get("mode"); m != "" {
		if mode, err = postgres.ParseMode(m); err != nil {
			return nil, err
		}
	}
	q.Del("table")
	q.Del("mode")
	u.RawQuery = q.Encode()
	cfg := postgres.SinkConfig[Count]{URL: u.String(), Table: table, Mode: mode, Columns: []string{"word", "count"},
		Row: func(c Count) []any { return []any{c.Word, c.Count} }}
	if mode == postgres.Upsert {
		cfg.Key = []string{"word"}
		cfg.CreateTable = "CREATE TABLE IF NOT EXISTS " + table + " (word text PRIMARY KEY, count bigint NOT NULL)"
	} else {
		cfg.CreateTable = "CREATE TABLE IF NOT EXISTS " + table + " (word text NOT NULL, count bigint NOT NULL)"
	}
	return postgres.Sink(cfg)
}
