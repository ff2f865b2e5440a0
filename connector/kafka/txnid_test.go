package kafka

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/idpart"
	"github.com/weirstream/weir/operator"
	"github.com/weirstream/weir/operator/operatortest"
	"github.com/weirstream/weir/state"
)

// TestTxnIDPrefixesAreUnambiguous: no two (job, UID) pairs get one default
// prefix, over every pair of names up to three characters of an alphabet
// of the separators, and long or unprintable names. Since an id is its
// prefix and exactly two decimal numbers (parseTxnID), distinct prefixes
// mean distinct ids. The first format is checked to collide, so that the
// test can fail.
func TestTxnIDPrefixesAreUnambiguous(t *testing.T) {
	names := []string{""}
	for n, from := 0, 0; n < 3; n++ {
		to := len(names)
		for _, s := range names[from:to] {
			for _, c := range []string{"a", "-", "1", ".", "#"} {
				names = append(names, s+c)
			}
		}
		from = to
	}
	long := strings.Repeat("x", idpart.MaxBytes)
	names = append(names, long, long+"x", long+"y", "a\nb", "a\x00", "\xff")
	seen, legacy := map[string][2]string{}, map[string][2]string{}
	legacyCollisions := 0
	for _, job := range names {
		for _, uid := range names {
			p := txnIDPrefix(job, uid)
			if other, ok := seen[p]; ok {
				t.Fatalf("job %q UID %q and job %q UID %q share the prefix %q", job, uid, other[0], other[1], p)
			}
			seen[p] = [2]string{job, uid}
			old, _ := legacyTxnIDPrefix(job, uid)
			if _, ok := legacy[old]; ok {
				legacyCollisions++
			}
			legacy[old] = [2]string{job, uid}
		}
	}
	if legacyCollisions == 0 {
		t.Fatal("the names never collide under the first format: the test does not test")
	}
	if a, b := txnIDPrefix("word-count", "out"), txnIDPrefix("word", "count-out"); a != "weir2-10.word-count-3.out" || b != "weir2-4.word-9.count-out" {
		t.Fatalf("prefixes %q and %q", a, b)
	}
	if p := txnIDPrefix(long+"x", "u"); len(p) != len("weir2-#")+32+len("-1.u") {
		t.Fatalf("a long job name is not hashed: %q", p)
	}
}

// TestListingMatchesOnlyTheSinksIDs: the listing of a sink's open
// transactions (parseTxnID, and the pattern sent to the broker) takes only
// ids of exactly the sink's form, <prefix>-<decimal>-<decimal>, for a
// default prefix and for one the user set.
func TestListingMatchesOnlyTheSinksIDs(t *testing.T) {
	wc, w := txnIDPrefix("word-count", "out"), txnIDPrefix("word", "count-out")
	for _, c := range []struct {
		prefix, id string
		sub        int // -1: not the sink's
	}{
		{"weir-a-b", "weir-a-b-1-3", 1},
		{"weir-a-b", "weir-a-b-1-3-0", -1}, // job a, UID b-1
		{"weir-a-b", "weir-a-b-0-0", 0},
		{"p", "p-12-7", 12},
		{"p", "p-01-0", -1},
		{"p", "p-1-00", -1},
		{"p", "p-+1-0", -1},
		{"p", "p-1-+0", -1},
		{"p", "p-1--1", -1},
		{"p", "p--1-1", -1},
		{"p", "p-1-0x", -1},
		{"p", "p-1- 0", -1},
		{"p", "p-1", -1},
		{"p", "p-1-", -1},
		{"p", "p--", -1},
		{"p", "p-99999999999999999999-0", -1},
		{"p", "q-1-0", -1},
		{"p", "pp-1-0", -1},
		{"p.x", "pax-1-0", -1}, // the pattern quotes the prefix
		{wc, wc + "-0-2", 0},
		{wc, w + "-0-2", -1},
		{w, wc + "-0-2", -1},
		{wc, "weir-word-count-out-0-2", -1},
	} {
		sub, ok := parseTxnID(c.prefix, c.id)
		if !ok {
			sub = -1
		}
		if sub != c.sub {
			t.Errorf("parseTxnID(%q, %q) = %d, %v; want subtask %d (-1: not the sink's)", c.prefix, c.id, sub, ok, c.sub)
		}
		re := regexp.MustCompile(txnIDPattern(c.prefix))
		if re.MatchString(c.id) != (c.sub >= 0) && !strings.Contains(c.id, "99999999999999999999") {
			t.Errorf("the pattern %s matches %q: %v, want %v", re, c.id, !(c.sub >= 0), c.sub >= 0)
		}
	}
	re := regexp.MustCompile(txnIDPattern(wc, "weir-word-count-out"))
	for id, want := range map[string]bool{wc + "-1-0": true, "weir-word-count-out-1-0": true, w + "-1-0": false, "weir-word-count-out-1-0-0": false} {
		if re.MatchString(id) != want {
			t.Errorf("the pattern of two prefixes %s matches %q: %v, want %v", re, id, !want, want)
		}
	}
}

