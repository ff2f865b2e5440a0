package wordcount

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/connector/file"
	"github.com/weirstream/weir/connector/kafka"
	"github.com/weirstream/weir/connector/postgres"
	"github.com/weirstream/weir/connector/writeahead"
	"github.com/weirstream/weir/storage"
)

// input is the source of lines o.Input names.
func input(o Options) (func() weir.SourceReader[string], error) {
	scheme, isURL := file.URLScheme(o.Input)
	switch {
	case !isURL:
		// The job keeps no line text but its state's keys, which heap
		// state copies: lines may share blocks.
		return file.Lines(file.LinesConfig{FS: o.FS, Pattern: o.Input, SharedBlocks: true, MaxLineBytes: o.MaxLineBytes})
	case scheme != "kafka":
		return nil, unserved("input", o.Input, scheme, "kafka://host:port/topic, or a file path or glob")
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

// markerDir is the directory, in the job's checkpoint directory, where the
// standard output sink keeps its markers.
const markerDir = "stdout-markers"

// output is the sink o.Output names.
func output(o Options, cc weir.CheckpointConfig) (func() weir.SinkWriter[Count], error) {
	scheme, isURL := file.URLScheme(o.Output)
	switch out := o.Output; {
	case out == "-":
		ck := strings.TrimPrefix(cc.Dir, "file://")
		if ck == "" {
			return nil, errors.New("output - (standard output, written at the barrier) keeps its markers beside the checkpoints: give a checkpoint directory")
		}
		if storage.IsURL(ck) {
			return nil, errors.New("output - (standard output, written at the barrier) keeps its markers in a local directory beside the checkpoints, and checkpoints in object storage are not in one: give a local checkpoint directory, or write the output to files or Kafka")
		}
		cfg := writeahead.Config[Count]{
			FS: o.FS, MarkerDir: o.FS.PathJoin(ck, "wordcount", markerDir),
			Write: func(_ context.Context, b writeahead.Batch[Count]) error {
				var buf []byte
				for _, c := range b.Records {
					buf = Format(buf, c)
				}
				_, err := os.Stdout.Write(buf)
				return err
			},
		}
		if r := strings.TrimPrefix(o.Restore, "file://"); r != "" && r != "latest" && !storage.IsURL(r) {
			// A checkpoint restored by its path may be in another job
			// directory, beside markers of its own (Config.FormerMarkerDirs).
			chk := filepath.Clean(r)
			if filepath.Base(chk) == "_metadata" {
				chk = filepath.Dir(chk)
			}
			cfg.FormerMarkerDirs = []string{o.FS.PathJoin(filepath.Dir(chk), markerDir)}
		}
		return writeahead.Sink(cfg)
	case !isURL:
		return file.Sink(file.SinkConfig[Count]{FS: o.FS, Dir: o.Output, Format: Format})
	case scheme == "kafka":
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
	case scheme == "postgres" || scheme == "postgresql":
		return postgresSink(out)
	}
	return nil, unserved("output", o.Output, scheme, "kafka://host:port/topic, postgres:// (or postgresql://) with ?table=, a local directory, or - (standard output)")
}

// unserved is the error of an input or output URL whose scheme the word
// count does not serve.
func unserved(what, s, scheme, served string) error {
	return fmt.Errorf("%s %s: the word count reads or writes no %s: URL; it takes %s (a local path that begins like a URL is written with ./ before it)",
		what, redacted(s), scheme, served)
}

// redacted is the URL s without its password, to be shown.
func redacted(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	if i := strings.IndexByte(s, ':'); i >= 0 {
		return s[:i] + ":…" // unparsed: only the scheme is safe to show
	}
	return s
}

func parseDuration(opt, v string) (d time.Duration, err error) {
	if d, err = time.ParseDuration(v); err != nil {
		return 0, fmt.Errorf("option %s=%q: %w", opt, v, err)
	}
	return d, nil
}

// PostgresOutput reads the word count's options (table, mode) off a
// PostgreSQL URL and returns the URL without them, for PostgreSQL. Its query
// is parsed strictly: "table=my;table" is an error, not the default table.
func PostgresOutput(raw string) (connURL, table string, mode postgres.Mode, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // ue.URL is raw, password and all
		}
		return "", "", 0, fmt.Errorf("postgres URL %s: %w", redacted(raw), err)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return "", "", 0, fmt.Errorf("postgres URL %s: options: %w (separate options with &, and write a literal ; as %%3B)", u.Redacted(), err)
	}
	for opt, vs := range q {
		if len(vs) > 1 {
			return "", "", 0, fmt.Errorf("postgres URL %s: option %s given %d times: give it once", u.Redacted(), opt, len(vs))
		}
	}
	table = "counts"
	if q.Has("table") {
		table = q.Get("table")
	}
	if err := checkTableName(table); err != nil {
		return "", "", 0, fmt.Errorf("postgres URL option table=%q: %w", table, err)
	}
	mode = postgres.ExactlyOnce
	if m := q.Get("mode"); m != "" {
		if mode, err = postgres.ParseMode(m); err != nil {
			return "", "", 0, err
		}
	}
	q.Del("table")
	q.Del("mode")
	u.RawQuery = q.Encode()
	return u.String(), table, mode, nil
}

