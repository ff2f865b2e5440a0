// Package idpart writes names into external ids (PostgreSQL gids, Kafka
// transactional ids) so that ids built of several names never coincide.
package idpart

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// MaxBytes bounds a name as Of writes it; a longer one is hashed.
const MaxBytes = 64

// Of writes s as <length in bytes>.<s>, or as #<32 hex digits of its
// SHA-256> when s is longer than MaxBytes or not printable UTF-8 (invalid,
// or holding control characters). The length makes ids of several parts
// differ whatever the names hold: "a-b" then "c" is 3.a-b-1.c, "a" then
// "b-c" is 1.a-3.b-c, and neither is a prefix of the other.
func Of(s string) string {
	if len(s) <= MaxBytes && printable(s) {
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