// sinkJob is a job of one sink in the tests below.
type sinkJob struct {
	name, uid, topic string
	run              *operatortest.Run
	subs             []weir.SinkWriter[string]
	want             []string // committed once each
	handles          []checkpoint.Handle
}

// open opens the job's sink at parallelism p, from r if set.
func (j *sinkJob) open(t *testing.T, brokers []string, p int, r *operator.Restore) {
	t.Helper()
	newSink, err := Sink(SinkConfig[string]{Brokers: brokers, Topic: j.topic, Encode: encode, TransactionalIDs: 3})
	if err != nil {
		t.Fatal(err)
	}
	j.run, j.subs = &operatortest.Run{}, nil
	for sub := range p {
		ctx := j.run.Context(j.uid, sub, p, r)
		ctx.Job = j.name
		s := newSink()
		if err := s.Open(ctx); err != nil {
			t.Fatalf("job %s, sink %s, subtask %d: open: %v", j.name, j.uid, sub, err)
		}
		j.subs = append(j.subs, s)
	}
}

// write writes one record through each subtask.
func (j *sinkJob) write(t *testing.T, what string) {
	t.Helper()
	for sub, s := range j.subs {
		v := fmt.Sprintf("%s/%s/%d", j.name, what, sub)
		if err := s.Write(v); err != nil {
			t.Fatalf("job %s: write %s: %v", j.name, v, err)
		}
		j.want = append(j.want, v)
	}
}

// snapshot takes checkpoint id of every subtask, keeping its handles.
func (j *sinkJob) snapshot(t *testing.T, id checkpoint.ID, w *operatortest.MemWriter) {
	t.Helper()
	j.handles = nil
	for sub, s := range j.subs {
		async, err := s.Snapshot(id)
		if err == nil {
			var hs []checkpoint.Handle
			hs, err = async(w)
			j.handles = append(j.handles, hs...)
		}
		if err != nil {
			t.Fatalf("job %s, subtask %d: checkpoint %d: %v", j.name, sub, id, err)
		}
	}
}

func (j *sinkJob) complete(t *testing.T, id checkpoint.ID) {
	t.Helper()
	for sub, s := range j.subs {
		if err := s.NotifyComplete(id); err != nil {
			t.Fatalf("job %s, subtask %d: commit checkpoint %d: %v", j.name, sub, id, err)
		}
	}
}

// kill drops the run, as kill -9 would (no Finish, no commit, no abort).
func (j *sinkJob) kill() {
	for _, s := range j.subs {
		s.Close()
	}
	if j.run != nil {
		j.run.Close()
	}
	j.subs, j.run = nil, nil
}

// wantTopic waits until topic holds exactly want read_committed, each once,
// and checks that no transaction holds its readers back.
func wantTopic(t *testing.T, brokers []string, topic, when string, want []string) {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	got := consumeWhen(t, brokers, topic, func(got []string) bool { return slices.Equal(got, want) })
	if !slices.Equal(got, want) {
		t.Fatalf("%s: topic %s holds read_committed %d records %v, want the %d %v once each", when, topic, len(got), got, len(want), want)
	}
	if stalled(t, brokers, topic) {
		t.Fatalf("%s: a transaction holds read_committed consumers of %s back", when, topic)
	}
}