// postgresSink is the sink a PostgreSQL URL names (PostgresOutput).
func postgresSink(raw string) (func() weir.SinkWriter[Count], error) {
	connURL, table, mode, err := PostgresOutput(raw)
	if err != nil {
		return nil, err
	}
	cfg := postgres.SinkConfig[Count]{URL: connURL, Table: table, Mode: mode, Columns: []string{"word", "count"},
		Row: func(c Count) []any { return []any{c.Word, c.Count} }}
	if mode == postgres.Upsert {
		cfg.Key = []string{"word"}
		cfg.CreateTable = "CREATE TABLE IF NOT EXISTS " + table + " (word text PRIMARY KEY, count bigint NOT NULL)"
	} else {
		cfg.CreateTable = "CREATE TABLE IF NOT EXISTS " + table + " (word text NOT NULL, count bigint NOT NULL)"
	}
	return postgres.Sink(cfg)
}

// maxIdentifierBytes is the longest identifier PostgreSQL keeps
// (NAMEDATALEN-1); it cuts longer ones short, so that two long names
// could be one table.
const maxIdentifierBytes = 63

// checkTableName checks a table name, table or schema.table, that
// PostgreSQL reads the same with and without quotes: lower-case ASCII
// letters, digits and '_', starting with a letter or '_', at most 63 bytes
// each, and not a reserved key word. NB: the sink's SQL names the table
// both ways (connector/postgres quotes it in some statements only), so a
// name that quoting changes — Counts, select — would be two tables or a
// syntax error.
func checkTableName(name string) error {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return errors.New("want a table name such as counts or schema.counts")
	}
	for _, p := range parts {
		switch {
		case p == "":
			return errors.New("want a table name such as counts or schema.counts")
		case len(p) > maxIdentifierBytes:
			return fmt.Errorf("%q is %d bytes: PostgreSQL keeps at most %d", p, len(p), maxIdentifierBytes)
		case '0' <= p[0] && p[0] <= '9':
			return fmt.Errorf("%q starts with a digit: start with a letter or _", p)
		case reservedWords[p]:
			return fmt.Errorf("%q is a reserved key word of PostgreSQL's: choose another name", p)
		}
		for _, c := range []byte(p) {
			switch {
			case 'A' <= c && c <= 'Z':
				return fmt.Errorf("%q has upper case: PostgreSQL folds unquoted names to lower case, and Weir takes names as written; give it in lower case (%s)", p, strings.ToLower(name))
			case !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_'):
				return fmt.Errorf("character %q: a table name takes only a-z, 0-9 and _ (and one . after a schema)", c)
			}
		}
	}
	return nil
}

// reservedWords are PostgreSQL's key words that cannot name a table
// without quotes (pg_get_keywords() catcode R and T, PostgreSQL 14 to 18;
// TestReservedWordsArePostgreSQLs compares them with the server's).
var reservedWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`
		all analyse analyze and any array as asc asymmetric authorization binary both case cast check
		collate collation column concurrently constraint create cross current_catalog current_date
		current_role current_schema current_time current_timestamp current_user default deferrable
		desc distinct do else end except false fetch for foreign freeze from full grant group having
		ilike in initially inner intersect into is isnull join lateral leading left like limit
		localtime localtimestamp natural not notnull null offset on only or order outer overlaps
		placing primary references returning right select session_user similar some symmetric
		system_user table tablesample then to trailing true union unique user using variadic verbose
		when where window with`) {
		m[w] = true
	}
	return m
}()
