package postgres

import (
	"strconv"
	"strings"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/idpart"
)

// A prepared transaction's global id (gid) names the job, the operator UID,
// the subtask, the checkpoint and the attempt that prepared it:
//
//	weir2:<job>:<uid>:<subtask>:<checkpoint>:<attempt>
//
// where <job> and <uid> are each written by idpart.Of: <length in
// bytes>.<text>, or #<32 hex digits of its SHA-256> when the text is longer
// than idpart.MaxBytes or not printable UTF-8. The length makes the ids of
// two sinks differ whatever their names hold: job "a:b" with UID "c" is
// weir2:3.a:b:1.c:…, job "a" with UID "b:c" is weir2:1.a:3.b:c:…, and
// neither is a prefix of the other. (The first format, weir:<job>:<uid>:…,
// gave these two one prefix, and each start rolled back the other's
// transactions.) <attempt> is the subtask's session (attemptTag): a
// checkpoint id can come again after a restore of an older checkpoint
// (storage reserves ids after the highest it holds), and a gid must name one
// transaction only, for a rolled-back gid (rolledBackTable) to say nothing of
// a later transaction. Weir before the attempt wrote weir2 gids without it;
// they are still read.
const gidVersion = "weir2:"

// maxGIDBytes is PostgreSQL's bound on a prepared transaction's id (GIDSIZE,
// 200 bytes with the terminating NUL).
const maxGIDBytes = 199

// NB: idpart.MaxBytes keeps every gid within maxGIDBytes: the longest is len("weir2:") + 2*len("64.<64 bytes>:") + len("<subtask, below
// 2^15>:<checkpoint, below 2^64>:<attempt>") = 6 + 2*68 + 5+1+20+1+19 = 188
// bytes (attemptTag: 6 and 12 base-36 digits and a dot).

// gidPrefix is the prefix of the gids of the sink of operator uid in job.
func gidPrefix(job, uid string) string {
	return gidVersion + idpart.Of(job) + ":" + idpart.Of(uid) + ":"
}

// formatGID is the id of subtask sub's transaction of checkpoint id,
// prepared by the attempt attemptTag names.
func formatGID(prefix string, sub int, id checkpoint.ID, attempt string) string {
	return prefix + strconv.Itoa(sub) + ":" + strconv.FormatUint(uint64(id), 10) + ":" + attempt
}

// attemptTag names a subtask's attempt by its session, which no other
// session of the server shares: the backend's pid and start time (µs since
// 1970), each in base 36, joined by a dot.
func attemptTag(pid int32, start time.Time) string {
	return strconv.FormatInt(int64(pid), 36) + "." + strconv.FormatInt(start.UnixMicro(), 36)
}

// parseGID reads subtask and checkpoint from a gid that starts with prefix.
// It accepts only what formatGID writes (decimal numbers without sign or
// leading zeros, then an attempt tag of base-36 digits and a dot), or the
// same without the tag (Weir before it; and the legacy format, which never
// had one), so a gid of another sink is never taken for one of this one's.
func parseGID(prefix, gid string) (int, checkpoint.ID, bool) {
	rest, ok := strings.CutPrefix(gid, prefix)
	if !ok {
		return 0, 0, false
	}
	subStr, idStr, ok := strings.Cut(rest, ":")
	if !ok {
		return 0, 0, false
	}
	if idStr, tag, tagged := strings.Cut(idStr, ":"); tagged {
		if !strings.HasPrefix(prefix, gidVersion) || !validTag(tag) {
			return 0, 0, false
		}
		return parseGID(prefix, prefix+subStr+":"+idStr)
	}
	sub, err1 := strconv.Atoi(subStr)
	id, err2 := strconv.ParseUint(idStr, 10, 64)
	if err1 != nil || err2 != nil || sub < 0 || strconv.Itoa(sub) != subStr || strconv.FormatUint(id, 10) != idStr {
		return 0, 0, false
	}
	return sub, checkpoint.ID(id), true
}

// validTag reports whether tag is what attemptTag writes: two non-empty
// runs of base-36 digits, joined by a dot.
func validTag(tag string) bool {
	a, b, ok := strings.Cut(tag, ".")
	return ok && base36(a) && base36(b)
}

func base36(s string) bool {
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'z') {
			return false
		}
	}
	return s != "" && len(s) <= 13
}

// legacyPrefix is the prefix of the gids Weir wrote before gidVersion,
// weir:<job>:<uid>:, when it is this sink's alone: when neither job nor uid
// holds a colon, a gid weir:<job>:<uid>:<n>:<n> splits into exactly five
// parts at its colons, which no other job and UID give. Otherwise it is ""
// (another sink may own the gids that start with it). A start rolls back
// what an attempt of an older Weir prepared and no checkpoint recorded.
func legacyPrefix(job, uid string) string {
	if strings.Contains(job, ":") || strings.Contains(uid, ":") {
		return ""
	}
	return "weir:" + job + ":" + uid + ":"
}
