package postgres

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/weirstream/weir/checkpoint"
)

// A prepared transaction's global id (gid) names the job, the operator UID,
// the subtask and the checkpoint:
//
//	weir2:<job>:<uid>:<subtask>:<checkpoint>
//
// where <job> and <uid> are each written as <length in bytes>.<text>, or as
// #<32 hex digits of its SHA-256> when the text is longer than
// maxGIDComponentBytes or not printable UTF-8. The length makes the ids of
// two sinks differ whatever their names hold: job "a:b" with UID "c" is
// weir2:3.a:b:1.c:…, job "a" with UID "b:c" is weir2:1.a:3.b:c:…, and
// neither is a prefix of the other. (The first format, weir:<job>:<uid>:…,
// gave these two one prefix, and each start rolled back the other's
// transactions.)
const gidVersion = "weir2:"

// maxGIDBytes is PostgreSQL's bound on a prepared transaction's id (GIDSIZE,
// 200 bytes with the terminating NUL).
const maxGIDBytes = 199

// maxGIDComponentBytes bounds a job name or UID as written into a gid; a
// longer one is hashed. NB: it keeps every gid within maxGIDBytes: the
// longest is len("weir2:") + 2*len("64.<64 bytes>:") + len("<subtask, below
// 2^15>:<checkpoint, below 2^64>") = 6 + 2*68 + 5+1+20 = 168 bytes.
const maxGIDComponentBytes = 64

// gidPrefix is the prefix of the gids of the sink of operator uid in job.
func gidPrefix(job, uid string) string {
	return gidVersion + gidComponent(job) + ":" + gidComponent(uid) + ":"
}

// gidComponent writes s with its length, or its hash when it is long or
// holds what a gid should not (invalid UTF-8, control characters).
func gidComponent(s string) string {
	if len(s) <= maxGIDComponentBytes && printable(s) {
		return strconv.Itoa(len(s)) + "." + s
	}
	h := sha256.Sum256([]byte(s))
	return "#" + hex.EncodeToString(h[:16])
}

func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// formatGID is the id of subtask sub's transaction of checkpoint id.
func formatGID(prefix string, sub int, id checkpoint.ID) string {
	return prefix + strconv.Itoa(sub) + ":" + strconv.FormatUint(uint64(id), 10)
}

// parseGID reads subtask and checkpoint from a gid that starts with prefix.
// It accepts only what formatGID writes (decimal numbers without sign or leading
// zeros), so a gid of another sink is never taken for one of this one's.
func parseGID(prefix, gid string) (int, checkpoint.ID, bool) {
	rest, ok := strings.CutPrefix(gid, prefix)
	if !ok {
		return 0, 0, false
	}
	subStr, idStr, ok := strings.Cut(rest, ":")
	if !ok {
		return 0, 0, false
	}
	sub, err1 := strconv.Atoi(subStr)
	id, err2 := strconv.ParseUint(idStr, 10, 64)
	if err1 != nil || err2 != nil || sub < 0 || strconv.Itoa(sub) != subStr || strconv.FormatUint(id, 10) != idStr {
		return 0, 0, false
	}
	return sub, checkpoint.ID(id), true
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