// TestTwoJobsWhoseNamesShareTheOldPrefixDoNotFenceEachOther (issue 19,
// leftover 2 of the last session): job "word-count" with sink "out" and
// job "word" with sink "count-out" write exactly once into one cluster at
// once, through checkpoints, a kill and a restore. Under the first id
// format both used the ids weir-word-count-out-<s>-<k>: each start
// initialised the other's ids and fenced its transactions (records lost,
// a permanent error).
func TestTwoJobsWhoseNamesShareTheOldPrefixDoNotFenceEachOther(t *testing.T) {
	brokers := broker(t, "counts", "words")
	w := &operatortest.MemWriter{}
	jobs := []*sinkJob{{name: "word-count", uid: "out", topic: "counts"}, {name: "word", uid: "count-out", topic: "words"}}
	for _, j := range jobs {
		j.open(t, brokers, 2, nil)
		defer func() { j.kill() }()
	}
	for id := checkpoint.ID(1); id <= 3; id++ {
		for _, j := range jobs {
			j.write(t, fmt.Sprint(id))
		}
		for _, j := range jobs {
			j.snapshot(t, id, w)
		}
		for _, j := range jobs {
			j.complete(t, id)
		}
	}
	// word-count dies with a transaction open and is restored from
	// checkpoint 3 at parallelism 1, while word writes on.
	a, b := jobs[0], jobs[1]
	hs := a.handles
	a.write(t, "lost")
	a.want = a.want[:len(a.want)-2]
	a.snapshot(t, 4, w) // flushed; checkpoint 4 never completes
	a.kill()
	b.write(t, "4")
	a.open(t, brokers, 1, &operator.Restore{Checkpoint: 3, Handles: hs, Read: w.Read})
	a.write(t, "5")
	for _, j := range jobs {
		j.snapshot(t, 5, w)
	}
	for _, j := range jobs {
		j.complete(t, 5)
	}
	for _, j := range jobs {
		wantTopic(t, brokers, j.topic, "job "+j.name, j.want)
	}
	if open := ongoing(t, brokers); len(open) > 0 {
		t.Fatalf("transactions still open: %v", open)
	}
}

// oldTxn writes values under the transactional id id in a transaction it
// leaves open (flushed, as a dead run would), and returns the record a
// checkpoint of Weir before txnIDVersion made of it, as JSON.
func oldTxn(t *testing.T, brokers []string, id string, at checkpoint.ID, sub int, values ...string) []byte {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("out"), kgo.TransactionalID(id), transactionVersion1())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close() // leaves the transaction open
	ctx := context.Background()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	var first *kgo.Record
	for _, v := range values {
		r, err := cl.ProduceSync(ctx, kgo.StringRecord(v)).First()
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = r
		}
	}
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Appendf(nil, `{"txn":{"id":%q,"pid":%d,"epoch":%d,"at":%d,"sub":%d,"mark":{"topic":"out","partition":%d,"offset":%d}}}`,
		id, pid, epoch, at, sub, first.Partition, first.Offset)
}

