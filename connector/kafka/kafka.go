// Package kafka reads and writes Apache Kafka topics, on franz-go.
//
// The source reads partitions as splits: each partition's next offset is
// checkpointed operator state, restored exactly and redistributed when the
// job restores at another parallelism (when retention has deleted records
// a restored checkpoint had not read, it says so in a warning and goes on
// from the log's start, as Kafka's consumer resets). It reads read_committed by default,
// so it sees only what exactly-once producers (another Weir job among them)
// committed; it can stop at the offsets that were the latest when the job
// first started (bounded), and it finds partitions and topics created while
// it runs.
//
// The sink writes exactly-once with Kafka transactions as its two-phase
// commit: records go into a transaction that is flushed (pre-committed) at
// a checkpoint's snapshot and committed when the checkpoint completes. On
// restore it first commits the transactions the checkpoint recorded, by
// their producer id and epoch, then aborts every other transaction its
// transactional ids left open, so read_committed consumers never stall on
// them. It can also write at least once (flush at every snapshot) or without
// guarantees.
//
// With a run's first output, in the same transaction, the sink writes an
// ownership record (topic, job, sink UID) into the compacted OwnersTopic. A
// later run of the job that neither restores nor starts over finds it and is
// refused (ErrEarlierOutput) rather than add a second copy; one that starts
// over writes after the earlier output, which Kafka cannot delete for one
// writer alone.
//
// Both take a Config struct, validated when built (brokers reachable,
// topics present) and again when the job starts (transaction timeouts
// against the job's checkpoint settings). ParseURL reads the
// kafka://host:port/topic form the CLI takes.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/operator"
)

// DefaultTimeout bounds the requests made when a source or sink is built or
// opened.
const DefaultTimeout = 10 * time.Second

// URL is what a kafka:// URL says:
//
//	kafka://host:port[,host:port...]/topic[,topic...][?option=value&...]
//
// Options: bounded=true, start=earliest|latest|committed|<RFC 3339 time>,
// group=<consumer group>, regex=<topic regex> (instead of topics),
// delivery=exactly-once|at-least-once|none, txn-prefix=<prefix>,
// txn-timeout=<duration>, create=true (create a missing topic),
// partitions=<n> (of a created topic).
type URL struct {
	Brokers []string
	Topics  []string
	Query   url.Values
}

var urlOptions = []string{"bounded", "start", "group", "regex", "delivery", "txn-prefix", "txn-timeout", "create", "partitions", "skip-invalid"}

// ParseURL parses a kafka:// URL (the scheme in any case, as URL schemes
// are). Its query is parsed strictly: a malformed query (a ';' among the
// options), an unknown option or one given twice is an error, and so are
// credentials, a fragment, an empty broker and a topic name Kafka would
// refuse.
func ParseURL(s string) (URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return URL{}, fmt.Errorf("kafka URL %q: %w", s, err)
	}
	// url.Parse lower-cases the scheme.
	if u.Scheme != "kafka" || u.Host == "" {
		return URL{}, fmt.Errorf("kafka URL %q: want kafka://host:port/topic", s)
	}
	switch {
	case u.User != nil:
		return URL{}, fmt.Errorf("kafka URL %q: credentials in the URL are not supported", s)
	case strings.Contains(s, "#"): // url.Parse cuts the fragment at the first #
		return URL{}, fmt.Errorf("kafka URL %q: a fragment (#...) means nothing here: remove it, or write # as %%23 in an option", s)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return URL{}, fmt.Errorf("kafka URL %q: options: %w (separate options with &, and write a literal ; as %%3B)", s, err)
	}
	k := URL{Brokers: strings.Split(u.Host, ","), Query: q}
	for _, b := range k.Brokers {
		if err := checkBroker(b); err != nil {
			return URL{}, fmt.Errorf("kafka URL %q: broker %q: %w", s, b, err)
		}
	}
	if t := strings.Trim(u.Path, "/"); t != "" {
		k.Topics = strings.Split(t, ",")
	}
	for _, t := range k.Topics {
		if err := checkTopicName(t); err != nil {
			return URL{}, fmt.Errorf("kafka URL %q: topic %q: %w", s, t, err)
		}
	}
	for opt, vs := range k.Query {
		if !slices.Contains(urlOptions, opt) {
			return URL{}, fmt.Errorf("kafka URL %q: unknown option %q (known: %s)", s, opt, strings.Join(urlOptions, ", "))
		}
		if len(vs) > 1 {
			return URL{}, fmt.Errorf("kafka URL %q: option %s given %d times: give it once", s, opt, len(vs))
		}
	}
	if len(k.Topics) == 0 && k.Query.Get("regex") == "" {
		return URL{}, fmt.Errorf("kafka URL %q: no topic: want kafka://host:port/topic (or ?regex=...)", s)
	}
	return k, nil
}

// checkBroker checks a broker's address: a host, and a port if given
// (franz-go's default is 9092).
func checkBroker(b string) error {
	host, port := b, ""
	if strings.Contains(b, ":") {
		var err error
		if host, port, err = net.SplitHostPort(b); err != nil {
			return fmt.Errorf("want host:port: %w", err)
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return fmt.Errorf("port %q: want a number from 1 to 65535", port)
		}
	}
	if host == "" {
		return errors.New("no host: separate brokers with one comma (host1:9092,host2:9092)")
	}
	return nil
}

