package kafka

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/weirstream/weir/internal/idpart"
)

// A sink's transactional ids are <prefix>-<subtask>-<k>, k below
// TransactionalIDs, both decimal. The default prefix names the job and the
// operator UID:
//
//	weir2-<job>-<uid>
//
// where <job> and <uid> are each written by idpart.Of (as the PostgreSQL
// sink writes its gids): <length in bytes>.<text>, or #<32 hex digits of its
// SHA-256> when the text is longer than idpart.MaxBytes or not printable
// UTF-8. The length makes the prefixes of two sinks differ
// whatever their names hold: job "word-count" with UID "out" is
// weir2-10.word-count-3.out, job "word" with UID "count-out" is
// weir2-4.word-9.count-out. And since an id ends in exactly two decimal
// numbers after its prefix, no id of one prefix is an id of another. (The
// first format, weir-<job>-<uid>, gave those two sinks one prefix: each
// start initialised the other's ids and fenced its commits, issue 19.)
const txnIDVersion = "weir2-"

// txnIDFormat is the format of the ids the sink writes, recorded in its
// state (pool.IDs) so that a restore knows which ids an earlier run used:
// 0 (absent, checkpoints of Weir before it) is weir-<job>-<uid>-<s>-<k>,
// 2 is txnIDVersion's.
const txnIDFormat = 2

// NB: with idpart.MaxBytes, the longest id is len("weir2-") +
// 2*len("64.<64 bytes>-") + two numbers, well within what brokers keep.
// txnIDPrefix is the default prefix of the ids of the sink of operator uid
// in job.
func txnIDPrefix(job, uid string) string {
	return txnIDVersion + idpart.Of(job) + "-" + idpart.Of(uid)
}

// legacyTxnIDPrefix is the default prefix of Weir before txnIDVersion,
// weir-<job>-<uid>. alone reports whether it is this sink's alone: when
// neither job nor uid holds a '-', an id weir-<job>-<uid>-<s>-<k> splits
// into exactly five parts at its dashes, which no other job and UID give.
// Otherwise job "word-count" with UID "out" shares it with job "word" and
// UID "count-out".
func legacyTxnIDPrefix(job, uid string) (prefix string, alone bool) {
	return "weir-" + job + "-" + uid, !strings.Contains(job, "-") && !strings.Contains(uid, "-")
}

// formatTxnID is the id k of subtask sub under prefix.
func formatTxnID(prefix string, sub, k int) string {
	return prefix + "-" + strconv.Itoa(sub) + "-" + strconv.Itoa(k)
}

// parseTxnID reads the subtask of an id under prefix. It accepts only what
// formatTxnID writes (two decimal numbers without sign or leading zeros),
// so that an id of another prefix is never taken for one of this prefix.
func parseTxnID(prefix, id string) (sub int, ok bool) {
	rest, ok := strings.CutPrefix(id, prefix+"-")
	if !ok {
		return 0, false
	}
	s, k, ok := strings.Cut(rest, "-")
	if !ok || !decimal(s) || !decimal(k) {
		return 0, false
	}
	sub, err := strconv.Atoi(s)
	if err != nil { // beyond an int: never written
		return 0, false
	}
	return sub, true
}

// decimal reports whether s is a number as strconv.Itoa writes a
// non-negative one.
func decimal(s string) bool {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// txnIDPattern is the regular expression (RE2 and Java alike) of the ids
// under any of prefixes, for ListTransactions. Brokers before Kafka 4.1
// ignore it: the listing is matched with parseTxnID anyway.
func txnIDPattern(prefixes ...string) string {
	quoted := make([]string, len(prefixes))
	for i, p := range prefixes {
		quoted[i] = regexp.QuoteMeta(p)
	}
	return "^(?:" + strings.Join(quoted, "|") + ")-(?:0|[1-9][0-9]*)-(?:0|[1-9][0-9]*)$"
}