// TestSinkRestoresACheckpointOfTheOldIDFormat: a checkpoint written by Weir
// before txnIDVersion (its state written here by hand, as that version
// wrote it) records a pre-committed transaction under an id of the first
// format, weir-word-count-out-0-0; that run also left transactions open
// under weir-word-count-out-0-1 (in its pool) and
// weir-word-count-out-1-0 (a failed rescale, beyond the pool). The restore
// commits the first, aborts the others (that prefix is not this sink's
// alone, but the checkpoint says the sink used it) and writes under ids of
// the new format; the new checkpoint records the new format; restoring the
// old checkpoint a second time works too.
func TestSinkRestoresACheckpointOfTheOldIDFormat(t *testing.T) {
	brokers := broker(t, "out")
	w := &operatortest.MemWriter{}
	items := [][]byte{
		[]byte(`{"pool":{"sub":0,"parallelism":1,"size":3}}`),
		oldTxn(t, brokers, "weir-word-count-out-0-0", 1, 0, "pending1", "pending2"),
	}
	oldTxn(t, brokers, "weir-word-count-out-0-1", 0, 0, "open")
	oldTxn(t, brokers, "weir-word-count-out-1-0", 0, 1, "rescaled")
	if !stalled(t, brokers, "out") {
		t.Fatal("no transaction open: the test does not test the abort")
	}
	run := &operatortest.Run{}
	hs, err := run.Context("out", 0, 1, nil).SnapshotList(state.Union, "txns", items)(w)
	run.Close()
	if err != nil {
		t.Fatal(err)
	}
	old := &operator.Restore{Checkpoint: 1, Handles: hs, Read: w.Read}

	j := &sinkJob{name: "word-count", uid: "out", topic: "out", want: []string{"pending1", "pending2"}}
	j.open(t, brokers, 1, old)
	defer func() { j.kill() }()
	wantTopic(t, brokers, "out", "after the restore of the old checkpoint", j.want)
	if open := ongoing(t, brokers); len(open) > 0 {
		t.Fatalf("after the restore of the old checkpoint, transactions still open: %v", open)
	}
	j.write(t, "new")
	j.snapshot(t, 2, w)
	prefix := txnIDPrefix("word-count", "out") + "-0-"
	if open := ongoing(t, brokers); len(open) != 1 || !strings.HasPrefix(open[0], prefix) {
		t.Fatalf("the restored run writes under %v, want one id %s<k>", open, prefix)
	}
	j.complete(t, 2)
	wantTopic(t, brokers, "out", "after checkpoint 2", j.want)

	// Checkpoint 2 records the new format: its restore touches no old id
	// (an old-format transaction open now is another's: job "word" with
	// sink "count-out" of the old version).
	oldTxn(t, brokers, "weir-word-count-out-0-2", 0, 0, "other")
	j.kill()
	j.open(t, brokers, 1, &operator.Restore{Checkpoint: 2, Handles: j.handles, Read: w.Read})
	if open := ongoing(t, brokers); !slices.Equal(open, []string{"weir-word-count-out-0-2"}) {
		t.Fatalf("after the restore of checkpoint 2, open transactions %v, want only the other sink's weir-word-count-out-0-2", open)
	}
	j.kill()

	// The old checkpoint again, as a savepoint is restored again: its
	// transaction is committed already, and what is open under its old
	// ids is aborted.
	j.open(t, brokers, 1, old)
	wantTopic(t, brokers, "out", "after restoring the old checkpoint again", j.want)
	if open := ongoing(t, brokers); len(open) > 0 {
		t.Fatalf("after restoring the old checkpoint again, transactions still open: %v", open)
	}
}

// TestSinkAbortsOldFormatIDsThatAreItsAlone: a start without a restore
// aborts what a run of the old version left open under the sink's
// old-format ids when neither name holds a '-' (the ids are then its
// alone), as that version's start did; it leaves those of a prefix other
// sinks may share alone.
func TestSinkAbortsOldFormatIDsThatAreItsAlone(t *testing.T) {
	brokers := broker(t, "out")
	oldTxn(t, brokers, "weir-wc-out-0-1", 0, 0, "mine")
	oldTxn(t, brokers, "weir-word-count-out-0-1", 0, 0, "shared")
	for _, j := range []*sinkJob{{name: "wc", uid: "out", topic: "out"}, {name: "word", uid: "count-out", topic: "out"}} {
		j.open(t, brokers, 1, nil)
		j.kill()
	}
	if open := ongoing(t, brokers); !slices.Equal(open, []string{"weir-word-count-out-0-1"}) {
		t.Fatalf("open transactions %v, want only weir-word-count-out-0-1", open)
	}
}

// FuzzTxnIDs: two sinks' default prefixes are equal only for equal names,
// and the listing of one (parseTxnID and the pattern) takes an id of the
// other only then.
func FuzzTxnIDs(f *testing.F) {
	f.Add("word-count", "out", "word", "count-out", uint16(0), uint16(2))
	f.Add("a", "b-1", "a", "b", uint16(1), uint16(3))
	f.Add("a:b", "c", "a", "b:c", uint16(3), uint16(0))
	f.Add(strings.Repeat("x", 70), "1.a", "x", "", uint16(10), uint16(7))
	f.Fuzz(func(t *testing.T, job1, uid1, job2, uid2 string, sub, k uint16) {
		p1, p2 := txnIDPrefix(job1, uid1), txnIDPrefix(job2, uid2)
		same := job1 == job2 && uid1 == uid2
		if (p1 == p2) != same {
			t.Fatalf("job %q UID %q: %q; job %q UID %q: %q", job1, uid1, p1, job2, uid2, p2)
		}
		id := formatTxnID(p2, int(sub), int(k))
		got, ok := parseTxnID(p1, id)
		if ok != same || ok && got != int(sub) {
			t.Fatalf("the listing of %q takes %q: subtask %d, %v", p1, id, got, ok)
		}
		if regexp.MustCompile(txnIDPattern(p1)).MatchString(id) != same {
			t.Fatalf("the pattern of %q matches %q: %v", p1, id, !same)
		}
	})
}