// maxTopicNameBytes is the longest topic name Kafka takes.
const maxTopicNameBytes = 249

// checkTopicName checks a topic name as Kafka does: 1 to 249 of the
// characters a-z, A-Z, 0-9, '.', '_' and '-', and neither "." nor "..".
func checkTopicName(t string) error {
	switch {
	case t == "":
		return errors.New("empty name: separate topics with one comma (a,b)")
	case t == "." || t == "..":
		return errors.New(`Kafka refuses "." and ".." as topic names`)
	case len(t) > maxTopicNameBytes:
		return fmt.Errorf("%d characters: Kafka takes at most %d", len(t), maxTopicNameBytes)
	}
	for _, c := range []byte(t) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("character %q: Kafka topic names take only a-z, A-Z, 0-9, '.', '_' and '-'", c)
		}
	}
	return nil
}

// Bool reads a boolean option (default false).
func (k URL) Bool(opt string) (bool, error) {
	v := k.Query.Get(opt)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("kafka URL option %s=%q: want true or false", opt, v)
	}
	return b, nil
}

// client builds a franz-go client; every error names the brokers.
func client(brokers []string, extra []kgo.Opt, opts ...kgo.Opt) (*kgo.Client, error) {
	cl, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, extra...), opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka %s: %w", strings.Join(brokers, ","), err)
	}
	return cl, nil
}

// closeConsumer closes a client that consumes parts (topic → partitions).
// It stops consuming them first: franz-go's Close (v1.22.3) reads a
// broker's fetch session while a fetch that its metadata loop started may
// still write it (a data race CI's race detector found;
// TestCloseConsumerWhileFetching). RemoveConsumePartitions waits for the
// fetches in flight, and a metadata update after it has nothing to fetch.
// Not PurgeTopicsFromConsuming, which waits for the metadata loop: about
// 30 s when a broker stops answering (TestCloseConsumerWhileMetadataHangs).
func closeConsumer(cl *kgo.Client, parts map[string][]int32) {
	cl.RemoveConsumePartitions(parts)
	cl.Close()
}

// partitionsAt is the topics and partitions of offsets.
func partitionsAt(offsets map[string]map[int32]kgo.Offset) map[string][]int32 {
	out := map[string][]int32{}
	for topic, ps := range offsets {
		out[topic] = slices.Collect(maps.Keys(ps))
	}
	return out
}

// checkTopics checks at start that the brokers answer and that the topics
// exist; create makes missing ones with partitions partitions instead.
func checkTopics(ctx context.Context, adm *kadm.Client, brokers, topics []string, create bool, partitions int32) error {
	details, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return fmt.Errorf("kafka %s: cannot reach the brokers: %w", strings.Join(brokers, ","), err)
	}
	var missing []string
	for _, t := range topics {
		if d, ok := details[t]; !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			missing = append(missing, t)
		} else if d.Err != nil {
			return fmt.Errorf("kafka topic %s: %w", t, d.Err)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if !create {
		return fmt.Errorf("kafka topic %s does not exist on %s: create it, or ask for it to be created (create=true in the URL, CreateTopic in the config)",
			strings.Join(missing, ", "), strings.Join(brokers, ","))
	}
	resp, err := adm.CreateTopics(ctx, partitions, -1, nil, missing...)
	if err != nil {
		return fmt.Errorf("kafka: create topics %s: %w", strings.Join(missing, ", "), err)
	}
	for _, r := range resp {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("kafka: create topic %s: %w", r.Topic, r.Err)
		}
	}
	return nil
}

// owner is the subtask of p that reads a partition no checkpoint assigns:
// spread like Flink's Kafka source spreads them, so that every subtask
// agrees without talking to the others.
func owner(topic string, partition int32, p int) int {
	h := fnv.New32a()
	h.Write([]byte(topic))
	start := int(h.Sum32()&0x7fffffff) % p
	return (start + int(partition)) % p
}

// fatal wraps produce and fetch errors a restart cannot fix, saying what to
// do; others are returned as they are, to be retried by a restart.
func fatal(what string, err error) error {
	switch {
	case errors.Is(err, kerr.ProducerFenced), errors.Is(err, kerr.InvalidProducerEpoch):
		return operator.Permanent(fmt.Errorf("%s: %w: another producer took over this transactional id: is another job, or another run of this one, writing with the same transactional id prefix?", what, err))
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.TransactionalIDAuthorizationFailed),
		errors.Is(err, kerr.ClusterAuthorizationFailed), errors.Is(err, kerr.GroupAuthorizationFailed):
		return operator.Permanent(fmt.Errorf("%s: %w: grant the job's principal access (ACLs), or check its credentials", what, err))
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return operator.Permanent(fmt.Errorf("%s: %w: raise the topic's max.message.bytes (and the producer's max record batch bytes), or write smaller records", what, err))
	}
	return fmt.Errorf("%s: %w", what, err)
}
